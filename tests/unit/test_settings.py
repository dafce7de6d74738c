"""Settings: one frozen object from JOBLEDGER_* variables and flags, clear errors."""

import json
import typing
from pathlib import Path

import pytest

from jobledger.adapters.store import persistence_env
from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import Settings, load_settings, mask_url


def test_defaults_select_the_embedded_sqlite_store() -> None:
    """If no database URL is set, then the store is a SQLite file in the data folder."""
    settings = load_settings({})
    assert not settings.uses_postgres
    assert settings.sqlite_path == Path(".jobledger/events.sqlite3")
    env = persistence_env(settings)
    assert env["PERSISTENCE_MODULE"] == "eventsourcing.sqlite"
    assert env["CREATE_TABLE"] == "n"


def test_variables_are_read_and_flags_win() -> None:
    """If a variable and a flag set the same setting, then the flag wins."""
    environ = {
        "JOBLEDGER_DATABASE_URL": "postgresql://app:s3cret@db.internal:6543/ledger",
        "JOBLEDGER_WRITER_MAX_BATCH": "50",
    }
    settings = load_settings(environ, writer_max_batch="200")
    assert settings.writer_max_batch == 200
    env = persistence_env(settings)
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"], env["POSTGRES_DBNAME"]) == (
        "db.internal",
        "6543",
        "ledger",
    )
    assert env["POSTGRES_PASSWORD"] == "s3cret"
    assert "s3cret" not in str(settings.masked())
    assert settings.masked()["database_url"] == "postgresql://app:***@db.internal:6543/ledger"


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({"JOBLEDGER_WRITER_MAX_BATCH": "many"}, "JOBLEDGER_WRITER_MAX_BATCH"),
        ({"JOBLEDGER_WRITER_MAX_BATCH": "0"}, "JOBLEDGER_WRITER_MAX_BATCH"),
        ({"JOBLEDGER_DATABASE_URL": "mysql://x/y"}, "JOBLEDGER_DATABASE_URL"),
        ({"JOBLEDGER_REDIS_URL": "http://x"}, "JOBLEDGER_REDIS_URL"),
        ({"JOBLEDGER_MIN_INTERVAL_SECONDS": "1"}, "JOBLEDGER_MIN_INTERVAL_SECONDS"),
        ({"JOBLEDGER_MODE": "staging"}, "JOBLEDGER_MODE: use dev or production"),
        ({"JOBLEDGER_TRUSTED_PROXIES": "proxy.internal"}, "JOBLEDGER_TRUSTED_PROXIES: 'proxy"),
        ({"JOBLEDGER_TRUSTED_PROXIES": "10.0.0.0/33"}, "JOBLEDGER_TRUSTED_PROXIES: .* network"),
        ({"JOBLEDGER_TEST_HANDLERS": "yes"}, "JOBLEDGER_TEST_HANDLERS: use true or false"),
        ({"JOBLEDGER_ADMIN_USERNAME": "a b"}, "JOBLEDGER_ADMIN_USERNAME: use 3 to 64"),
        ({"JOBLEDGER_ADMIN_PASSWORD": "pw\n"}, "JOBLEDGER_ADMIN_PASSWORD: .* line breaks"),
        ({"JOBLEDGER_ADMIN_PASSWORD": "p" * 1025}, "JOBLEDGER_ADMIN_PASSWORD: use at most"),
        ({"JOBLEDGER_SESSION_IDLE_MINUTES": "0"}, "JOBLEDGER_SESSION_IDLE_MINUTES"),
        ({"JOBLEDGER_SESSION_IDLE_MINUTES": "1441"}, "JOBLEDGER_SESSION_IDLE_MINUTES"),
        ({"JOBLEDGER_SESSION_ABSOLUTE_HOURS": "-1"}, "JOBLEDGER_SESSION_ABSOLUTE_HOURS"),
        ({"JOBLEDGER_SESSION_ABSOLUTE_HOURS": "721"}, "JOBLEDGER_SESSION_ABSOLUTE_HOURS"),
        ({"JOBLEDGER_LOGIN_MAX_FAILURES": "0"}, "JOBLEDGER_LOGIN_MAX_FAILURES: use 1 to"),
        ({"JOBLEDGER_LOGIN_MAX_FAILURES": "five"}, "JOBLEDGER_LOGIN_MAX_FAILURES"),
        ({"JOBLEDGER_LOGIN_WINDOW_MINUTES": "0"}, "JOBLEDGER_LOGIN_WINDOW_MINUTES"),
        ({"JOBLEDGER_API_REQUESTS_PER_CREDENTIAL": "0"}, "JOBLEDGER_API_REQUESTS_PER_CREDENTIAL"),
        ({"JOBLEDGER_API_BUDGET_WINDOW_SECONDS": "0.5"}, "JOBLEDGER_API_BUDGET_WINDOW_SECONDS"),
        ({"JOBLEDGER_API_LONG_POLLS": "0"}, "JOBLEDGER_API_LONG_POLLS"),
        ({"JOBLEDGER_LOGIN_QUEUE": "0"}, "JOBLEDGER_LOGIN_QUEUE"),
        ({"JOBLEDGER_API_HOST": ""}, "JOBLEDGER_API_HOST: use a host"),
        ({"JOBLEDGER_API_HOST": "local host"}, "JOBLEDGER_API_HOST: use a host"),
        ({"JOBLEDGER_API_PORT": "0"}, "JOBLEDGER_API_PORT: use a TCP port"),
        ({"JOBLEDGER_API_PORT": "65536"}, "JOBLEDGER_API_PORT: use a TCP port"),
        ({"JOBLEDGER_API_MAX_BODY_BYTES": "100"}, "JOBLEDGER_API_MAX_BODY_BYTES: use 1024"),
        (
            {"JOBLEDGER_API_MAX_BODY_BYTES": "2048"},
            "JOBLEDGER_API_MAX_BODY_BYTES: .* at least JOBLEDGER_MAX_PAYLOAD_BYTES",
        ),
        (
            {"JOBLEDGER_PASSWORD_MEMORY_KIB": "16"},
            "JOBLEDGER_PASSWORD_MEMORY_KIB: argon2 needs 8 KiB per lane; use at least 32",
        ),
        ({"JOBLEDGER_SECURE_COOKIES": "yes"}, "JOBLEDGER_SECURE_COOKIES: use auto, always"),
        ({"JOBLEDGER_LOG_FORMAT": "xml"}, "JOBLEDGER_LOG_FORMAT: use auto, console or json"),
        (
            {"JOBLEDGER_DATABASE_URL": "postgresql://u:pw@db:54x2/app"},
            "JOBLEDGER_DATABASE_URL: a port is not a number",
        ),
        (
            {"JOBLEDGER_DATABASE_URL": "postgresql://u:pw%zz@db/app"},
            "JOBLEDGER_DATABASE_URL cannot be read .* percent-encode",
        ),
        ({"JOBLEDGER_REDIS_URL": "redis://cache:70000/0"}, "JOBLEDGER_REDIS_URL: the host or port"),
        ({"JOBLEDGER_REDIS_URL": "redis://[::1:6379/0"}, "JOBLEDGER_REDIS_URL: the host or port"),
        ({"JOBLEDGER_REDIS_URL": "redis://cache/zero"}, "JOBLEDGER_REDIS_URL: the database"),
        (
            {"JOBLEDGER_REDIS_URL": "redis+cluster://cache:7000/1"},
            "JOBLEDGER_REDIS_URL: a Redis Cluster has only database 0",
        ),
        ({"JOBLEDGER_WEBHOOK_ALLOW": "10.0.0.0/8,256.1.1.1/8"}, "JOBLEDGER_WEBHOOK_ALLOW: '256"),
        ({"JOBLEDGER_WEBHOOK_ALLOW": "https://hooks.internal"}, "JOBLEDGER_WEBHOOK_ALLOW"),
    ],
)
def test_bad_settings_name_the_variable(environ: dict[str, str], names: str) -> None:
    """If a setting is malformed, then the error names its variable."""
    with pytest.raises(SettingsError, match=names):
        load_settings(environ)


def test_a_malformed_postgres_url_is_a_settings_error() -> None:
    """If the database URL cannot be parsed, then the error says how to write one, both
    when the settings are read and where the store reads them."""
    with pytest.raises(SettingsError, match="postgresql://user:password@host"):
        load_settings({"JOBLEDGER_DATABASE_URL": "postgresql://a b c/?=&&"})
    unchecked = Settings(database_url="postgresql://a b c/?=&&")
    with pytest.raises(SettingsError, match="postgresql://user:password@host"):
        persistence_env(unchecked)


def test_secrets_never_reach_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    """If a log line carries a password or token field, then its value is masked."""
    import structlog  # noqa: PLC0415 (configured per test)

    from jobledger.infra.logging import configure_logging  # noqa: PLC0415

    configure_logging(load_settings({}, log_format="json"))
    try:
        structlog.get_logger("t").info("user.login", user="ann", password="pw1", api_token="t0k")
    finally:
        structlog.reset_defaults()
    line = capsys.readouterr().err
    assert '"event": "user.login"' in line
    assert "pw1" not in line
    assert "t0k" not in line
    assert '"user": "ann"' in line


def test_api_and_account_defaults() -> None:
    """If nothing is set, then the API listens on loopback in production mode, with the
    documented session, throttle and budget defaults and no admin password."""
    settings = load_settings({})
    assert (settings.mode, settings.api_host, settings.api_port) == (
        "production",
        "127.0.0.1",
        8000,
    )
    assert (settings.admin_username, settings.admin_password) == ("admin", "")
    assert (settings.session_idle_minutes, settings.session_absolute_hours) == (30, 12)
    assert (settings.login_max_failures, settings.login_window_minutes) == (5, 15)
    assert (settings.api_max_body_bytes, settings.secure_cookies) == (1_048_576, "auto")
    assert (settings.api_requests_per_credential, settings.api_requests_per_address) == (
        3000,
        10_000,
    )
    assert (settings.api_budget_window_seconds, settings.api_long_polls) == (10, 20)
    assert (settings.api_runs_per_minute, settings.login_queue) == (10_000, 16)


def test_the_admin_variables_fall_back_to_the_unprefixed_names() -> None:
    """If ADMIN_USERNAME and ADMIN_PASSWORD are set, then they are used, unless the
    JOBLEDGER_ variables are set too, which win."""
    plain = {"ADMIN_USERNAME": "root", "ADMIN_PASSWORD": "plain password"}
    settings = load_settings(plain)
    assert (settings.admin_username, settings.admin_password) == ("root", "plain password")
    prefixed = {**plain, "JOBLEDGER_ADMIN_USERNAME": "boss", "JOBLEDGER_ADMIN_PASSWORD": "pfx"}
    settings = load_settings(prefixed)
    assert (settings.admin_username, settings.admin_password) == ("boss", "pfx")
    assert load_settings(plain, admin_username="flag").admin_username == "flag"


def test_the_admin_password_is_masked() -> None:
    """If the admin password is set, then the printed settings show *** instead; if it is
    empty, they show that it is empty."""
    shown = load_settings({"JOBLEDGER_ADMIN_PASSWORD": "hunter2 hunter2"}).masked()
    assert shown["admin_password"] == "***"
    assert "hunter2" not in str(shown)
    assert load_settings({}).masked()["admin_password"] == ""


TEMPLATES = {
    "hook": ["curl", "-H", "Authorization: Bearer ghp_0123456789", "https://u:pw1@api.example"],
    "gh": ["curl", "-H", "authorization: token tok-1", "-H", "X-Api-Key: key-1", "{url}"],
    "db": ["psql", "--password=pw-2", "host=db password=pw-3", "-c", "{sql}"],
    "next": ["curl", "-u", "alice:pw-4", "--token", "tok-2", "--data", "{body}"],
}


def test_credentials_in_shell_templates_are_masked() -> None:
    """If a shell command template holds an Authorization-like header, a password or
    token option (its value in the same argument or the next), or a URL password, then
    the printed settings show ``***`` there and every other argument as it was."""
    shown = load_settings({"JOBLEDGER_SHELL_COMMANDS": json.dumps(TEMPLATES)}).masked()
    templates = json.loads(shown["shell_commands"])
    for secret in ("ghp_0123456789", "pw1", "tok-1", "key-1", "pw-2", "pw-3", "pw-4", "tok-2"):
        assert secret not in shown["shell_commands"]
    assert templates["hook"] == ["curl", "-H", "Authorization: ***", "https://u:***@api.example"]
    assert templates["gh"] == ["curl", "-H", "authorization: ***", "-H", "X-Api-Key: ***", "{url}"]
    assert templates["next"] == ["curl", "-u", "***", "--token", "***", "--data", "{body}"]
    assert templates["db"][-2:] == ["-c", "{sql}"]


def test_the_webhook_allowlist_takes_names_addresses_and_networks() -> None:
    """If the allowlist holds host names, addresses and networks, then it is accepted."""
    entries = "10.0.0.0/8, hooks.internal,192.168.1.20,::1,[fe80::1],fd00::/8,svc_a.local."
    assert load_settings({"JOBLEDGER_WEBHOOK_ALLOW": entries}).webhook_allow == (
        "10.0.0.0/8",
        "hooks.internal",
        "192.168.1.20",
        "::1",
        "[fe80::1]",
        "fd00::/8",
        "svc_a.local.",
    )


@pytest.mark.parametrize(
    ("mode", "log_format", "json_lines"),
    [
        ("production", "auto", True),
        ("dev", "auto", False),
        ("dev", "json", True),
        ("production", "console", False),
    ],
)
def test_logs_are_json_in_production_unless_told(
    mode: str, log_format: str, json_lines: bool
) -> None:
    """If the format is left at auto, then production writes JSON and dev readable
    lines; an explicit format wins over the mode."""
    from jobledger.infra.logging import uses_json  # noqa: PLC0415 (beside its test)

    settings = load_settings({"JOBLEDGER_MODE": mode, "JOBLEDGER_LOG_FORMAT": log_format})
    assert uses_json(settings) is json_lines


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("connect postgresql://app:pw1@db/x failed", "connect postgresql://app:***@db/x failed"),
        ("redis://:pw2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("header Authorization: Bearer abc.def-1", "header Authorization: Bearer ***"),
        ("Basic QWxhZGRpbjpvcGVu here", "Basic *** here"),
        ("a basic check of the Bearer flow", "a basic check of the Bearer flow"),
        ("postgresql://app@db/x has no password", "postgresql://app@db/x has no password"),
        ("no secret at all", "no secret at all"),
        ("postgresql://app@db/x?password=pw3&a=b", "postgresql://app@db/x?password=***&a=b"),
        (
            "postgresql://db/x?sslmode=require&sslpassword=pw4",
            "postgresql://db/x?sslmode=require&sslpassword=***",
        ),
        ("host=db password=pw5 dbname=x", "host=db password=*** dbname=x"),
        ("host=db password = 'p w\\'6' dbname=x", "host=db password = *** dbname=x"),
        ("redis://cache:6379/0?password=pw7", "redis://cache:6379/0?password=***"),
        ("the password is checked", "the password is checked"),
    ],
)
def test_log_values_lose_their_credentials(text: str, shown: str) -> None:
    """If a logged value holds a password in a URL (its user part or its query), in a
    libpq key=value conninfo or an Authorization credential, then only that part is
    replaced by ***."""
    from jobledger.infra.logging import redact_text  # noqa: PLC0415 (beside its test)

    assert redact_text(text) == shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:s3cr#t@db:5432/jobs",
        "postgresql://app:a?bc@db:5432/jobs",
        "postgresql://app:pw@db1:5432,db2:5433/jobs",  # libpq fail-over hosts
        "redis://:s3cr%23t@cache:6379/0",
        "redis+cluster://:s3cr%23t@cache:7000/0",  # a Redis Cluster, by any one node
        "rediss+cluster://cache:7000",
    ],
)
def test_urls_libpq_and_redis_accept_are_accepted(url: str) -> None:
    """If a URL is one its driver reads (special characters in the password, several
    PostgreSQL hosts), then the settings take it."""
    variable = "JOBLEDGER_REDIS_URL" if url.startswith("redis") else "JOBLEDGER_DATABASE_URL"
    load_settings({variable: url})


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("JOBLEDGER_DATABASE_URL", "postgresql://app:hunter2@db:5x32/jobs"),
        ("JOBLEDGER_DATABASE_URL", "postgresql://app:hunter2%zz@db/jobs"),
        ("JOBLEDGER_REDIS_URL", "redis://:hunter2#x@cache:63x9/0"),
        ("JOBLEDGER_REDIS_URL", "redis://:12/hunter2@cache:6379/0"),
    ],
)
def test_a_refused_url_is_never_quoted(variable: str, url: str) -> None:
    """If a URL is refused, then the message names the variable and the fix but quotes
    no part of the URL, whose password may be anywhere in it."""
    with pytest.raises(SettingsError, match=variable) as refused:
        load_settings({variable: url})
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:s3cr#t@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
        ("redis://:a/b@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
    ],
)
def test_masking_finds_passwords_with_special_characters(text: str, shown: str) -> None:
    """If a URL's password holds # ? or /, then masking still hides all of it."""
    assert mask_url(text) == shown


def test_nested_values_and_exceptions_are_redacted() -> None:
    """If a log field is a mapping, a list or an exception, then secrets inside it are
    masked too: by key at any depth, and by their text."""
    from jobledger.infra.logging import redact  # noqa: PLC0415 (beside its test)

    value = {
        "headers": {"Authorization": "Bearer abcdefghijkl", "Accept": "*/*"},
        "urls": ["postgresql://u:pw1@h/db", ("redis://:pw2@h:1/0",)],
        "error": ConnectionError("cannot reach postgresql://u:pw3@h/db"),
        "count": 3,
    }
    shown = redact(value)
    assert shown == {
        "headers": {"Authorization": "***", "Accept": "*/*"},
        "urls": ["postgresql://u:***@h/db", ["redis://:***@h:1/0"]],
        "error": "ConnectionError: cannot reach postgresql://u:***@h/db",
        "count": 3,
    }


def test_trusted_proxies_are_read_as_networks() -> None:
    """If JOBLEDGER_TRUSTED_PROXIES lists addresses and networks, then each becomes a
    network (an address one of its own); none by default."""
    settings = load_settings({"JOBLEDGER_TRUSTED_PROXIES": "10.0.0.5, 192.168.0.0/24,[::1]"})
    assert [str(n) for n in settings.proxy_networks] == [
        "10.0.0.5/32",
        "192.168.0.0/24",
        "::1/128",
    ]
    assert load_settings({}).proxy_networks == ()


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        (
            {"JOBLEDGER_WORKER_SLOTS": "0"},
            "JOBLEDGER_WORKER_SLOTS: use 1 to 1000 concurrent executions (default 4); got '0'",
        ),
        (
            {"JOBLEDGER_WORKER_SLOTS": "1001"},
            "JOBLEDGER_WORKER_SLOTS: use 1 to 1000 concurrent executions (default 4); got '1001'",
        ),
        (
            {"JOBLEDGER_LEADER_TTL_MS": "soon"},
            "JOBLEDGER_LEADER_TTL_MS: use 100 or more ms (default 3000); got 'soon'",
        ),
        (
            {"JOBLEDGER_WEBHOOK_TIMEOUT_SECONDS": "0"},
            "JOBLEDGER_WEBHOOK_TIMEOUT_SECONDS: use more than 0 seconds (default 30); got '0'",
        ),
        (
            {"JOBLEDGER_SESSION_IDLE_MINUTES": "1441"},
            (
                "JOBLEDGER_SESSION_IDLE_MINUTES: use more than 0 and at most 1440 minutes "
                "(default 30); got '1441'"
            ),
        ),
        (
            {"JOBLEDGER_METRICS_PORT": "70000"},
            (
                "JOBLEDGER_METRICS_PORT: use a TCP port, 0 to 65535, 0 for none (default 0); "
                "got '70000'"
            ),
        ),
        (
            {"JOBLEDGER_LOG_LEVEL": "verbose"},
            "JOBLEDGER_LOG_LEVEL: use debug, info, warning or error; got 'verbose'",
        ),
        (
            {"JOBLEDGER_WORKER_QUEUES": " , "},
            "JOBLEDGER_WORKER_QUEUES: use one or more queue names, comma-separated; got ' , '",
        ),
        ({"JOBLEDGER_REDIS_PREFIX": "{jl}"}, "JOBLEDGER_REDIS_PREFIX: use a short name without "),
        (
            {"ADMIN_USERNAME": "a b"},
            (
                "ADMIN_USERNAME: use 3 to 64 characters: a-z, 0-9, dot, underscore or hyphen; "
                "got 'a b'"
            ),
        ),
    ],
)
def test_a_refused_value_is_explained_in_the_project_words(
    environ: dict[str, str], line: str
) -> None:
    """If a value breaks a declared bound, pattern or choice, then the error is one line
    that names the variable it was read from, what the setting takes (range, unit,
    default, or the choices) and the value given; msgspec's own words never show."""
    with pytest.raises(SettingsError) as refused:
        load_settings(environ)
    assert str(refused.value).startswith(line)
    assert "Expected" not in str(refused.value)
    assert "$." not in str(refused.value)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        ({"worker_slots": "0"}, "--worker-slots: use 1 to 1000 concurrent executions"),
        ({"mode": "staging"}, "--mode: use dev or production; got 'staging'"),
        ({"trusted_proxies": "proxy.internal"}, "--trusted-proxies: 'proxy.internal' is not"),
        ({"database_url": "mysql://db/x"}, "--database-url: scheme 'mysql' is not supported"),
        (
            {"leader_renew_ms": "4000"},
            "--leader-renew-ms: renew more often than the ttl (JOBLEDGER_LEADER_TTL_MS: 3000 ms)",
        ),
    ],
)
def test_a_bad_flag_is_named_as_the_flag(flags: dict[str, str], line: str) -> None:
    """If a bad value came from a flag, then the error names the flag, not the variable
    (which may be set to something valid)."""
    environ = {f"JOBLEDGER_{name.upper()}": "" for name in flags}
    with pytest.raises(SettingsError) as refused:
        load_settings(environ | {"JOBLEDGER_WORKER_SLOTS": "8"}, **flags)
    assert str(refused.value).startswith(line)


def test_every_number_setting_declares_its_range() -> None:
    """If any number setting is given a value below every allowed one, then the error
    names the variable, the allowed range and the default, for each such setting."""
    hints = typing.get_type_hints(Settings)
    numbers = [name for name, hint in hints.items() if hint in {int, float}]
    assert "worker_slots" in numbers
    assert "session_idle_minutes" in numbers
    for name in numbers:
        variable = f"JOBLEDGER_{name.upper()}"
        with pytest.raises(SettingsError) as refused:
            load_settings({variable: "-1"})
        default = getattr(Settings(), name)
        assert str(refused.value).startswith(f"{variable}: use "), name
        assert f"(default {default:.15g}); got '-1'" in str(refused.value), name


def test_a_refused_secret_is_never_quoted() -> None:
    """If the admin password is refused, then the error says what to use but does not
    quote the password."""
    with pytest.raises(SettingsError) as refused:
        load_settings({"JOBLEDGER_ADMIN_PASSWORD": " hunter2 hunter2"})
    assert str(refused.value).startswith("JOBLEDGER_ADMIN_PASSWORD: use at most 1024")
    assert "hunter2" not in str(refused.value)


def test_lists_are_split_once_as_they_are_read() -> None:
    """If a list setting is comma-separated, with spaces and empty entries, then it is
    read as a tuple of its entries, from a variable and from a flag alike, and the
    printed settings show it as a JSON list."""
    environ = {
        "JOBLEDGER_WORKER_QUEUES": " high, default,,",
        "JOBLEDGER_HANDLERS": "report = acme.reports:send , stamp=json:dumps",
    }
    settings = load_settings(environ, trusted_proxies="10.0.0.5,")
    assert settings.worker_queues == ("high", "default")
    assert settings.handlers == ("report = acme.reports:send", "stamp=json:dumps")
    assert settings.trusted_proxies == ("10.0.0.5",)
    shown = settings.masked()
    assert shown["worker_queues"] == ["high", "default"]
    assert shown["webhook_allow"] == []
    defaults = load_settings({})
    assert (defaults.worker_queues, defaults.handlers, defaults.webhook_allow) == (
        ("default",),
        (),
        (),
    )


def test_the_log_level_is_read_in_any_case() -> None:
    """If the log level is written in capitals, as the logging module names levels, then
    it is accepted and kept in lower case."""
    assert load_settings({"JOBLEDGER_LOG_LEVEL": "WARNING"}).log_level == "warning"
