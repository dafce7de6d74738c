"""Settings: one frozen object from JOBLEDGER_* variables and flags, clear errors."""

from pathlib import Path

import pytest

from jobledger.runtime.errors import SettingsError
from jobledger.runtime.settings import load_settings
from jobledger.runtime.store import persistence_env


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
    ],
)
def test_bad_settings_name_the_variable(environ: dict[str, str], names: str) -> None:
    """If a setting is malformed, then the error names its variable."""
    with pytest.raises(SettingsError, match=names):
        load_settings(environ)


def test_a_malformed_postgres_url_is_a_settings_error() -> None:
    """If the database URL cannot be parsed, then the error says how to write one."""
    settings = load_settings({"JOBLEDGER_DATABASE_URL": "postgresql://a b c/?=&&"})
    with pytest.raises(SettingsError, match="postgresql://user:password@host"):
        persistence_env(settings)


def test_secrets_never_reach_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    """If a log line carries a password or token field, then its value is masked."""
    import structlog  # noqa: PLC0415 (configured per test)

    from jobledger.runtime.logging import configure_logging  # noqa: PLC0415

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
