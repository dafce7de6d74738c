"""The ``http.webhook`` handler: one HTTP request per attempt, guarded against SSRF.
``send``, that guarded request, is every built-in handler's way out over HTTP
(``notify.send`` delivers webhook and Slack notifications with it).

Every destination, the first and each redirect target, is resolved once, checked, and
then connected to by the checked address: a DNS answer that changes between the check
and the connection (DNS rebinding) cannot steer the request somewhere else.

A refused destination or a malformed payload is a PayloadRefusedError: that execution's
error, not a sign that the receiver is down, so the breaker does not count it. A URL
is never quoted with its query string or password, which often carry tokens.
"""

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx

from jobledger.infra.settings import mask_url
from jobledger.runtime.handlers.base import (
    Handler,
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
)

NAME = "http.webhook"
ALLOW_SETTING = "JOBLEDGER_WEBHOOK_ALLOW"
EXCERPT_CHARS = 500
ERROR_EXCERPT_CHARS = 200
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
HTTP_STATUSES = range(100, 600)
SUCCESS_STATUSES = range(200, 300)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Framing and routing headers come from the URL and the body, never from the payload.
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# Credentials must not follow a redirect to another origin.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services that are not already link-local.
METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    }
)
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class WebhookSettings:
    allow: tuple[str, ...] = ()  # hosts or CIDR networks that may be private or internal
    connect_timeout: float = 5.0
    timeout: float = 30.0  # also bounds the whole delivery, redirects included
    max_response_bytes: int = 64 * 1024
    max_redirects: int = 5


@dataclass(frozen=True)
class _Outgoing:
    method: str
    headers: dict[str, str]
    content: bytes | None


# --- The guard: pure, so every rule is testable without a network. ---


def check_destination(
    url: str, resolved: Iterable[str], allow: Iterable[str] = (), *, name: str = NAME
) -> list[IPAddress]:
    """Returns the addresses that ``url`` may be sent to, or raises PayloadRefusedError.

    ``resolved`` is what the host name resolved to; it is ignored when the host is an
    IP literal. Every address must be public unless the host name or the address is
    in ``allow`` (names, addresses or CIDR networks). ``name`` is the handler the
    messages name.
    """
    target = parse_url(url, name=name)
    host = target.host.rstrip(".").lower()
    literal = _ip_literal(host)
    addresses = [literal] if literal else _parse_resolved(host, resolved, name)
    names, networks = _parse_allow(allow)
    if host in names:
        return addresses
    for address in addresses:
        problem = _problem(address)
        if problem and not any(_in_networks(each, networks) for each in _unwrapped(address)):
            shown = _shown(address)
            where = f"{shown} is" if literal else f"{host} resolves to {shown},"
            raise PayloadRefusedError(
                f"{name}: {where} {problem} address; allow it with {ALLOW_SETTING} if it is meant"
            )
    return addresses


def parse_url(url: str, *, name: str = NAME) -> httpx.URL:
    """Parses ``url``, refusing anything but http(s) with a host."""
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise PayloadRefusedError(
            f"{name}: {shown_url(url)!r} is not a valid URL ({_without_url(error, url)})"
        ) from None
    if not target.scheme:
        raise PayloadRefusedError(
            f"{name}: {shown_url(url)!r} has no scheme; use an http or https URL"
        )
    if target.scheme not in {"http", "https"}:
        raise PayloadRefusedError(
            f"{name}: {target.scheme[:20]!r} URLs are not allowed; use http or https"
        )
    if not target.host:
        raise PayloadRefusedError(f"{name}: the URL has no host; use http(s)://host/path")
    return target


SHOWN_URL_CHARS = 100


def shown_url(url: str) -> str:
    """``url`` as an error or a log line may quote it: its query string and fragment as
    ``***`` (they often carry tokens), a password in it masked, at most 100 characters."""
    head, query, _ = url.partition("?")
    head, fragment, _ = head.partition("#")
    masked = mask_url(head)[:SHOWN_URL_CHARS]
    return masked + ("?***" if query else "") + ("#***" if fragment and not query else "")


def _without_url(error: Exception, url: str) -> str:
    # httpx quotes the URL, or a part of it, in some of its messages.
    text = str(error).replace(url, shown_url(url))
    for secret in (url.partition("?")[2], url.partition("#")[2]):
        if secret:
            text = text.replace(secret, "***")
    return mask_url(text)[:SHOWN_URL_CHARS]


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _parse_resolved(host: str, resolved: Iterable[str], name: str) -> list[IPAddress]:
    addresses: list[IPAddress] = []
    for text in resolved:
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise HandlerError(f"{name}: {host} did not resolve to any address; check the URL")
    return addresses


def _parse_allow(allow: Iterable[str]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    names: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in (each.strip() for each in allow):
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError:
            if entry:
                names.add(entry.rstrip(".").lower())
    return frozenset(names), tuple(networks)


def _shown(address: IPAddress) -> str:
    # Python prints "::ffff:127.0.0.1" as "::ffff:7f00:1"; keep the dotted form readable.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def _in_networks(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def _unwrapped(address: IPAddress) -> list[IPAddress]:
    """The address and any IPv4 address embedded in it (mapped, NAT64, 6to4)."""
    found: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            found.append(address.ipv4_mapped)
        if address.sixtofour:
            found.append(address.sixtofour)
        if address in NAT64_PREFIX:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _problem(address: IPAddress) -> str | None:
    """Names why ``address`` is not public, most specific reason first."""
    # Embedded IPv4 first: "::ffff:127.0.0.1" is better described as loopback than private.
    for each in reversed(_unwrapped(address)):
        checks = (
            (each.is_unspecified, "an unspecified"),
            (each.is_loopback, "a loopback"),
            (each.is_link_local, "a link-local"),
            (each in METADATA_ADDRESSES, "a cloud metadata"),
            (each.is_multicast, "a multicast"),
            (each.is_private, "a private"),
            (each.is_reserved, "a reserved"),
            (not each.is_global, "a non-public"),
        )
        for matched, problem in checks:
            if matched:
                return problem
    return None


# --- The payload. ---


def _outgoing(ctx: HandlerContext) -> tuple[str, _Outgoing, frozenset[int] | None]:
    payload = ctx.payload
    url = payload.get("url")
    if not isinstance(url, str) or not url:
        raise PayloadRefusedError(f"{NAME}: payload.url is required, e.g. https://example.com/hook")
    method = payload.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise PayloadRefusedError(
            f"{NAME}: method {method!r} is not supported; use one of {_list(METHODS)}"
        )
    headers = _headers(payload.get("headers", {}))
    content, content_type = _body(payload)
    if content_type and not _has(headers, "content-type"):
        headers["Content-Type"] = content_type
    return url, _Outgoing(method.upper(), headers, content), _expected(payload)


def _headers(given: object) -> dict[str, str]:
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        raise PayloadRefusedError(f"{NAME}: payload.headers must map header names to string values")
    reserved = sorted(name for name in given if name.lower() in RESERVED_HEADERS)
    if reserved:
        raise PayloadRefusedError(
            f"{NAME}: payload.headers may not set {', '.join(reserved)}; "
            "they come from the URL and the body"
        )
    return dict(given)


def _body(payload: dict[str, Any]) -> tuple[bytes | None, str | None]:
    body = payload.get("body")
    if body is None:
        return None, None
    if isinstance(body, str):
        return body.encode(), None
    try:
        encoded = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise PayloadRefusedError(
            f"{NAME}: payload.body is not JSON-serializable ({error})"
        ) from None
    return encoded.encode(), "application/json"


def _expected(payload: dict[str, Any]) -> frozenset[int] | None:
    expected = payload.get("expected_status")
    if expected is None:
        return None
    if not isinstance(expected, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s in HTTP_STATUSES for s in expected
    ):
        raise PayloadRefusedError(
            f"{NAME}: payload.expected_status must be a list of HTTP statuses"
        )
    return frozenset(expected)


def _has(headers: dict[str, str], name: str) -> bool:
    return any(key.lower() == name for key in headers)


def _list(items: Iterable[object]) -> str:
    return ", ".join(sorted(str(item) for item in items))


# --- Delivery. ---


def make_webhook_handler(settings: WebhookSettings) -> Handler:
    """The ``http.webhook`` handler, bound to ``settings``."""

    async def webhook(ctx: HandlerContext) -> dict[str, Any]:
        """Calls an http(s) URL (payload: url, method, headers, body, expected_status)."""
        url, outgoing, expected = _outgoing(ctx)
        return await send(
            ctx,
            settings,
            url,
            method=outgoing.method,
            headers=outgoing.headers,
            content=outgoing.content,
            expected=expected,
        )

    return webhook


async def send(
    ctx: HandlerContext,
    settings: WebhookSettings,
    url: str,
    *,
    method: str = "POST",
    headers: Mapping[str, str],
    content: bytes | None,
    expected: Collection[int] | None = None,
    name: str = NAME,
) -> dict[str, Any]:
    """One request to ``url`` through the SSRF guard, within ``settings``' timeouts,
    redirect rules and response cap: the delivery of every handler that calls out over
    HTTP. ``expected``: the statuses that succeed (None: any 2xx); ``name``: the
    handler its errors name. Returns the status, time taken and a body excerpt; raises
    PayloadRefusedError for a refused destination, HandlerError for a failure."""
    target = parse_url(url, name=name)
    outgoing = _Outgoing(method.upper(), _with_defaults(headers, str(ctx.execution_id)), content)
    wanted = frozenset(expected) if expected is not None else None
    origin = origin_text(target)
    try:
        async with asyncio.timeout(settings.timeout):
            return await _deliver(ctx, settings, target, outgoing, expected=wanted, name=name)
    except (TimeoutError, httpx.TimeoutException):
        raise HandlerError(f"{name}: {origin} timed out after {settings.timeout:g}s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise HandlerError(
            f"{name}: request to {origin} failed ({type(error).__name__}: {error})"
        ) from None


def _with_defaults(given: Mapping[str, str], idempotency_key: str) -> dict[str, str]:
    headers = dict(given)
    if not _has(headers, "idempotency-key"):
        # The execution id is stable across attempts, so the receiver can drop repeats.
        headers["Idempotency-Key"] = idempotency_key
    if not _has(headers, "accept-encoding"):
        # An uncompressed body keeps the byte cap honest (no decompression bombs).
        headers["Accept-Encoding"] = "identity"
    return headers


async def _deliver(
    ctx: HandlerContext,
    settings: WebhookSettings,
    url: httpx.URL,
    outgoing: _Outgoing,
    *,
    expected: frozenset[int] | None,
    name: str,
) -> dict[str, Any]:
    started = time.monotonic()
    timeout = httpx.Timeout(settings.timeout, connect=settings.connect_timeout)
    # trust_env=False: a proxy from the environment would do its own, unchecked, resolving.
    async with httpx.AsyncClient(
        timeout=timeout, follow_redirects=False, trust_env=False
    ) as client:
        for _ in range(settings.max_redirects + 1):
            addresses = await _vetted(ctx, url, settings.allow, name)
            async with _opened(client, url, addresses, outgoing, name) as response:
                hop = _next_hop(url, outgoing, response, name)
                if hop is None:
                    body, truncated = await _read_capped(response, settings.max_response_bytes)
                    elapsed_ms = round((time.monotonic() - started) * 1000)
                    return _finish(
                        ctx,
                        url,
                        status=response.status_code,
                        body=body,
                        truncated=truncated,
                        expected=expected,
                        elapsed_ms=elapsed_ms,
                        name=name,
                    )
            ctx.log.info(
                "handler.webhook.redirected",
                status=response.status_code,
                host=hop[0].host,
            )
            url, outgoing = hop
    raise HandlerError(
        f"{name}: more than {settings.max_redirects} redirects; point the job at the final URL"
    )


async def _vetted(
    ctx: HandlerContext, url: httpx.URL, allow: tuple[str, ...], name: str
) -> list[IPAddress]:
    resolved: list[str] = []
    if _ip_literal(url.host) is None:
        resolved = await _resolve(url, name)
    try:
        return check_destination(str(url), resolved, allow, name=name)
    except HandlerError as error:
        ctx.log.warning(
            "handler.webhook.refused",
            host=url.host,
            reason=str(error),
        )
        raise


async def _resolve(url: httpx.URL, name: str) -> list[str]:
    host = url.raw_host.decode("ascii")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise HandlerError(f"{name}: cannot resolve {url.host} ({error}); check the URL") from None
    return [str(info[4][0]) for info in infos]


@asynccontextmanager
async def _opened(
    client: httpx.AsyncClient,
    url: httpx.URL,
    addresses: list[IPAddress],
    outgoing: _Outgoing,
    name: str,
) -> AsyncIterator[httpx.Response]:
    """A streamed response from the first checked address that accepts the connection."""
    failure: httpx.TransportError | None = None
    for address in addresses:
        request = client.build_request(
            outgoing.method,
            url.copy_with(host=str(address)),
            headers={**outgoing.headers, "Host": url.netloc.decode("ascii")},
            content=outgoing.content,
            # The certificate is checked against the name, not the pinned address.
            extensions={"sni_hostname": url.raw_host.decode("ascii")},
        )
        try:
            response = await client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            failure = error
            continue
        try:
            yield response
        finally:
            await response.aclose()
        return
    raise failure or HandlerError(f"{name}: {url.host} has no address to connect to")


def _next_hop(
    url: httpx.URL, outgoing: _Outgoing, response: httpx.Response, name: str
) -> tuple[httpx.URL, _Outgoing] | None:
    location = response.headers.get("location")
    if response.status_code not in REDIRECT_STATUSES or not location:
        return None
    try:
        target = url.join(location)
    except httpx.InvalidURL:
        raise HandlerError(f"{name}: {url.host} redirected to an invalid URL") from None
    method, content, headers = outgoing.method, outgoing.content, dict(outgoing.headers)
    # As browsers do: 303 always, and 301/302 after a POST, continue as a GET.
    status = response.status_code
    if (status == HTTPStatus.SEE_OTHER and method != "HEAD") or (
        status in {HTTPStatus.MOVED_PERMANENTLY, HTTPStatus.FOUND} and method == "POST"
    ):
        method, content = "GET", None
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if _origin(target) != _origin(url):
        headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}
    return target, _Outgoing(method, headers, content)


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    body = bytearray()
    # Stopping early is safe: the caller closes the response, which drops the rest.
    async for chunk in response.aiter_bytes():
        room = limit - len(body)
        body += chunk[:room]
        if len(chunk) > room:
            return bytes(body), True
    return bytes(body), False


def _finish(
    ctx: HandlerContext,
    url: httpx.URL,
    *,
    status: int,
    body: bytes,
    truncated: bool,
    expected: frozenset[int] | None,
    elapsed_ms: int,
    name: str,
) -> dict[str, Any]:
    excerpt = body.decode(errors="replace")[:EXCERPT_CHARS]
    if status not in (expected if expected is not None else SUCCESS_STATUSES):
        wanted = _list(expected) if expected is not None else "2xx"
        raise HandlerError(
            f"{name}: {origin_text(url)} answered {status}, expected {wanted}; "
            f"body: {excerpt[:ERROR_EXCERPT_CHARS]!r}"
        )
    ctx.log.info(
        "handler.webhook.delivered",
        host=url.host,
        status=status,
        elapsed_ms=elapsed_ms,
        bytes=len(body),
    )
    return {
        "status": status,
        "elapsed_ms": elapsed_ms,
        "bytes": len(body),
        "body_excerpt": excerpt,
        "truncated": truncated,
    }


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def origin_text(url: httpx.URL) -> str:
    """Where ``url`` goes, as errors and results show it: scheme and host only, as its
    path and query may carry tokens."""
    return f"{url.scheme}://{url.netloc.decode('ascii')}"
