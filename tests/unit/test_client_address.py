"""Who the client is, behind trusted proxies or none: X-Forwarded-For read from the right."""

import ipaddress

import pytest
from litestar.connection import ASGIConnection

from jobledger.api.security import client_address, served_over_https

PROXIES = (ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("::1/128"))


def connection(peer: str, *forwarded: str, proto: str = "") -> ASGIConnection:  # type: ignore[type-arg]
    headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
    if proto:
        headers.append((b"x-forwarded-proto", proto.encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "root_path": "",
        "query_string": b"",
        "scheme": "http",
        "server": ("api", 80),
        "client": (peer, 40000),
        "headers": headers,
    }
    return ASGIConnection(scope)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),  # untrusted peer: header ignored
        ("10.0.0.5", [], "10.0.0.5"),  # a proxy that sent no header is the client
        ("10.0.0.5", ["198.51.100.1"], "198.51.100.1"),
        ("10.0.0.5", ["6.6.6.6, 198.51.100.1"], "198.51.100.1"),  # the left part is forgeable
        ("10.0.0.5", ["6.6.6.6, 198.51.100.1, 10.0.0.7"], "198.51.100.1"),  # a chain of proxies
        ("10.0.0.5", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),  # several header lines
        ("10.0.0.5", ["10.0.0.8, 10.0.0.7"], "10.0.0.8"),  # only proxies: the left-most one
        ("10.0.0.5", ["not-an-address, 10.0.0.7"], "10.0.0.7"),  # garbage stops the walk
        ("::1", ["2001:db8::5"], "2001:db8::5"),
        ("::ffff:10.0.0.5", ["198.51.100.1"], "198.51.100.1"),  # IPv4 on a dual-stack socket
    ],
)
def test_the_client_is_the_right_most_untrusted_address(
    peer: str, forwarded: list[str], client: str
) -> None:
    """If the peer is a trusted proxy, then the client is the right-most address of
    X-Forwarded-For that is not a trusted proxy; otherwise the peer itself."""
    assert client_address(connection(peer, *forwarded), PROXIES) == client


def test_no_proxy_is_trusted_by_default() -> None:
    """If no proxies are trusted, then X-Forwarded-For is ignored even from loopback."""
    assert client_address(connection("127.0.0.1", "198.51.100.1"), ()) == "127.0.0.1"


def test_https_is_taken_from_a_trusted_proxy_only() -> None:
    """If X-Forwarded-Proto says https, then only a trusted proxy's word counts."""
    assert served_over_https(connection("10.0.0.5", proto="https"), PROXIES)
    assert not served_over_https(connection("203.0.113.9", proto="https"), PROXIES)
    assert not served_over_https(connection("10.0.0.5", proto="http"), PROXIES)
