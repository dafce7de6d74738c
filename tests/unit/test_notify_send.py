"""notify.send without a network: the signature, the messages, the payload and the
settings it takes, and the errors that come before anything is sent."""

import asyncio
import base64
import hashlib
import hmac
import json
import re
import smtplib
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobledger.domain.notifications import Channel, ChannelKind, Delivery, NotifyOn
from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import load_settings, notify_secrets
from jobledger.runtime.handlers.base import (
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
    PermanentError,
)
from jobledger.runtime.handlers.notify import (
    NotifySettings,
    email_message,
    full_link,
    make_notify_handler,
    signature_headers,
    signing_key,
    slack_body,
    smtp_error,
    webhook_body,
)
from jobledger.runtime.handlers.registry import load_registry
from jobledger.runtime.handlers.webhook import WebhookSettings

# The test vector of the Standard Webhooks specification (its libraries' tests use it).
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
EXECUTION = uuid.UUID("00000000-0000-4000-8000-0000000000a1")
AT = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def _delivery(channel: Channel, **overrides: Any) -> Delivery:
    fields: dict[str, Any] = {
        "rule": "payments-dead",
        "on": NotifyOn.DEAD_LETTER,
        "subject": "payments.sync was dead-lettered",
        "text": "attempt 5 of 5 failed: timeout",
        "channel": channel,
        "link": f"/ui/executions/{EXECUTION}",
        "facts": {"job": "payments.sync", "attempts": 5},
        "at": AT,
    }
    return Delivery(**(fields | overrides))


def _run(settings: NotifySettings, payload: Any) -> dict[str, Any]:
    ctx = HandlerContext(
        execution_id=EXECUTION,
        job_id=None,
        attempt=1,
        lease_deadline=datetime.now(UTC) + timedelta(minutes=1),
        payload=payload,
    )
    handler = make_notify_handler(settings, WebhookSettings())

    async def call() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(call())


def test_the_signature_is_the_standard_webhooks_test_vector() -> None:
    """If the spec's test message is signed with its whsec_ secret, then the signature
    header is the one the spec publishes."""
    headers = signature_headers(
        VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY, signing_key(VECTOR_SECRET)
    )
    assert headers == {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIMESTAMP),
        "webhook-signature": VECTOR_SIGNATURE,
    }


def test_a_plain_secret_signs_with_its_own_bytes() -> None:
    """If a secret has no whsec_ prefix, then its UTF-8 bytes are the HMAC key of
    ``id.timestamp.body``, as a receiver computes it with hmac alone."""
    body = b'{"a":1}'
    headers = signature_headers("exec-1", 1700000000, body, signing_key("s3cret-ü"))
    expected = hmac.new("s3cret-ü".encode(), b"exec-1.1700000000." + body, hashlib.sha256)
    assert headers["webhook-signature"] == "v1," + base64.b64encode(expected.digest()).decode()


def test_a_whsec_secret_is_base64_and_a_broken_one_is_refused() -> None:
    """If a secret starts with whsec_, then the rest is decoded as base64; if it is not
    base64, then ValueError."""
    assert signing_key("whsec_" + base64.b64encode(b"\x00key").decode()) == b"\x00key"
    with pytest.raises(ValueError, match=r"."):
        signing_key("whsec_not base64!")


def test_the_webhook_body_carries_the_notification_and_an_absolute_link() -> None:
    """If a public URL is set, then the webhook body's link is under it, beside the
    rule, condition, subject, text, facts and time."""
    delivery = _delivery(Channel(kind=ChannelKind.WEBHOOK, url="https://hooks.example.com/x"))
    link = full_link(delivery.link, "https://jobs.example.com/")
    assert json.loads(webhook_body(delivery, link)) == {
        "type": "jobledger.notification",
        "rule": "payments-dead",
        "on": "dead_letter",
        "subject": "payments.sync was dead-lettered",
        "text": "attempt 5 of 5 failed: timeout",
        "link": f"https://jobs.example.com/ui/executions/{EXECUTION}",
        "facts": {"job": "payments.sync", "attempts": 5},
        "at": "2026-03-01T12:30:00Z",
    }


@pytest.mark.parametrize(
    ("link", "public_url", "shown"),
    [
        ("/ui/executions/1", None, "/ui/executions/1"),
        (
            "/ui/executions/1",
            "https://jobs.example.com",
            "https://jobs.example.com/ui/executions/1",
        ),
        ("ui/x", "https://jobs.example.com/base/", "https://jobs.example.com/base/ui/x"),
        (None, "https://jobs.example.com", None),
    ],
)
def test_a_link_is_the_path_or_under_the_public_url(
    link: str | None, public_url: str | None, shown: str | None
) -> None:
    """If a public URL is set, then a link is under it; otherwise the path alone."""
    assert full_link(link, public_url) == shown


def test_the_slack_text_is_bold_subject_text_and_link_with_markup_escaped() -> None:
    """If a notification goes to Slack, then its text is the subject in bold, the text
    and the link, with Slack's <, > and & escaped; without a link, no link line."""
    delivery = _delivery(Channel(kind=ChannelKind.SLACK, url="https://hooks.slack.com/x"))
    text = json.loads(slack_body(delivery, "https://jobs.example.com/ui/x"))["text"]
    assert text == (
        "*payments.sync was dead-lettered*\nattempt 5 of 5 failed: timeout\n"
        "https://jobs.example.com/ui/x"
    )
    odd = _delivery(delivery.channel, subject="a <b> & c", text="<!channel>", link=None)
    assert json.loads(slack_body(odd, None)) == {"text": "*a &lt;b&gt; &amp; c*\n&lt;!channel&gt;"}


def test_the_email_has_the_subject_recipients_text_link_and_execution() -> None:
    """If a notification is an email, then it has the subject on one line, the sender and
    recipients, the text then the link, and the execution id as its stable Message-ID."""
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com", "dev@example.com"))
    delivery = _delivery(channel, subject="two\nlines")
    message = email_message(delivery, "/ui/x", sender="jobs@example.com", execution_id=EXECUTION)
    assert message["Subject"] == "two lines"
    assert message["From"] == "jobs@example.com"
    assert message["To"] == "ops@example.com, dev@example.com"
    assert message["Message-ID"] == f"<{EXECUTION}@jobledger>"
    assert message["X-Jobledger-Execution"] == str(EXECUTION)
    assert message.get_content() == "attempt 5 of 5 failed: timeout\n\n/ui/x\n"


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"rule": "r"}, "Object missing required field"),
        ("not an object", "Expected `object`, got `str`"),
        (
            {
                "rule": "r",
                "on": "dead_letter",
                "subject": "s",
                "text": "t",
                "channel": {"kind": "fax"},
            },
            "Invalid enum value 'fax' - at `$.channel.kind`",
        ),
        (
            {
                "rule": "r",
                "on": "dead_letter",
                "subject": "s",
                "text": "t",
                "channel": {"kind": "email"},
            },
            "channel.to: has 0 addresses; give 1-20 email addresses",
        ),
    ],
)
def test_a_payload_that_is_no_notification_is_refused_with_the_fix(
    payload: Any, problem: str
) -> None:
    """If the payload does not decode as a notification, or its channel is invalid, then
    PayloadRefusedError names the problem (and for a foreign payload, how such runs are
    made) in one line."""
    with pytest.raises(PayloadRefusedError) as refused:
        _run(NotifySettings(), payload)
    message = str(refused.value)
    assert message.startswith("notify.send: ")
    assert problem in message
    assert "\n" not in message
    assert "Traceback" not in message


def test_bad_payload_names_how_notifications_are_made() -> None:
    """If the payload is not a notification, then the message says rules make them."""
    with pytest.raises(PayloadRefusedError, match=r"define a rule rather than starting one"):
        _run(NotifySettings(), {"url": "https://example.com"})


def _payload(channel: Channel) -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(_delivery(channel))
    return built


def test_a_secret_missing_from_the_workers_is_permanent() -> None:
    """If the channel names a secret this worker's environment lacks, then the run fails
    permanently, naming the variable to set, before anything is sent."""
    channel = Channel(kind=ChannelKind.WEBHOOK, url="https://hooks.example.com/x", secret="OPS")
    with pytest.raises(PermanentError, match="set JOBLEDGER_NOTIFY_SECRET_OPS in the workers'"):
        _run(NotifySettings(secrets={"OTHER": "x"}), _payload(channel))


def test_a_broken_whsec_secret_is_permanent() -> None:
    """If the named secret starts with whsec_ but is not base64, then the run fails
    permanently, naming the variable and not quoting the value."""
    channel = Channel(kind=ChannelKind.WEBHOOK, url="https://hooks.example.com/x", secret="OPS")
    with pytest.raises(PermanentError) as failed:
        _run(NotifySettings(secrets={"OPS": "whsec_!!not-base64"}), _payload(channel))
    assert "JOBLEDGER_NOTIFY_SECRET_OPS" in str(failed.value)
    assert "!!not-base64" not in str(failed.value)


def test_email_without_a_mail_server_is_permanent() -> None:
    """If no SMTP URL is set, then an email notification fails permanently, naming
    JOBLEDGER_SMTP_URL."""
    channel = Channel(kind=ChannelKind.EMAIL, to=("ops@example.com",))
    with pytest.raises(PermanentError, match="set JOBLEDGER_SMTP_URL on the workers"):
        _run(NotifySettings(smtp_url=None), _payload(channel))


SERVER = "smtp://mail.example.com:587"


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (
            smtplib.SMTPRecipientsRefused({"x@example.com": (550, b"5.1.1 no such user")}),
            PermanentError,
            "refused every recipient (x@example.com: 550 5.1.1 no such user)",
        ),
        (
            smtplib.SMTPRecipientsRefused({"x@example.com": (450, b"mailbox busy")}),
            HandlerError,
            "x@example.com: 450 mailbox busy",
        ),
        (smtplib.SMTPAuthenticationError(535, b"bad credentials"), PermanentError, "535"),
        (smtplib.SMTPSenderRefused(451, b"try later", "a@b.c"), HandlerError, "451 try later"),
        (ConnectionRefusedError(111, "Connection refused"), HandlerError, "Connection refused"),
        (smtplib.SMTPServerDisconnected("gone"), HandlerError, "cannot send through"),
        (smtplib.SMTPNotSupportedError("no AUTH"), PermanentError, "offers no login"),
    ],
)
def test_smtp_failures_are_permanent_only_for_a_5xx_or_a_configuration_gap(
    error: Exception, kind: type[HandlerError], text: str
) -> None:
    """If the server answers 5xx (or cannot take a login), then the failure is permanent;
    a 4xx or a lost connection is an ordinary failure, tried again."""
    failure = smtp_error(SERVER, error)
    assert type(failure) is kind
    assert str(failure).startswith("notify.send: ")
    assert SERVER in str(failure)
    assert text in str(failure)


def test_notify_send_is_always_a_registered_handler() -> None:
    """If the registry is loaded without notification settings, then notify.send is
    there all the same, described by its doc line."""
    handlers = load_registry()
    assert handlers.get("notify.send") is not None
    assert handlers.info("notify.send").description.startswith("Sends one notification")


def test_the_settings_never_show_the_smtp_password_or_the_secrets() -> None:
    """If NotifySettings hold a password and secrets, then its repr shows neither."""
    settings = NotifySettings(smtp_url="smtp://u:hunter2@mail:587", secrets={"OPS": "s3cret"})
    assert "hunter2" not in repr(settings)
    assert "s3cret" not in repr(settings)


def test_notify_settings_are_read_from_the_jobledger_variables() -> None:
    """If the SMTP, sender and public URL settings and secret variables are set, then
    NotifySettings carry them, the password masked where settings are printed."""
    environ = {
        "JOBLEDGER_SMTP_URL": "smtps://mailer:hunter2@mail.example.com:465",
        "JOBLEDGER_SMTP_FROM": "Jobs <jobs@example.com>",
        "JOBLEDGER_PUBLIC_URL": "https://jobs.example.com",
        "JOBLEDGER_NOTIFY_SECRET_OPS": "whsec_c2VjcmV0",
        "JOBLEDGER_NOTIFY_SECRET_EMPTY": "",
        "JOBLEDGER_NOTIFY_SECRET_": "no name",
    }
    settings = NotifySettings.from_settings(load_settings(environ), environ)
    assert settings.smtp_url == environ["JOBLEDGER_SMTP_URL"]
    assert (settings.smtp_from, settings.public_url) == (
        "Jobs <jobs@example.com>",
        "https://jobs.example.com",
    )
    assert dict(settings.secrets) == {"OPS": "whsec_c2VjcmV0"}
    shown = load_settings(environ).masked()
    assert shown["smtp_url"] == "smtps://mailer:***@mail.example.com:465"
    defaults = NotifySettings.from_settings(load_settings({}), {})
    assert (defaults.smtp_url, defaults.public_url) == (None, None)
    assert defaults.smtp_from.startswith("jobledger@")
    assert notify_secrets({"JOBLEDGER_NOTIFY_SECRET_A_1": "v"}) == {"A_1": "v"}


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        ({"JOBLEDGER_SMTP_URL": "http://mail:25"}, "JOBLEDGER_SMTP_URL: the scheme must be smtp"),
        (
            {"JOBLEDGER_SMTP_URL": "smtp://u:hunter2@mail:9x"},
            "JOBLEDGER_SMTP_URL: the host or port",
        ),
        ({"JOBLEDGER_SMTP_URL": "smtp://u:hunter2@mail/x"}, "JOBLEDGER_SMTP_URL: a mail server"),
        ({"JOBLEDGER_SMTP_FROM": "not an address"}, "JOBLEDGER_SMTP_FROM: use an address"),
        ({"JOBLEDGER_PUBLIC_URL": "jobs.example.com"}, "JOBLEDGER_PUBLIC_URL: not an http(s)"),
        ({"JOBLEDGER_PUBLIC_URL": "https://h/?a=1"}, "JOBLEDGER_PUBLIC_URL: a base URL"),
    ],
)
def test_bad_notify_settings_name_the_variable_and_never_the_password(
    environ: dict[str, str], line: str
) -> None:
    """If an SMTP URL, sender or public URL is malformed, then the error names its
    variable and the fix, and never quotes the SMTP password."""
    with pytest.raises(SettingsError) as refused:
        load_settings(environ)
    assert str(refused.value).startswith(line)
    assert "hunter2" not in str(refused.value)


def _documented_verify() -> Any:
    """The ``verify`` function of docs/operations.md, as a receiver would copy it."""
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    block = next(
        b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "def verify" in b
    )
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/operations.md", "exec"), scope)  # noqa: S102 (our own docs)
    return scope["verify"]


@pytest.mark.parametrize(
    "secret", ["plain secret", "whsec_" + base64.b64encode(b"k" * 24).decode()]
)
def test_the_documented_receiver_check_accepts_our_signature_and_refuses_a_change(
    secret: str,
) -> None:
    """If a receiver checks a signed body with the docs' own ``verify``, then our
    signature passes, and a changed body or another secret fails."""
    verify = _documented_verify()
    body = b'{"type":"jobledger.notification"}'
    headers = signature_headers(str(uuid.uuid4()), int(time.time()), body, signing_key(secret))
    assert verify(secret, headers, body)
    assert not verify(secret, headers, body + b" ")
    assert not verify("another secret", headers, body)
