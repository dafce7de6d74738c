"""notify.send against real receivers on the loopback interface: an HTTP server for the
webhook and Slack channels, an aiosmtpd server for email."""

import asyncio
import base64
import email
import email.policy
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from tests.ports import free_port

from jobledger.domain.notifications import Channel, ChannelKind, Delivery, NotifyOn
from jobledger.runtime.handlers.base import (
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
    PermanentError,
)
from jobledger.runtime.handlers.notify import NotifySettings, make_notify_handler
from jobledger.runtime.handlers.webhook import WebhookSettings

LOOPBACK_ONLY = WebhookSettings(allow=("127.0.0.1",), timeout=5.0)
EXECUTION = uuid.UUID("00000000-0000-4000-8000-0000000000b2")
PUBLIC_URL = "https://jobs.example.com"
LINK = f"/ui/executions/{EXECUTION}"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    seen: list[Seen] = field(default_factory=list)


def _receiver_class(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            receiver.seen.append(Seen(self.path, headers, body))
            status = 500 if self.path.startswith("/fail") else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (overrides)
            pass  # keep test output clean

    return Recorder


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _receiver_class(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Inbox:
    """An aiosmtpd handler that keeps what it takes and refuses nobody@ for good."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.logins: list[tuple[str, str]] = []

    async def handle_RCPT(  # noqa: N802 (aiosmtpd's hook name)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        del server, session, options
        if address.startswith("nobody@"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802 (aiosmtpd's hook name)
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        del server, session
        self.envelopes.append(envelope)
        return "250 OK"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        del server, session, envelope, mechanism
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login.decode(), data.password.decode()))
        # handled=False: aiosmtpd answers (235 or 535) itself.
        return AuthResult(success=data.password == b"p@ss", handled=False)

    def received(self) -> EmailMessage:
        [envelope] = self.envelopes
        assert isinstance(envelope.content, bytes)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    # Logins over plain text are for this loopback test only.
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        authenticator=inbox.authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def _payload(channel: Channel) -> dict[str, Any]:
    delivery = Delivery(
        rule="payments-dead",
        on=NotifyOn.DEAD_LETTER,
        subject="payments.sync was dead-lettered",
        text="attempt 5 of 5 failed: timeout",
        channel=channel,
        link=LINK,
        facts={"job": "payments.sync"},
        at=datetime(2026, 3, 1, 12, 30, tzinfo=UTC),
    )
    built: dict[str, Any] = msgspec.to_builtins(delivery)
    return built


def _run(
    channel: Channel, settings: NotifySettings, webhook: WebhookSettings = LOOPBACK_ONLY
) -> dict[str, Any]:
    ctx = HandlerContext(
        execution_id=EXECUTION,
        job_id=None,
        attempt=2,
        lease_deadline=datetime.now(UTC) + timedelta(minutes=1),
        payload=_payload(channel),
    )
    handler = make_notify_handler(settings, webhook)

    async def call() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(call())


def test_a_signed_webhook_is_verified_by_its_receiver(receiver: Receiver) -> None:
    """If a webhook channel names a secret, then the receiver gets the notification as
    JSON with Standard Webhooks headers whose HMAC it verifies from the raw body, the
    execution id as webhook-id; the result shows the origin but not the path or query."""
    key = secrets.token_bytes(24)
    secret = "whsec_" + base64.b64encode(key).decode()
    channel = Channel(kind=ChannelKind.WEBHOOK, url=f"{receiver.url}/hook?token=t0k", secret="OPS")
    settings = NotifySettings(public_url=PUBLIC_URL, secrets={"OPS": secret})
    result = _run(channel, settings)
    assert result == {"channel": "webhook", "to": receiver.url, "status": 200}
    [seen] = receiver.seen
    assert seen.path == "/hook?token=t0k"
    assert seen.headers["content-type"] == "application/json"
    message_id, timestamp = seen.headers["webhook-id"], seen.headers["webhook-timestamp"]
    assert message_id == str(EXECUTION)
    assert abs(int(timestamp) - time.time()) < 60
    signed = f"{message_id}.{timestamp}.".encode() + seen.body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    version, _, signature = seen.headers["webhook-signature"].partition(",")
    assert version == "v1"
    assert hmac.compare_digest(signature, expected)
    body = json.loads(seen.body)
    assert body["type"] == "jobledger.notification"
    assert (body["rule"], body["on"], body["facts"]) == (
        "payments-dead",
        "dead_letter",
        {"job": "payments.sync"},
    )
    assert body["link"] == PUBLIC_URL + LINK


def test_an_unsigned_webhook_has_no_signature_headers(receiver: Receiver) -> None:
    """If a webhook channel names no secret, then no webhook-* header is sent, and the
    link is the dashboard path without a public URL."""
    _run(Channel(kind=ChannelKind.WEBHOOK, url=f"{receiver.url}/hook"), NotifySettings())
    [seen] = receiver.seen
    assert not [name for name in seen.headers if name.startswith("webhook-")]
    assert seen.headers["idempotency-key"] == str(EXECUTION)
    assert json.loads(seen.body)["link"] == LINK


def test_slack_gets_its_text_body(receiver: Receiver) -> None:
    """If the channel is Slack, then the receiver gets {"text": ...} with the subject in
    bold, the text and the link."""
    channel = Channel(kind=ChannelKind.SLACK, url=f"{receiver.url}/services/T0/B0/secret")
    result = _run(channel, NotifySettings(public_url=PUBLIC_URL))
    assert result == {"channel": "slack", "to": receiver.url, "status": 200}
    [seen] = receiver.seen
    assert json.loads(seen.body) == {
        "text": (
            f"*payments.sync was dead-lettered*\nattempt 5 of 5 failed: timeout\n{PUBLIC_URL}{LINK}"
        )
    }


def test_a_private_receiver_is_refused_without_the_allowlist(receiver: Receiver) -> None:
    """If the receiver is on a loopback address that is not allowlisted, then the SSRF
    guard refuses it and nothing reaches it."""
    channel = Channel(kind=ChannelKind.WEBHOOK, url=f"{receiver.url}/hook")
    with pytest.raises(
        PayloadRefusedError,
        match=re.escape("notify.send: 127.0.0.1 is a loopback address; allow it with"),
    ):
        _run(channel, NotifySettings(), WebhookSettings())
    assert receiver.seen == []


def test_a_failing_receiver_fails_the_attempt(receiver: Receiver) -> None:
    """If the receiver answers 500, then the attempt fails (to be retried), naming the
    origin only."""
    channel = Channel(kind=ChannelKind.WEBHOOK, url=f"{receiver.url}/fail?token=t0k")
    with pytest.raises(HandlerError, match="answered 500, expected 2xx") as failed:
        _run(channel, NotifySettings())
    assert type(failed.value) is HandlerError
    assert "t0k" not in str(failed.value)


def test_an_email_arrives_with_subject_recipients_and_link(
    smtp_server: tuple[Inbox, int],
) -> None:
    """If the channel is email, then the SMTP server gets one message to every address,
    with the subject, the text and the link, and the execution id in its headers."""
    inbox, port = smtp_server
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com", "dev@example.com"))
    settings = NotifySettings(
        smtp_url=f"smtp://127.0.0.1:{port}", smtp_from="jobs@example.com", public_url=PUBLIC_URL
    )
    result = _run(channel, settings)
    assert result == {
        "channel": "email",
        "to": "ops@example.com, dev@example.com",
        "status": "sent",
    }
    [envelope] = inbox.envelopes
    assert envelope.mail_from == "jobs@example.com"
    assert envelope.rcpt_tos == ["ops@example.com", "dev@example.com"]
    message = inbox.received()
    assert message["Subject"] == "payments.sync was dead-lettered"
    assert message["To"] == "ops@example.com, dev@example.com"
    assert message["X-Jobledger-Execution"] == str(EXECUTION)
    assert message["Message-ID"] == f"<{EXECUTION}@jobledger>"
    body = message.get_body()
    assert body is not None
    text = body.get_content().replace("\r\n", "\n")  # as it came over the wire
    assert text == f"attempt 5 of 5 failed: timeout\n\n{PUBLIC_URL}{LINK}\n"


def test_the_smtp_login_is_used_and_a_refused_one_never_shows_the_password(
    smtp_server: tuple[Inbox, int],
) -> None:
    """If the SMTP URL has a user and a (percent-encoded) password, then the client logs
    in with them decoded; a refused login fails permanently without the password."""
    inbox, port = smtp_server
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com",))
    _run(channel, NotifySettings(smtp_url=f"smtp://mailer:p%40ss@127.0.0.1:{port}"))
    assert inbox.logins == [("mailer", "p@ss")]
    with pytest.raises(PermanentError, match="answered 535") as refused:
        _run(channel, NotifySettings(smtp_url=f"smtp://mailer:hunter2@127.0.0.1:{port}"))
    assert "hunter2" not in str(refused.value)
    assert len(inbox.envelopes) == 1


def test_a_recipient_refused_for_good_is_permanent(smtp_server: tuple[Inbox, int]) -> None:
    """If the SMTP server refuses the only recipient with a 5xx, then the run fails
    permanently, naming the address and the server's reply."""
    inbox, port = smtp_server
    channel = Channel(kind=ChannelKind.EMAIL, to=("nobody@example.com",))
    with pytest.raises(PermanentError, match=r"nobody@example\.com: 550 5\.1\.1 no such user"):
        _run(channel, NotifySettings(smtp_url=f"smtp://127.0.0.1:{port}"))
    assert inbox.envelopes == []


def test_a_partly_refused_email_is_sent_and_says_who_did_not_get_it(
    smtp_server: tuple[Inbox, int],
) -> None:
    """If the server takes one recipient and refuses another, then the run succeeds (a
    retry would repeat it to the first) and its result names the refused address."""
    inbox, port = smtp_server
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com", "nobody@example.com"))
    result = _run(channel, NotifySettings(smtp_url=f"smtp://127.0.0.1:{port}"))
    assert result["status"] == "sent"
    assert result["refused"] == "nobody@example.com: 550 5.1.1 no such user"
    assert inbox.envelopes[0].rcpt_tos == ["ops@example.com"]


def test_a_mail_server_that_is_down_fails_the_attempt() -> None:
    """If nothing listens at the SMTP URL, then the attempt fails (to be retried), naming
    the server without its password."""
    port = free_port()
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com",))
    settings = NotifySettings(smtp_url=f"smtp://mailer:hunter2@127.0.0.1:{port}", timeout=2)
    with pytest.raises(HandlerError, match=f"cannot send through smtp://127.0.0.1:{port}") as down:
        _run(channel, settings)
    assert type(down.value) is HandlerError
    assert "hunter2" not in str(down.value)
