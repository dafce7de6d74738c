"""`jobledger token create`: a program's API token, made on the store, capped by its
user's role, its secret alone on standard output."""

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from jobledger.bootstrap import bootstrap
from jobledger.domain.roles import Role
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
PASSWORD = "staple-battery-horse-42"


def test_a_token_is_made_for_an_existing_user_within_its_role(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If the admin does not exist yet, then the command says so in one line and makes
    nothing; once it does, the command prints only a secret that resolves to a token of
    the asked role; a role above the named user's is refused."""
    data = ["--data-dir", str(tmp_path)]
    assert jobledger_cli.run(*data, "migrate").returncode == 0
    missing = jobledger_cli.run(*data, "token", "create", "shop")
    assert missing.returncode == 2
    assert missing.stderr.startswith("jobledger: --user: the user 'admin' does not exist")
    assert "Traceback" not in missing.stderr
    settings = load_settings({}, data_dir=str(tmp_path))
    with bootstrap(settings) as container:
        accounts = container.accounts()
        accounts.create_user("admin", PASSWORD, Role.ADMIN, now=NOW)
        accounts.create_user("viewer1", PASSWORD, Role.VIEWER, now=NOW)
    made = jobledger_cli.run(*data, "token", "create", "shop", "--role", "operator")
    assert made.returncode == 0, made.stderr
    (secret,) = made.stdout.splitlines()
    too_high = jobledger_cli.run(
        *data, "token", "create", "peek", "--role", "operator", "--user", "viewer1"
    )
    assert too_high.returncode == 2
    assert "Traceback" not in too_high.stderr
    with bootstrap(settings) as container:
        principal = container.accounts().resolve_token(secret, now=datetime.now(UTC))
        assert principal is not None
        assert (principal.user.username, principal.role) == ("admin", Role.OPERATOR)
        assert [t.name for t in container.accounts().list_tokens()] == ["shop"]
