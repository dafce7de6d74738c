"""The webhook handler against a real HTTP server on the loopback interface."""

import asyncio
import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jobledger.runtime.handlers.base import HandlerContext, HandlerError
from jobledger.runtime.handlers.webhook import WebhookSettings, make_webhook_handler

LOOPBACK_ONLY = WebhookSettings(allow=("127.0.0.1",), timeout=5.0)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Endpoint:
    """The test server: what it saw, and a gate that holds the slow route."""

    url: str
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _handler_class(endpoint: Endpoint) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {
        "/hook": (200, {}, b"accepted"),
        "/fail": (500, {}, b"boom " * 200),
        "/big": (200, {}, b"x" * 10_000),
        "/to-metadata": (302, {"Location": "http://169.254.169.254/latest/meta-data"}, b""),
        "/to-hook": (302, {"Location": "/hook"}, b""),
        "/loop": (302, {"Location": "/loop"}, b""),
    }

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def do_PUT(self) -> None:
            self._answer()

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            endpoint.seen.append(Seen(self.command, self.path, headers, body))
            if self.path == "/slow":
                endpoint.release.wait(10)
            status, extra, content = routes.get(self.path, (200, {}, b"ok"))
            if self.path == "/to-localhost":
                status, extra = 307, {"Location": endpoint.url.replace("127.0.0.1", "localhost")}
            try:
                self.send_response(status)
                for name, value in {**extra, "Content-Length": str(len(content))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(content)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (overrides)
            pass  # keep test output clean

    return Recorder


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    endpoint = Endpoint(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(endpoint))
    server.daemon_threads = True
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        endpoint.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _run(settings: WebhookSettings, **payload: Any) -> dict[str, Any]:
    ctx = HandlerContext(
        execution_id=uuid.UUID("00000000-0000-4000-8000-000000000001"),
        job_id=None,
        attempt=1,
        lease_deadline=datetime.now(UTC) + timedelta(minutes=1),
        payload=payload,
    )
    handler = make_webhook_handler(settings)

    async def call() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(call())


def test_post_is_delivered_with_idempotency_key_and_json(endpoint: Endpoint) -> None:
    """If the host is allowlisted, then the POST arrives with the key and the JSON body."""
    result = _run(LOOPBACK_ONLY, url=f"{endpoint.url}/hook", body={"order": 42})
    assert result["status"] == 200
    assert result["body_excerpt"] == "accepted"
    assert result["bytes"] == len(b"accepted")
    assert result["elapsed_ms"] >= 0
    [seen] = endpoint.seen
    assert seen.method == "POST"
    assert seen.path == "/hook"
    assert seen.headers["idempotency-key"] == "00000000-0000-4000-8000-000000000001"
    assert seen.headers["content-type"] == "application/json"
    assert json.loads(seen.body) == {"order": 42}


def test_payload_idempotency_key_and_headers_win(endpoint: Endpoint) -> None:
    """If the payload sets an Idempotency-Key, then it is sent instead of the execution id."""
    _run(
        LOOPBACK_ONLY,
        url=f"{endpoint.url}/hook",
        method="put",
        headers={"idempotency-key": "mine", "X-Trace": "t1"},
        body="plain text",
    )
    [seen] = endpoint.seen
    assert (seen.method, seen.body) == ("PUT", b"plain text")
    assert seen.headers["idempotency-key"] == "mine"
    assert seen.headers["x-trace"] == "t1"


def test_server_error_fails_the_attempt_with_a_capped_excerpt(endpoint: Endpoint) -> None:
    """If the server answers 500, then HandlerError names the status and a short excerpt."""
    with pytest.raises(
        HandlerError, match=r"answered 500, expected 2xx; body: 'boom boom"
    ) as error:
        _run(LOOPBACK_ONLY, url=f"{endpoint.url}/fail")
    assert len(str(error.value)) < 400


def test_expected_status_overrides_the_default(endpoint: Endpoint) -> None:
    """If expected_status lists 500, then a 500 succeeds and a 200 fails."""
    assert _run(LOOPBACK_ONLY, url=f"{endpoint.url}/fail", expected_status=[500])["status"] == 500
    with pytest.raises(HandlerError, match="answered 200, expected 201"):
        _run(LOOPBACK_ONLY, url=f"{endpoint.url}/hook", expected_status=[201])


def test_redirect_to_metadata_is_refused_despite_allowlisted_origin(endpoint: Endpoint) -> None:
    """If an allowlisted host redirects to 169.254.169.254, then the redirect is refused."""
    with pytest.raises(HandlerError, match=re.escape("169.254.169.254 is a link-local address")):
        _run(LOOPBACK_ONLY, url=f"{endpoint.url}/to-metadata")
    assert [seen.path for seen in endpoint.seen] == ["/to-metadata"]


def test_allowed_redirect_is_followed_as_get(endpoint: Endpoint) -> None:
    """If a POST gets a 302 to an allowed place, then it is followed there as a GET."""
    result = _run(LOOPBACK_ONLY, url=f"{endpoint.url}/to-hook", body={"a": 1})
    assert result["body_excerpt"] == "accepted"
    assert [(seen.method, seen.path) for seen in endpoint.seen] == [
        ("POST", "/to-hook"),
        ("GET", "/hook"),
    ]
    assert endpoint.seen[1].headers["idempotency-key"] == "00000000-0000-4000-8000-000000000001"


def test_allowlisted_name_is_sent_to_its_checked_address_with_its_host(
    endpoint: Endpoint,
) -> None:
    """If a name is allowlisted, then the request keeps the name as Host while going to its IP."""
    port = endpoint.url.rpartition(":")[2]
    settings = WebhookSettings(allow=("localhost",))
    assert _run(settings, url=f"http://localhost:{port}/hook")["status"] == 200
    [seen] = endpoint.seen
    assert seen.headers["host"] == f"localhost:{port}"


def test_credentials_are_dropped_on_a_redirect_to_another_origin(endpoint: Endpoint) -> None:
    """If a redirect changes the origin, then Authorization is not sent there."""
    settings = WebhookSettings(allow=("127.0.0.1", "localhost"))
    _run(
        settings,
        url=f"{endpoint.url}/to-localhost",
        headers={"Authorization": "Bearer s3cret"},
        body={"a": 1},
    )
    first, second = endpoint.seen
    assert first.headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in second.headers
    # 307 keeps the method and the body.
    assert (second.method, json.loads(second.body)) == ("POST", {"a": 1})
    assert second.headers["host"] == endpoint.url.replace("http://127.0.0.1", "localhost")


def test_redirect_loop_stops_at_max_redirects(endpoint: Endpoint) -> None:
    """If redirects go on past max_redirects, then the attempt fails after that many."""
    settings = WebhookSettings(allow=("127.0.0.1",), max_redirects=2)
    with pytest.raises(HandlerError, match="more than 2 redirects"):
        _run(settings, url=f"{endpoint.url}/loop")
    assert len(endpoint.seen) == 3


def test_loopback_without_allowlist_is_refused_before_sending(endpoint: Endpoint) -> None:
    """If 127.0.0.1 is not allowlisted, then nothing reaches the server."""
    with pytest.raises(
        HandlerError, match=re.escape("127.0.0.1 is a loopback address; allow it with")
    ):
        _run(WebhookSettings(), url=f"{endpoint.url}/hook")
    assert endpoint.seen == []


def test_slow_endpoint_times_out(endpoint: Endpoint) -> None:
    """If the server answers later than the timeout, then HandlerError says it timed out."""
    settings = WebhookSettings(allow=("127.0.0.1",), timeout=0.5)
    with pytest.raises(HandlerError, match=re.escape("timed out after 0.5s")):
        _run(settings, url=f"{endpoint.url}/slow")


def test_large_body_is_read_up_to_the_cap(endpoint: Endpoint) -> None:
    """If the body is larger than max_response_bytes, then only that much is read."""
    settings = WebhookSettings(allow=("127.0.0.1",), max_response_bytes=1000)
    result = _run(settings, url=f"{endpoint.url}/big")
    assert (result["bytes"], result["truncated"]) == (1000, True)
    assert result["body_excerpt"] == "x" * 500


def test_bad_payload_is_refused_with_the_fix(endpoint: Endpoint) -> None:
    """If the payload misses its url or sets a framing header, then HandlerError says so."""
    with pytest.raises(HandlerError, match=r"payload\.url is required"):
        _run(LOOPBACK_ONLY)
    with pytest.raises(HandlerError, match="may not set Host"):
        _run(LOOPBACK_ONLY, url=f"{endpoint.url}/hook", headers={"Host": "other"})
    assert endpoint.seen == []
