"""`jobledger apply` and POST /api/v1/jobs:apply against a live server: the plan it
prints, a second apply that writes nothing, pruning, the guard on hand edits of
managed jobs, and a set applied whole or not at all."""

import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.integration.api.conftest import serve_api

from jobledger import apply_cli
from jobledger.cli import build_parser
from jobledger.client import Client, ConflictError, NotFoundError, ValidationError
from jobledger.domain.job import managed_job_id
from jobledger.domain.roles import Role
from jobledger.schemas.jobs import CronIn, DependencyIn, JobIn, ManagedJobIn

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

CODE_JOBS = "tests.integration.code_jobs"
# The next version of the jobs module: billing.monthly moves to 07:00, a cleanup job
# comes, reports.half_hourly is gone.
NEXT_VERSION = '''
import jobledger

@jobledger.periodic("0 7 1 * *", tz="Europe/Berlin", key="billing.monthly",
                    payload={"customer": "everyone", "amount": 0, "currency": "EUR"},
                    overlap="skip_if_running")
@jobledger.handler("billing.send_invoice")
def send_invoice(payload: dict) -> None:
    """Sends one invoice."""

@jobledger.periodic("15 3 * * *", key="cleanup.nightly")
@jobledger.handler("tests.block")
def cleanup(payload: dict) -> None:
    pass
'''


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    with serve_api(module_postgres_url, redis_server, live_server, handlers=CODE_JOBS) as api:
        yield api


class Applier:
    """`jobledger apply` as an operator runs it, its output kept."""

    def __init__(self, api: "Api", capsys: pytest.CaptureFixture[str]) -> None:
        self.api = api
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, list[str], str]:
        token = self.api.tokens[Role.OPERATOR]
        parsed = build_parser().parse_args(
            ["apply", *args, "--url", self.api.url, "--token", token]
        )
        lines: list[str] = []
        status = apply_cli.run(parsed, lines.append)
        return status, lines, self.capsys.readouterr().err


@pytest.fixture
def apply(served: "Api", capsys: pytest.CaptureFixture[str]) -> Applier:
    return Applier(served, capsys)


def _module(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"acme_jobs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_apply_plans_creates_updates_prunes_and_writes_nothing_twice(
    served: "Api", apply: Applier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the jobs of a module are applied (first as a dry run), applied again, then
    applied in their next version (in the module's scope) with --prune, then the plan
    says create, unchanged, update (with the changed field), create and delete in
    turn; the dry run and the second apply write no event; the events say who applied
    and that code did."""
    monthly = managed_job_id("billing.monthly")
    head = served.container.head()
    status, dry, _ = apply("--module", CODE_JOBS, "--dry-run")
    assert status == 0
    assert f"  + create    billing.monthly  ({monthly})" in dry
    assert dry[-2:] == ["2 to create, 0 to update, 0 to delete, 0 unchanged.",
                        "Dry run: nothing was changed."]  # fmt: skip
    assert served.container.head() == head
    assert apply("--module", CODE_JOBS)[1][-1] == "Applied."
    head = served.container.head()
    status, again, _ = apply("--module", CODE_JOBS)
    assert [line.split()[:2] for line in again[1:3]] == [["=", "unchanged"]] * 2
    assert again[-1] == "Nothing to change."
    assert served.container.head() == head
    with Client(served.url, served.tokens[Role.VIEWER]) as client:
        served.wait_for(lambda: client.list_jobs(source="code").total == 2)
        created = client.job_history(monthly)[0]
        assert (created.data["by"], created.data["source"]) == ("operator", "code")
    next_version = _module(NEXT_VERSION, tmp_path, monkeypatch)
    status, lines, _ = apply("--module", next_version, "--scope", CODE_JOBS, "--prune")
    assert status == 0
    plan = [line.split()[:3] for line in lines if line.startswith("  ")]
    assert plan == [
        ["~", "update", "billing.monthly"],
        ["schedule.cron:", '"0', "6"],
        ["+", "create", "cleanup.nightly"],
        ["-", "delete", "reports.half_hourly"],
    ]
    assert '      schedule.cron: "0 6 1 * *" -> "0 7 1 * *"' in lines
    assert lines[-2:] == ["1 to create, 1 to update, 1 to delete, 0 unchanged.", "Applied."]
    with Client(served.url, served.tokens[Role.VIEWER]) as client:
        assert client.get_job(managed_job_id("reports.half_hourly")).status == "deleted"
        assert client.get_job(monthly).definition.schedule.cron == "0 7 1 * *"  # type: ignore[union-attr]


def _periodic_module(*keys: str) -> str:
    return "import jobledger\n" + "".join(
        f"""
@jobledger.periodic("0 6 * * *", key="{key}")
@jobledger.handler("{handler}")
def job_{n}(payload: dict) -> None:
    pass
"""
        for n, (key, handler) in enumerate(zip(keys, ("tests.block", "tests.answer"), strict=False))
    )


def test_two_modules_applied_with_prune_keep_each_others_jobs(
    served: "Api", apply: Applier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If two modules are each applied with --prune, then neither plans to delete the
    other's jobs, and each job shows its module as its scope; if a job is removed
    from its module, then the module's next apply with --prune deletes that job only;
    a key another module declares is refused, naming that module's scope."""
    a1, a2, b1 = (f"scoped.{name}.{uuid.uuid4().hex[:6]}" for name in ("a1", "a2", "b1"))
    first = _module(_periodic_module(a1, a2), tmp_path, monkeypatch)
    second = _module(_periodic_module(b1), tmp_path, monkeypatch)
    status, _, err = apply("--module", first, "--prune")
    assert status == 0, err
    status, lines, err = apply("--module", second, "--prune")
    assert status == 0, err
    assert [line.split()[:3] for line in lines if line.startswith("  ")] == [["+", "create", b1]]
    with Client(served.url, served.tokens[Role.VIEWER]) as client:
        scopes = {key: client.get_job(managed_job_id(key)).scope for key in (a1, a2, b1)}
        assert scopes == {a1: first, a2: first, b1: second}
    (tmp_path / f"{first}.py").write_text(_periodic_module(a1))
    importlib.invalidate_caches()
    sys.modules.pop(first, None)
    status, lines, err = apply("--module", first, "--prune")
    assert status == 0, err
    assert [line.split()[:3] for line in lines if line.startswith("  ")] == [
        ["=", "unchanged", a1],
        ["-", "delete", a2],
    ]
    with Client(served.url, served.tokens[Role.VIEWER]) as client:
        assert client.get_job(managed_job_id(a2)).status == "deleted"
        assert client.get_job(managed_job_id(b1)).status != "deleted"
    status, _, err = apply("--module", second, "--scope", "elsewhere")
    assert status == 2
    assert f"belongs to the jobs of scope '{second}'" in err


def test_a_job_applied_before_scopes_joins_the_set_that_declares_it(served: "Api") -> None:
    """If a managed job has no scope (applied over the API without one, as every job
    was before scopes), then a scoped set that declares it takes it into its scope,
    shown as a change of ``scope``; a scoped prune leaves the unscoped jobs."""
    kept, taken = (f"unscoped.{n}.{uuid.uuid4().hex[:6]}" for n in ("kept", "taken"))
    with Client(served.url, served.tokens[Role.OPERATOR]) as client:
        client.apply([_declared(kept, cron="0 6 * * *"), _declared(taken, cron="0 6 * * *")])
        assert client.get_job(managed_job_id(taken)).scope is None
        [step] = [s for s in client.apply([_declared(taken, cron="0 6 * * *")], scope="team",
                                          prune=True).plan if s.key in (kept, taken)]  # fmt: skip
        assert (step.action, [c.field for c in step.changes]) == ("update", ["scope"])
        assert client.get_job(managed_job_id(taken)).scope == "team"
        assert client.get_job(managed_job_id(kept)).status != "deleted"


def test_a_managed_job_changes_by_hand_only_with_the_override(served: "Api") -> None:
    """If an operator edits or deletes a job that code manages, then it is refused
    unless the override is given; an override is recorded in the event, and the next
    apply puts the code's definition back."""
    token = served.tokens[Role.OPERATOR]
    with Client(served.url, token) as client:
        key = f"hand.{uuid.uuid4().hex[:6]}"
        job = _declared(key, cron="0 4 * * *")
        [created] = client.apply([job]).plan
        with pytest.raises(ConflictError, match="code manages it") as refused:
            client.update_job(created.job_id, {"priority": 9})
        assert "override=true" in str(refused.value)
        with pytest.raises(ConflictError, match="code manages it"):
            client.delete_job(created.job_id)
        edited = client.update_job(created.job_id, {"priority": 9}, override=True)
        assert (edited.definition.priority, edited.source, edited.key) == (9, "code", key)
        recorded = client.job_history(created.job_id)[-1]
        assert (recorded.type, recorded.data["override"], recorded.data["source"]) == (
            "JobUpdated",
            True,
            "api",
        )
        [restored] = client.apply([job]).plan
        assert restored.action == "update"
        assert [(c.field, c.old, c.new) for c in restored.changes] == [("priority", 9, 5)]
        client.delete_job(created.job_id, override=True)
        [again] = client.apply([job]).plan
        assert again.action == "create"
        assert again.job_id == managed_job_id(key, 1)  # the next incarnation


def test_a_set_with_one_bad_job_writes_nothing(
    served: "Api", apply: Applier, tmp_path: Path
) -> None:
    """If a jobs file holds a good job and a bad one, then apply refuses the set naming
    the bad job's field, and writes nothing, not even the good job; the file fixed,
    both are created."""
    path = tmp_path / "jobs.toml"
    good = '[[jobs]]\nkey = "files.good"\nname = "good"\nhandler = "tests.block"\n'
    bad = (
        '[[jobs]]\nkey = "files.bad"\nname = "bad"\nhandler = "billing.send_invoice"\n'
        'payload = {customer = "acme", amount = 1}\n'
        'schedule = {kind = "cron", cron = "61 * * * *"}\n'
    )
    path.write_text(good + bad)
    head = served.container.head()
    status, lines, error = apply("--file", str(path))
    assert (status, lines) == (2, [])
    assert "refused (jobs[files.bad].schedule.cron)" in error
    assert served.container.head() == head
    with Client(served.url, served.tokens[Role.VIEWER]) as client, pytest.raises(NotFoundError):
        client.get_job(managed_job_id("files.good"))
    path.write_text(good + bad.replace("61 * * * *", "1 * * * *"))
    status, lines, _ = apply("--file", str(path))
    assert status == 0
    assert lines[-2:] == ["2 to create, 0 to update, 0 to delete, 0 unchanged.", "Applied."]


def test_a_jobs_file_that_does_not_fit_names_the_job_and_field(
    apply: Applier, tmp_path: Path
) -> None:
    """If a jobs file has a field of the wrong type, then apply stops before sending,
    naming the job by its index and key and the field."""
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[jobs]]\nkey = "x.y"\nname = "x"\nhandler = "tests.block"\npriority = "high"\n'
    )
    status, _, error = apply("--file", str(path))
    assert status == 2
    assert "jobs[0] (x.y).priority: Expected `int`, got `str`" in error


def _declared(key: str, *, cron: str) -> ManagedJobIn:
    return ManagedJobIn(key=key, name=key, handler="tests.block", schedule=CronIn(cron=cron))


def test_depends_on_by_key_finds_the_job_code_declares(served: "Api") -> None:
    """If a job created over the API depends on a key that code declares, then the key
    names the managed job (its current incarnation after a delete and a new apply); the
    managed job is not deleted while the other waits for it; and a key that names both a
    job created over the API and a managed job is refused, naming both."""
    key = f"upstream.{uuid.uuid4().hex[:6]}"
    with Client(served.url, served.tokens[Role.OPERATOR]) as client:
        [declared] = client.apply([_declared(key, cron="0 5 * * *")]).plan
        waiting = client.create_job(_waiting("report", key))
        assert waiting.definition.depends_on[0].job == str(declared.job_id)
        links = _links(served, declared.job_id)
        assert [(d["id"], d["on"]) for d in links["downstreams"]] == [
            (str(waiting.id), "completed")
        ]
        with pytest.raises(ConflictError, match="depend on it"):
            client.delete_job(declared.job_id, override=True)
        client.delete_job(waiting.id)
        client.delete_job(declared.job_id, override=True)
        [again] = client.apply([_declared(key, cron="0 5 * * *")]).plan
        assert again.job_id == managed_job_id(key, 1)
        later = client.create_job(_waiting("later report", key))
        assert later.definition.depends_on[0].job == str(again.job_id)
        client.create_job(JobIn(name="same key", handler="tests.block"), idempotency_key=key)
        with pytest.raises(ValidationError, match="names two jobs") as refused:
            client.create_job(_waiting("ambiguous", key))
        assert refused.value.field == "depends_on[0].job"
        assert str(again.job_id) in refused.value.message


def test_a_declared_set_depends_on_its_own_keys_checked_as_a_whole(served: "Api") -> None:
    """If a declared set's jobs depend on one another by key, then the set is created in
    one save with the graph; a set whose jobs swap which waits for which applies (the
    graph is checked as the set leaves it), one that closes a cycle is refused naming a
    job of the set, and pruning a job another declared job waits for is refused; the
    refusals write nothing."""
    a, b, c = (f"{name}.{uuid.uuid4().hex[:6]}" for name in "abc")
    with Client(served.url, served.tokens[Role.OPERATOR]) as client:
        chain = [_declared(a, cron="0 6 * * *"), _after(b, a), _after(c, b)]
        plan = {step.key: step for step in client.apply(chain).plan}
        assert [step.action for step in plan.values()] == ["create"] * 3
        links = _links(served, plan[b].job_id)
        assert [u["id"] for u in links["upstreams"]] == [str(plan[a].job_id)]
        assert [d["id"] for d in links["downstreams"]] == [str(plan[c].job_id)]
        assert not client.apply(chain).applied  # nothing changed
        swapped = [_after(a, b), _declared(b, cron="0 6 * * *"), _after(c, b)]
        assert client.apply(swapped).applied
        upstreams = _links(served, plan[a].job_id)["upstreams"]
        assert [u["id"] for u in upstreams] == [str(plan[b].job_id)]
        head = served.container.head()
        cyclic = [_after(a, b), _after(b, c), _after(c, a)]
        with pytest.raises(ValidationError, match="closes a cycle") as refused:
            client.apply(cyclic)
        assert refused.value.field is not None
        assert refused.value.field.endswith("].depends_on")
        with pytest.raises(ConflictError, match="depend on it"):
            client.apply([_after(a, b), _after(c, b)], prune=True)  # prunes b
        assert served.container.head() == head


def _links(served: "Api", job_id: uuid.UUID) -> dict[str, Any]:
    """The jobs ``job_id`` waits for and that wait for it."""
    response = served.client(Role.VIEWER).get(f"/api/v1/jobs/{job_id}/dependencies")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _waiting(name: str, upstream: str) -> JobIn:
    return JobIn(name=name, handler="tests.block", depends_on=[DependencyIn(job=upstream)])


def _after(key: str, upstream: str) -> ManagedJobIn:
    return ManagedJobIn(
        key=key, name=key, handler="tests.block", depends_on=[DependencyIn(job=upstream)]
    )


def test_a_jobs_files_notification_rules_are_applied_by_an_admin_as_one_set(
    served: "Api", tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """If a jobs file declares notification rules, then an admin's apply makes them as
    the file's set and prints their plan, a second apply changes nothing, an operator's
    apply is refused before anything is written, and a bad rule is named by its index,
    name and field."""
    path = tmp_path / "alerts.toml"
    job = '[[jobs]]\nkey = "alerts.job"\nname = "alerts job"\nhandler = "tests.block"\n'
    rule = (
        '[[notifications]]\nname = "billing failures"\non = "failures_in_a_row"\n'
        'job = "billing"\ncount = 3\n'
        'channel = {kind = "slack", url = "https://hooks.slack.example/services/T/B/X"}\n'
    )
    path.write_text(job + rule)

    def apply_as(role: Role, *args: str) -> tuple[int, list[str], str]:
        parsed = build_parser().parse_args(
            [
                "apply",
                "--file",
                str(path),
                *args,
                "--url",
                served.url,
                "--token",
                served.tokens[role],
            ]
        )
        lines: list[str] = []
        status = apply_cli.run(parsed, lines.append)
        return status, lines, capsys.readouterr().err

    head = served.container.head()
    status, lines, error = apply_as(Role.OPERATOR)
    assert (status, lines) == (2, [])
    assert "admin" in error
    assert served.container.head() == head
    status, lines, _ = apply_as(Role.ADMIN)
    assert status == 0
    assert lines[-3:] == [
        "Notification rules:",
        "  + create    billing failures",
        "1 to create, 0 to update, 0 to delete, 0 unchanged.",
    ]
    with Client(served.url, served.tokens[Role.VIEWER]) as client:
        shown = client.notification_rule("billing failures")
    assert (shown.on, shown.count, shown.scope) == ("failures_in_a_row", 3, str(path))
    assert shown.channel.to == "https://hooks.slack.example"  # no token shown
    status, lines, _ = apply_as(Role.ADMIN)
    assert lines[-1] == "0 to create, 0 to update, 0 to delete, 1 unchanged."
    path.write_text(job + rule.replace("count = 3", "count = 1"))
    status, lines, error = apply_as(Role.ADMIN)
    assert status == 2
    assert "notifications[0] (billing failures).count" in error
