"""`jobledger limit list|set` as real processes on the embedded store."""

from pathlib import Path
from typing import TYPE_CHECKING

from jobledger.bootstrap import bootstrap
from jobledger.domain.limits import limit_id
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli


def test_set_creates_then_changes_a_named_limit(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If an operator sets a limit twice with other values and once with the same, then
    the log holds a definition and one change by the --by name, and the third set says
    unchanged."""
    base = ("--data-dir", str(tmp_path))
    assert jobledger_cli.run(*base, "migrate").returncode == 0
    first = jobledger_cli.run(*base, "limit", "set", "stripe", "--rate", "100", "--per", "60")
    assert first.returncode == 0, first.stderr
    assert "limit stripe set" in first.stdout
    second = ("limit", "set", "stripe", "--concurrency", "3", "--by", "ops")
    assert "limit stripe set" in jobledger_cli.run(*base, *second).stdout
    assert "unchanged" in jobledger_cli.run(*base, *second).stdout
    with bootstrap(load_settings({}, data_dir=str(tmp_path))) as container:
        limit = container.ledger.limit(limit_id("stripe"))
        assert limit is not None
        assert (limit.values.concurrency, limit.values.rate, limit.version) == (3, None, 2)


def test_a_limit_that_limits_nothing_is_refused_in_one_line(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a limit is set without values, or with a rate and no period, then the command
    exits 2 naming the problem, with no stack trace, and nothing is recorded."""
    base = ("--data-dir", str(tmp_path))
    assert jobledger_cli.run(*base, "migrate").returncode == 0
    for extra in ((), ("--rate", "5"), ("--concurrency", "0")):
        refused = jobledger_cli.run(*base, "limit", "set", "smtp", *extra)
        assert refused.returncode == 2, refused.stdout
        assert "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    with bootstrap(load_settings({}, data_dir=str(tmp_path))) as container:
        assert container.ledger.limit(limit_id("smtp")) is None


def test_delete_removes_a_named_limit(tmp_path: Path, jobledger_cli: "JobledgerCli") -> None:
    """If an operator deletes a limit, then the log records it by the --by name, the
    list no longer shows it, and deleting it again exits 2 saying there is none."""
    base = ("--data-dir", str(tmp_path))
    assert jobledger_cli.run(*base, "migrate").returncode == 0
    assert jobledger_cli.run(*base, "limit", "set", "smtp", "--concurrency", "2").returncode == 0
    done = jobledger_cli.run(*base, "limit", "delete", "smtp", "--by", "ops")
    assert done.returncode == 0, done.stderr
    assert "limit smtp deleted" in done.stdout
    assert "smtp" not in jobledger_cli.run(*base, "limit", "list").stdout
    again = jobledger_cli.run(*base, "limit", "delete", "smtp")
    assert again.returncode == 2, again.stdout
    assert "no limit named 'smtp'" in again.stderr
    with bootstrap(load_settings({}, data_dir=str(tmp_path))) as container:
        limit = container.ledger.limit(limit_id("smtp"))
        assert limit is not None
        assert limit.deleted
        assert limit.version == 2
