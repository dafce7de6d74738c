"""The ``notify.send`` handler: one notification (a ``Delivery``) to its channel.

A webhook or Slack channel is one request through ``http.webhook``'s guarded ``send``:
the same SSRF guard and allowlist (``JOBLEDGER_WEBHOOK_ALLOW``), timeouts, redirect
rules and response cap. A webhook channel with a secret is signed as Standard Webhooks
sign (https://www.standardwebhooks.com), its ``webhook-id`` the execution id, which a
retry keeps, so a receiver can drop a repeat. Email goes over the workers' SMTP server.

What no attempt can mend (a secret or a mail server the workers lack, an address the
server refuses for good) is a PermanentError; what may pass (a server down, an SMTP
4xx) is a HandlerError, tried again as the run's retry policy says. A URL's path and
query and the SMTP password never reach an error, a log line or the result.
"""

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import smtplib
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any, Final, Self
from urllib.parse import unquote, urlsplit
from uuid import UUID

import msgspec

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.notifications import HANDLER, SECRET_PREFIX, Channel, ChannelKind, Delivery
from jobledger.infra.settings import Settings, mask_url, notify_secrets
from jobledger.runtime.handlers.base import (
    Handler,
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
    PermanentError,
)
from jobledger.runtime.handlers.webhook import WebhookSettings, origin_text, parse_url, send

NAME: Final = HANDLER
EVENT_TYPE: Final = "jobledger.notification"
# Standard Webhooks' libraries take a secret with this prefix as base64 key bytes.
WHSEC_PREFIX: Final = "whsec_"
SMTP_URL_SETTING: Final = "JOBLEDGER_SMTP_URL"
SMTP_PORTS: Final = {"smtp": 25, "smtps": 465}
PERMANENT_REPLY: Final = 500  # RFC 5321: a 5yz reply says not to repeat the request
REPLY_CHARS: Final = 200
JSON: Final = {"Content-Type": "application/json"}


def default_sender() -> str:
    return f"jobledger@{socket.gethostname()}"


@dataclass(frozen=True)
class NotifySettings:
    # smtp://user:password@host:587 (STARTTLS when offered) or smtps://host:465.
    smtp_url: str | None = field(default=None, repr=False)
    smtp_from: str = field(default_factory=default_sender)
    public_url: str | None = None  # the dashboard's base URL; without it links are paths
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)  # name -> value
    timeout: float = 30.0  # one email's whole sending

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> Self:
        """From the settings, and the signing secrets from ``environ``."""
        return cls(
            smtp_url=settings.smtp_url or None,
            smtp_from=settings.smtp_from or default_sender(),
            public_url=settings.public_url or None,
            secrets=notify_secrets(environ),
            timeout=settings.webhook_timeout_seconds,
        )


def make_notify_handler(settings: NotifySettings, webhook: WebhookSettings) -> Handler:
    """The ``notify.send`` handler: ``settings`` for email, links and secrets,
    ``webhook`` for the HTTP channels."""

    async def notify(ctx: HandlerContext) -> dict[str, Any]:
        """Sends one notification to its webhook, Slack or email channel (payload: a
        notification rule's delivery)."""
        delivery = decode(ctx.payload)
        channel = delivery.channel
        if channel.kind is ChannelKind.EMAIL:
            outcome = await _mail(ctx, settings, delivery)
        else:
            outcome = {"status": await _post(ctx, settings, webhook, delivery)}
        result = {"channel": str(channel.kind), "to": shown(channel), **outcome}
        ctx.log.info("handler.notify.sent", rule=delivery.rule, **result)
        return result

    return notify


def decode(payload: dict[str, Any]) -> Delivery:
    """The payload as a ``Delivery``, or PayloadRefusedError saying what is wrong."""
    fix = (
        f"give rule, on, subject, text and channel; notification rules make {NAME} runs, so "
        "define a rule rather than starting one by hand"
    )
    try:
        delivery = msgspec.convert(payload, Delivery)
    except msgspec.ValidationError as error:
        raise PayloadRefusedError(
            f"{NAME}: the payload is not a notification ({error}); {fix}"
        ) from None
    try:
        delivery.channel.check()
    except InvalidDefinitionError as error:
        raise PayloadRefusedError(f"{NAME}: the payload's {error}") from None
    return delivery


def shown(channel: Channel) -> str:
    """Where a notification went: the addresses, or a URL's scheme and host only."""
    if channel.kind is ChannelKind.EMAIL:
        return ", ".join(channel.to)
    return origin_text(parse_url(channel.url or "", name=NAME))


def full_link(link: str | None, public_url: str | None) -> str | None:
    """A dashboard path under the public URL; the path alone without one."""
    if not link or not public_url or "://" in link:
        return link or None
    return f"{public_url.rstrip('/')}/{link.lstrip('/')}"


# --- Webhook and Slack. ---


async def _post(
    ctx: HandlerContext, settings: NotifySettings, webhook: WebhookSettings, delivery: Delivery
) -> int:
    channel = delivery.channel
    link = full_link(delivery.link, settings.public_url)
    if channel.kind is ChannelKind.SLACK:
        body, headers = slack_body(delivery, link), JSON
    else:
        body = webhook_body(delivery, link)
        signed = _signed(settings, channel.secret, str(ctx.execution_id), body)
        headers = {**JSON, **signed}
    answer = await send(ctx, webhook, channel.url or "", headers=headers, content=body, name=NAME)
    return int(answer["status"])


def webhook_body(delivery: Delivery, link: str | None) -> bytes:
    """The JSON a webhook channel receives."""
    return msgspec.json.encode(
        {
            "type": EVENT_TYPE,
            "rule": delivery.rule,
            "on": delivery.on,
            "subject": delivery.subject,
            "text": delivery.text,
            "link": link,
            "facts": delivery.facts,
            "at": delivery.at,
        }
    )


def slack_body(delivery: Delivery, link: str | None) -> bytes:
    """A Slack-compatible incoming webhook's JSON: the subject in bold, the text, the link."""
    lines = [f"*{_slack_text(delivery.subject)}*", _slack_text(delivery.text), link or ""]
    return msgspec.json.encode({"text": "\n".join(line for line in lines if line)})


def _slack_text(text: str) -> str:
    # Slack reads <...> as links and mentions, and &...; as entities.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: a ``whsec_`` one's base64 rest decoded, as Standard
    Webhooks' libraries do, any other one's UTF-8 bytes. ValueError if not base64."""
    if secret.startswith(WHSEC_PREFIX):
        return base64.b64decode(secret.removeprefix(WHSEC_PREFIX), validate=True)
    return secret.encode()


def signature_headers(message_id: str, timestamp: int, body: bytes, key: bytes) -> dict[str, str]:
    """Standard Webhooks' headers: the HMAC-SHA256 of ``id.timestamp.body``, base64."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
    }


def _signed(
    settings: NotifySettings, secret: str | None, message_id: str, body: bytes
) -> dict[str, str]:
    if secret is None:
        return {}
    variable = SECRET_PREFIX + secret
    value = settings.secrets.get(secret)
    if not value:
        raise PermanentError(
            f"{NAME}: the signing secret {secret!r} is not set on this worker; set {variable} "
            "in the workers' environment to the secret the receiver checks, then requeue"
        )
    try:
        key = signing_key(value)
    except (binascii.Error, ValueError):
        raise PermanentError(
            f"{NAME}: {variable} starts with {WHSEC_PREFIX} but the rest is not base64; give "
            "the secret as the receiver shows it, or one without that prefix"
        ) from None
    return signature_headers(message_id, int(time.time()), body, key)


# --- Email. ---


def email_message(
    delivery: Delivery, link: str | None, *, sender: str, execution_id: UUID
) -> EmailMessage:
    """The email of a notification: the subject, the text and the link."""
    message = EmailMessage()
    message["Subject"] = " ".join(delivery.subject.split())  # a header is one line
    message["From"] = sender
    message["To"] = ", ".join(delivery.channel.to)
    message["Date"] = formatdate(usegmt=True)
    # The same on every attempt: a mail system that has it already can drop a repeat.
    message["Message-ID"] = f"<{execution_id}@jobledger>"
    message["X-Jobledger-Execution"] = str(execution_id)
    message.set_content(f"{delivery.text}\n\n{link}\n" if link else f"{delivery.text}\n")
    return message


async def _mail(
    ctx: HandlerContext, settings: NotifySettings, delivery: Delivery
) -> dict[str, Any]:
    """Sends the email: ``status`` "sent", and the addresses the server refused while
    it took the others (sending again would repeat it to those)."""
    if not settings.smtp_url:
        raise PermanentError(
            f"{NAME}: no mail server is set for email notifications; set {SMTP_URL_SETTING} "
            "on the workers (e.g. smtp://user:password@mail.example.com:587), then requeue"
        )
    link = full_link(delivery.link, settings.public_url)
    message = email_message(
        delivery, link, sender=settings.smtp_from, execution_id=ctx.execution_id
    )
    deliver = functools.partial(_smtp_send, settings.smtp_url, message, settings.timeout)
    server = smtp_server(settings.smtp_url)
    try:
        async with asyncio.timeout(settings.timeout):
            refused = await ctx.in_thread(deliver)
    except TimeoutError:
        raise HandlerError(f"{NAME}: {server} timed out after {settings.timeout:g}s") from None
    except (smtplib.SMTPException, OSError) as error:
        raise smtp_error(server, error) from None
    if not refused:
        return {"status": "sent"}
    ctx.log.warning("handler.notify.refused", server=server, refused=_replies(refused))
    return {"status": "sent", "refused": _replies(refused)}


def _smtp_send(url: str, message: EmailMessage, timeout: float) -> dict[str, tuple[int, bytes]]:
    """Sends ``message`` (blocking); returns the recipients refused while others took it."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or SMTP_PORTS[parts.scheme]
    context = ssl.create_default_context()
    client = (
        smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        if parts.scheme == "smtps"
        else smtplib.SMTP(host, port, timeout=timeout)
    )
    with client:
        if parts.scheme == "smtp":
            client.ehlo()
            if client.has_extn("starttls"):
                client.starttls(context=context)
                client.ehlo()
        if parts.username:
            client.login(unquote(parts.username), unquote(parts.password or ""))
        return client.send_message(message)


def smtp_server(url: str) -> str:
    """The mail server as errors show it: scheme, host and port, never the user part."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or SMTP_PORTS.get(parts.scheme, 25)}"


def smtp_error(server: str, error: Exception) -> HandlerError:
    """What a failed sending is: permanent for a 5xx reply or a server without AUTH,
    to be retried for a 4xx or a connection that failed."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        replies = error.recipients
        text = f"{NAME}: {server} refused every recipient ({_replies(replies)})"
        if any(code >= PERMANENT_REPLY for code, _ in replies.values()):
            return PermanentError(f"{text}; check the rule's addresses")
        return HandlerError(text)
    if isinstance(error, smtplib.SMTPNotSupportedError):
        return PermanentError(
            f"{NAME}: {server} offers no login on this connection; use smtps://, a server "
            f"that offers STARTTLS, or leave the user out of {SMTP_URL_SETTING}"
        )
    if isinstance(error, smtplib.SMTPResponseException):
        text = f"{NAME}: {server} answered {_reply(error.smtp_code, error.smtp_error)}"
        if error.smtp_code >= PERMANENT_REPLY:
            return PermanentError(f"{text}; check {SMTP_URL_SETTING} and JOBLEDGER_SMTP_FROM")
        return HandlerError(text)
    return HandlerError(f"{NAME}: cannot send through {server} ({type(error).__name__}: {error})")


def _replies(replies: Mapping[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{to}: {_reply(code, text)}" for to, (code, text) in replies.items())


def _reply(code: int, text: bytes | str) -> str:
    shown = text.decode(errors="replace") if isinstance(text, bytes) else text
    return mask_url(f"{code} {' '.join(shown.split())}"[:REPLY_CHARS])
