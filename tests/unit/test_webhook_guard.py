"""The webhook SSRF guard: a pure function of the URL, its resolved addresses and the allowlist."""

import ipaddress
import re

import pytest

from jobledger.runtime.handlers.base import HandlerError, PayloadRefusedError
from jobledger.runtime.handlers.webhook import check_destination, parse_url, shown_url

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"


@pytest.mark.parametrize(
    ("url", "resolved", "reason"),
    [
        ("http://127.0.0.1/", [], "127.0.0.1 is a loopback address"),
        ("http://localhost/", ["127.0.0.1"], "localhost resolves to 127.0.0.1, a loopback"),
        ("http://169.254.169.254/latest/meta-data", [], "169.254.169.254 is a link-local"),
        ("http://[::ffff:127.0.0.1]/", [], "::ffff:127.0.0.1 is a loopback address"),
        ("http://10.1.2.3/", [], "10.1.2.3 is a private address"),
        ("http://[::1]/", [], "::1 is a loopback address"),
        ("http://0.0.0.0/", [], "0.0.0.0 is an unspecified address"),
        ("http://[fd00:ec2::254]/", [], "fd00:ec2::254 is a cloud metadata address"),
        ("http://224.0.0.1/", [], "224.0.0.1 is a multicast address"),
        ("http://100.64.0.1/", [], "100.64.0.1 is a non-public address"),
        ("http://[64:ff9b::7f00:1]/", [], "is a loopback address"),
        ("ftp://x/", [PUBLIC_V4], "'ftp' URLs are not allowed; use http or https"),
        ("file:///etc/passwd", [], "'file' URLs are not allowed; use http or https"),
        ("http:///path", [PUBLIC_V4], "the URL has no host"),
        ("http://example.com/", [PUBLIC_V4, "10.0.0.7"], "example.com resolves to 10.0.0.7"),
        ("http://example.com/", [], "did not resolve to any address"),
    ],
)
def test_internal_or_odd_destination_is_refused(url: str, resolved: list[str], reason: str) -> None:
    """If a URL is not http(s) or any address it reaches is internal, then it is refused."""
    with pytest.raises(HandlerError, match=r"^http\.webhook: ") as refused:
        check_destination(url, resolved, allow=())
    assert reason in str(refused.value)


def test_refusal_names_the_setting_that_allows_it() -> None:
    """If an address is refused, then the message says how to allow it."""
    with pytest.raises(HandlerError) as refused:
        check_destination("http://169.254.169.254/latest/meta-data", [], allow=())
    assert str(refused.value) == (
        "http.webhook: 169.254.169.254 is a link-local address; "
        "allow it with JOBLEDGER_WEBHOOK_ALLOW if it is meant"
    )


def test_public_destination_is_accepted_with_all_its_addresses() -> None:
    """If every resolved address is public, then all of them are returned for connecting."""
    addresses = check_destination("https://example.com/hook", [PUBLIC_V4, PUBLIC_V6, PUBLIC_V4])
    assert addresses == [ipaddress.ip_address(PUBLIC_V4), ipaddress.ip_address(PUBLIC_V6)]


def test_public_ip_literal_ignores_the_resolved_list() -> None:
    """If the host is an IP literal, then that literal is the only address checked."""
    addresses = check_destination(f"http://{PUBLIC_V4}:8080/", ["10.0.0.1"])
    assert addresses == [ipaddress.ip_address(PUBLIC_V4)]


@pytest.mark.parametrize(
    ("url", "resolved", "allow"),
    [
        ("http://hooks.internal/x", ["10.0.0.5"], ("hooks.internal",)),
        ("http://HOOKS.internal./x", ["10.0.0.5"], ("hooks.internal",)),
        ("http://svc/x", ["10.20.30.40"], ("10.0.0.0/8",)),
        ("http://127.0.0.1:8000/", [], ("127.0.0.1",)),
        ("http://[::ffff:127.0.0.1]/", [], ("127.0.0.0/8",)),
        ("http://[::1]/", [], ("[::1]",)),
        ("http://169.254.169.254/", [], ("169.254.169.254/32",)),
    ],
)
def test_allowlisted_host_or_network_is_accepted(
    url: str, resolved: list[str], allow: tuple[str, ...]
) -> None:
    """If the host name or the address is allowlisted, then the destination is accepted."""
    assert check_destination(url, resolved, allow)


def test_allowlist_covers_only_what_it_names() -> None:
    """If an address is outside every allowed network, then it is still refused."""
    with pytest.raises(HandlerError, match=re.escape("192.168.1.1 is a private address")):
        check_destination("http://192.168.1.1/", [], allow=("10.0.0.0/8", "hooks.internal"))


def test_allowlisted_name_does_not_allow_other_names_with_the_same_address() -> None:
    """If only a name is allowlisted, then other names with internal addresses are refused."""
    with pytest.raises(HandlerError, match=re.escape("evil.example resolves to 10.0.0.5")):
        check_destination("http://evil.example/", ["10.0.0.5"], allow=("hooks.internal",))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example/x?token=s3cret", "https://hooks.example/x?***"),
        ("https://u:s3cret@hooks.example/x", "https://u:***@hooks.example/x"),
        ("https://hooks.example/x#s3cret", "https://hooks.example/x#***"),
        ("http://[::1/x?token=s3cret&b=1", "http://[::1/x?***"),
        ("https://hooks.example/plain", "https://hooks.example/plain"),
    ],
)
def test_a_quoted_url_hides_its_query_and_password(url: str, shown: str) -> None:
    """If a URL is quoted in an error or a log line, then its query string, fragment
    and password are shown as ***."""
    assert shown_url(url) == shown


@pytest.mark.parametrize(
    "url", ["http://[::1/x?token=s3cret", "no scheme?token=s3cret", "ftp://h/x?token=s3cret"]
)
def test_an_invalid_url_is_refused_as_the_payloads_fault(url: str) -> None:
    """If a webhook URL is invalid, then the refusal is a PayloadRefusedError (the
    breaker does not count it) that does not quote the query string."""
    with pytest.raises(PayloadRefusedError) as refused:
        parse_url(url)
    assert "s3cret" not in str(refused.value)
