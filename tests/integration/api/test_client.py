"""jobledger.client against a live server (uvicorn, PostgreSQL, Redis, a projector and
a worker): every method with its typed result, typed errors, a 503 retried without a
second run, and a list of 1,000 jobs walked along its cursor."""

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest
from tests.integration import code_jobs
from tests.integration.api.conftest import serve_api, worker_for

from jobledger.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConflictError,
    ConnectionFailedError,
    ExecutionCancelledError,
    ExecutionFailedError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
    WaitTimedOutError,
    WorkflowFailedError,
    WorkflowTimedOutError,
)
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.roles import Role
from jobledger.runtime.scheduler import SchedulerService
from jobledger.schemas.events import EventOut
from jobledger.schemas.executions import (
    BulkDiscardIn,
    BulkReport,
    BulkRequeueIn,
    BulkRunsIn,
    ExecutionDetail,
    ExecutionRef,
    UniqueIn,
)
from jobledger.schemas.jobs import (
    BackfillReport,
    ConcurrencyIn,
    CronIn,
    JobIn,
    JobOut,
    JobPatch,
    LimitsIn,
    PreviewOut,
    RetryIn,
)
from jobledger.schemas.limits import KeyUse, LimitList, LimitOut
from jobledger.schemas.rows import ExecutionRow, JobRow
from jobledger.schemas.system import Readiness
from jobledger.schemas.workflows import StepIn, WorkflowIn, WorkflowOut

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

NIGHTLY = JobIn(
    name="nightly invoices",
    handler="billing.send_invoice",
    payload={"customer": "acme", "amount": 120},
    schedule=CronIn(cron="30 2 * * *", timezone="Europe/Berlin"),
)


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    """The API with the handlers of a jobs module, and a worker that runs them."""
    with (
        serve_api(
            module_postgres_url,
            redis_server,
            live_server,
            handlers="tests.integration.code_jobs",
            worker_slots="8",
            breaker_fail_max="1000",  # the runs that fail on purpose must not open it
        ) as api,
        worker_for(api),
    ):
        yield api


@pytest.fixture
def client(served: "Api") -> Iterator[Client]:
    with Client(served.url, served.tokens[Role.OPERATOR], backoff=0.01) as made:
        yield made


def test_jobs_from_create_to_delete_with_typed_results(client: Client) -> None:
    """If a job is created, read (now and as of a version), changed, paused, resumed,
    previewed, triggered, listed and deleted through the client, then every answer is
    the API's own struct, and the run it triggered is waited for to its result."""
    created = client.create_job(NIGHTLY, idempotency_key="nightly-1")
    assert isinstance(created, JobOut)
    assert client.create_job(NIGHTLY, idempotency_key="nightly-1").id == created.id
    assert client.get_job(created.id).definition == NIGHTLY
    changed = client.update_job(created.id, JobPatch(description="the monthly run"))
    assert (changed.version, changed.definition.description) == (2, "the monthly run")
    assert client.get_job(created.id, as_of=1).definition.description == ""
    assert client.update_job(created.id, {"priority": 7}).definition.priority == 7
    assert client.pause_job(created.id, reason="month end").status == "paused"
    assert client.resume_job(created.id).status == "active"
    preview = client.preview_job(created.id, count=3)
    assert isinstance(preview, PreviewOut)
    assert len(preview.fires) == 3
    after = datetime(2026, 3, 28, tzinfo=UTC)
    fires = client.preview_schedule(
        CronIn(cron="30 2 * * *", timezone="Europe/Berlin"), after=after
    )
    assert fires.fires[1].at == datetime(
        2026, 3, 29, 1, 0, tzinfo=UTC
    )  # 02:30 skipped: at the jump
    run = client.trigger_job(created.id, idempotency_key="by-hand")
    assert isinstance(run, ExecutionRef)
    assert client.wait(run, timeout=30) == {"sent_to": "acme", "amount": 120, "currency": "EUR"}
    history = client.job_history(created.id)
    assert all(isinstance(event, EventOut) for event in history)
    assert [e.type for e in history][:2] == ["JobScheduled", "JobUpdated"]
    runs = client.job_executions(created.id)
    assert [row.id for row in runs.items] == [run.id]
    assert isinstance(runs.items[0], ExecutionRow)
    listed = client.list_jobs(search="nightly")
    assert [type(row) for row in listed.items] == [JobRow]
    assert client.delete_job(created.id).status == "deleted"
    handlers = {handler.name: handler for handler in client.handlers()}
    assert handlers["billing.send_invoice"].payload_schema is not None
    health = client.health()
    assert isinstance(health, Readiness)
    assert health.ready


def test_runs_enqueued_are_waited_for_to_their_end(client: Client) -> None:
    """If runs are enqueued (by handler name or the declared function, with a dict or
    a struct, now or delayed), then wait() returns each result; a run that fails every
    attempt raises with its last error, a cancelled one raises as cancelled, and a run
    that outlasts the wait raises a timeout that says how it was last seen."""
    invoice = code_jobs.Invoice(customer="globex", amount=5)
    by_function = client.enqueue(code_jobs.send_invoice, invoice)
    delayed = client.enqueue("tests.answer", delay=0.5, queue="default", priority=8)
    assert client.wait(by_function, timeout=30)["sent_to"] == "globex"
    assert client.wait(delayed, timeout=30) == {"value": 42}
    detail = client.get_execution(delayed.id, wait=5)
    assert isinstance(detail, ExecutionDetail)
    # Both are kept to the millisecond, and read from two clocks a moment apart.
    ready_at, enqueued_at = detail.execution.ready_at, detail.execution.enqueued_at
    assert ready_at is not None
    assert enqueued_at is not None
    waited = ready_at - enqueued_at
    assert waited >= timedelta(seconds=0.49)
    assert detail.attempts[0].outcome == "completed"
    failing = client.enqueue("test.fail", {"error": "card declined"}, retry=RetryIn(max_retries=0))
    with pytest.raises(ExecutionFailedError, match="card declined") as failed:
        client.wait(failing, timeout=30)
    assert failed.value.last_error is not None
    assert "card declined" in failed.value.last_error
    slow = client.enqueue("test.delay", {"seconds": 30})
    with pytest.raises(WaitTimedOutError, match=r"did not finish within 0\.5 s"):
        client.wait(slow, timeout=0.5)
    assert client.cancel(slow, reason="not needed").status == "cancelled"
    with pytest.raises(ExecutionCancelledError, match="cancelled by operator: not needed"):
        client.wait(slow, timeout=30)
    events = client.execution_history(slow.id)
    assert events[-1].type == "ExecutionCancelled"
    mine = {by_function.id, delayed.id, failing.id, slow.id}
    assert mine <= {row.id for row in client.iter_executions(page_size=2)}
    assert client.list_executions(handler="tests.answer").items[0].id == delayed.id


def test_runs_are_cancelled_and_retried_now_in_bulk(client: Client) -> None:
    """If the client cancels runs by a filter and brings one in back-off forward, then
    the reports count what changed, and the run brought forward ends without waiting
    out its back-off."""
    queue = f"q{uuid.uuid4().hex[:8]}"
    waiting = [client.enqueue("test.echo", queue=queue) for _ in range(2)]
    deadline = time.monotonic() + 20
    while client.list_executions(queue=queue).total < len(waiting):  # the read models
        assert time.monotonic() < deadline
        time.sleep(0.05)
    selection = BulkRunsIn(queue=queue, status="pending", reason="no worker for it")
    counted = client.cancel_many(msgspec.structs.replace(selection, dry_run=True))
    assert counted == BulkReport(matched=2, changed=0, refused=0, dry_run=True)
    assert client.cancel_many(selection).changed == 2
    assert {client.execution_history(run)[-1].type for run in waiting} == {"ExecutionCancelled"}
    later = client.enqueue("test.echo", delay=600)
    assert client.retry_now(BulkRunsIn(ids=[later.id])).changed == 1
    assert client.wait(later, timeout=30)["echo"] == {}


def test_dead_letters_are_listed_requeued_and_discarded(client: Client) -> None:
    """If runs end in the dead-letter queue, then the client lists them and their
    groups, requeues one (a fresh budget), counts with a dry run and discards a group
    by its error, each with its report."""
    dead = [
        client.enqueue("test.fail", {"error": f"dead {n}"}, retry=RetryIn(max_retries=0))
        for n in range(2)
    ]
    for run in dead:
        with pytest.raises(ExecutionFailedError):
            client.wait(run, timeout=30)
    listed = {row.id for row in client.iter_dead_letters(handler="test.fail", page_size=1)}
    assert {run.id for run in dead} <= listed
    assert client.list_dead_letters(error_contains="dead 0").items[0].id == dead[0].id
    # What the operator judges a dead letter by: its input, beside its end.
    judged = client.get_execution(dead[0].id)
    assert (judged.payload, judged.execution.status) == ({"error": "dead 0"}, "dead_lettered")
    grouped = {(g.handler, g.error): g.count for g in client.dead_letter_groups()}
    assert grouped[("test.fail", "HandlerError: dead 0")] == 1
    [raised] = [line for line in judged.logs if line.message == "handler.raised"]
    assert (raised.attempt, raised.level) == (1, "warning")
    assert "HandlerError: dead 0" in raised.fields["exception"]
    counted = client.requeue_matching(BulkRequeueIn(error_contains="dead 1", dry_run=True))
    assert counted == BulkReport(matched=1, changed=0, refused=0, dry_run=True)
    assert client.requeue(dead[0].id, reason="card updated").changed == 1
    group = BulkDiscardIn(handler="test.fail", error_contains="HandlerError: dead 1")
    dry = msgspec.structs.replace(group, dry_run=True, reason="obsolete")
    assert client.discard_matching(dry) == BulkReport(matched=1, changed=0, refused=0, dry_run=True)
    gone = client.discard_matching(msgspec.structs.replace(group, reason="obsolete"))
    assert (gone.matched, gone.changed) == (1, 1)
    # wait() reads what the read models show: a dead letter is an end too, until the
    # projector has applied the discard.
    deadline = time.monotonic() + 30
    while client.get_execution(dead[1].id).execution.status != "discarded":
        assert time.monotonic() < deadline, "the discard never showed"
        time.sleep(0.05)
    with pytest.raises(ExecutionCancelledError, match="discarded"):
        client.wait(dead[1], timeout=30)


def test_refusals_are_typed_errors_with_the_apis_message_and_fix(served: "Api") -> None:
    """If the API refuses a request, then the client raises the error of its kind,
    carrying the API's message, field and fix; no answer at all is a connection error."""
    with Client(served.url, served.tokens[Role.OPERATOR], backoff=0.01) as client:
        with pytest.raises(NotFoundError):
            client.get_job(uuid.uuid4())
        bad_cron = msgspec.structs.replace(NIGHTLY, schedule=CronIn(cron="61 * * * *"))
        with pytest.raises(ValidationError) as invalid:
            client.create_job(bad_cron)
        assert invalid.value.field == "schedule.cron"
        assert invalid.value.fix
        with pytest.raises(ValidationError) as payload:  # the handler's struct refuses it
            client.enqueue("billing.send_invoice", {"customer": "acme", "amount": "ten"})
        assert (payload.value.status, payload.value.field) == (422, "payload.amount")
        gone = client.create_job(NIGHTLY)
        client.delete_job(gone.id)
        with pytest.raises(ConflictError, match="deleted"):
            client.pause_job(gone.id)
    viewer = Client(served.url, served.tokens[Role.VIEWER])
    with viewer, pytest.raises(PermissionDeniedError, match="operator"):
        viewer.enqueue("tests.answer")
    stranger = Client(served.url, "jl_not_a_token")
    with stranger, pytest.raises(AuthenticationError) as unknown:
        stranger.list_jobs()
    assert unknown.value.status == 401
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"
    lost = Client(nowhere, "t", retries=2, backoff=0.01)
    with lost, pytest.raises(ConnectionFailedError, match="JOBLEDGER_URL"):
        lost.health()


class LosesFirstAnswers(httpx.BaseTransport):
    """In front of the real server: the first ``count`` requests reach it and are
    served, but their client gets a 503 instead of the answer (a proxy that lost it)."""

    def __init__(self, count: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.left = count
        self.sent: list[tuple[str, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.headers.get("Idempotency-Key")))
        answer = self.inner.handle_request(request)
        if self.left > 0:
            self.left -= 1
            answer.read()
            body = b'{"error": {"status": 503, "code": "unavailable", "message": "try again"}}'
            return httpx.Response(503, headers={"Retry-After": "0"}, content=body)
        return answer

    def close(self) -> None:
        self.inner.close()


def test_a_503_is_retried_with_the_same_key_and_runs_once(served: "Api") -> None:
    """If an enqueue is saved but its answer is lost behind a 503, then the client sends
    it again with the same Idempotency-Key and gets the first run back: one run, not
    two; a broken connection is retried the same way."""
    transport = LosesFirstAnswers(2)
    token = served.tokens[Role.OPERATOR]
    before = datetime.now(tz=UTC)
    with Client(served.url, token, backoff=0.01, transport=transport) as client:
        run = client.enqueue("tests.block", {"seconds": 0})
        assert client.wait(run, timeout=30) == {"slept": 0.0}
        since = client.list_executions(handler="tests.block", since=before)
    posts = [key for method, key in transport.sent if method == "POST"]
    assert len(posts) == 3  # the first, and two retries after a lost answer
    assert len(set(posts)) == 1
    assert [row.id for row in since.items] == [run.id]


class CountsRequests(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.slow
def test_iterating_1000_jobs_follows_the_cursor(served: "Api") -> None:
    """If 1,000 jobs are listed through iter_jobs (sync and async), then each comes
    once, in name order, in one request per page."""
    prefix = f"bulk {uuid.uuid4().hex[:6]}"
    now = datetime.now(tz=UTC)
    jobs = [
        Job.schedule(
            JobDefinition(name=f"{prefix} {n:04d}", spec=ExecutionSpec(handler="tests.answer")),
            at=now,
            by="test",
        )
        for n in range(1000)
    ]
    served.container.ledger.save_all(*jobs)
    expected = [job.id for job in sorted(jobs, key=lambda job: job.definition.name)]
    counting = CountsRequests()
    token = served.tokens[Role.VIEWER]
    with Client(served.url, token, transport=counting) as client:
        served.wait_for(lambda: client.list_jobs(search=prefix, limit=1).total == 1000, 30)
        counting.count = 0
        walked = [row.id for row in client.iter_jobs(search=prefix, page_size=100)]
    assert walked == expected
    assert counting.count == 10

    async def walk() -> list[uuid.UUID]:
        async with AsyncClient(served.url, token) as client:
            return [row.id async for row in client.iter_jobs(search=prefix, page_size=250)]

    assert asyncio.run(walk()) == expected


def test_the_async_client_runs_many_requests_at_once(served: "Api") -> None:
    """If an AsyncClient enqueues 20 runs at once and waits for them all, then each is
    a run of its own and each result comes back."""

    async def scenario() -> list[dict[str, Any]]:
        async with AsyncClient(served.url, served.tokens[Role.OPERATOR]) as client:
            runs = await asyncio.gather(
                *(
                    client.enqueue(code_jobs.send_invoice, {"customer": f"c{n}", "amount": n})
                    for n in range(20)
                )
            )
            assert len({run.id for run in runs}) == 20
            return list(await asyncio.gather(*(client.wait(run, timeout=60) for run in runs)))

    results = asyncio.run(scenario())
    assert sorted(result["amount"] for result in results) == list(range(20))


def test_the_async_client_covers_the_same_routes(served: "Api") -> None:
    """If the AsyncClient drives a job and runs through their lives, then each method
    answers with the same typed structs as the blocking client's."""

    async def scenario() -> None:
        async with AsyncClient(served.url, served.tokens[Role.OPERATOR]) as client:
            job = await client.create_job(NIGHTLY, idempotency_key=f"async-{uuid.uuid4()}")
            assert (await client.get_job(job.id, as_of=1)).version == 1
            await client.update_job(job.id, {"priority": 6})
            assert (await client.pause_job(job.id)).status == "paused"
            assert (await client.resume_job(job.id)).status == "active"
            assert len((await client.preview_job(job.id, count=2)).fires) == 2
            assert (await client.preview_schedule(CronIn(cron="0 * * * *"), count=1)).fires
            run = await client.trigger_job(job.id)
            assert (await client.wait(run, timeout=30))["sent_to"] == "acme"
            assert (await client.job_executions(job.id)).items[0].id == run.id
            assert (await client.job_history(job.id))[-1].type == "JobTriggered"
            assert (await client.list_jobs(search="nightly")).total >= 1
            assert (await client.delete_job(job.id)).status == "deleted"
            assert {h.name for h in await client.handlers()} >= {"billing.send_invoice"}
            assert (await client.health()).ready
            detail = await client.get_execution(run, wait=1)
            assert detail.execution.status == "completed"
            assert (await client.execution_history(run))[-1].type == "ExecutionCompleted"
            assert (await client.list_executions(job_id=job.id)).items[0].id == run.id
            slow = await client.enqueue("test.delay", {"seconds": 30})
            assert (await client.cancel(slow)).status == "cancelled"
            later = await client.enqueue("test.echo", delay=600)
            soon = BulkRunsIn(ids=[later.id], reason="now, please")
            assert (await client.retry_now(soon)).changed == 1
            assert (await client.wait(later, timeout=30))["echo"] == {}
            again = BulkRunsIn(ids=[later.id, slow.id], dry_run=True)
            assert (await client.cancel_many(again)).matched == 2
            dead = await client.enqueue("test.fail", retry=RetryIn(max_retries=0))
            with pytest.raises(ExecutionFailedError):
                await client.wait(dead, timeout=30)
            assert dead.id in [row.id async for row in client.iter_dead_letters()]
            assert (await client.list_dead_letters(handler="test.fail")).total >= 1
            selection = BulkRequeueIn(handler="test.fail", dry_run=True)
            assert (await client.requeue_matching(selection)).dry_run
            assert (await client.requeue(dead, reason="again")).changed == 1
            with pytest.raises(ExecutionFailedError):
                await client.wait(dead, timeout=30)
            assert (await client.discard(dead, reason="done")).changed == 1
            assert [row.id async for row in client.iter_executions(job_id=job.id)] == [run.id]
            applied = await client.apply([], dry_run=True)
            assert not applied.applied

    asyncio.run(scenario())


@pytest.fixture
def releasing(served: "Api") -> Iterator["Api"]:
    """A scheduler on the served stores: it leads, and releases a workflow's next steps
    as the steps they wait for end."""
    service = SchedulerService(served.container.scheduler())
    service.start()
    try:
        yield served
    finally:
        service.stop()


FAN = {
    "name": "fan out and in",
    "steps": [
        {"name": "extract", "handler": "tests.answer"},
        {"name": "left", "handler": "test.echo", "payload": {"side": "l"}, "after": ["extract"]},
        {"name": "right", "handler": "test.echo", "payload": {"side": "r"}, "after": ["extract"]},
        {"name": "join", "handler": "test.echo", "after": ["left", "right"]},
    ],
}


def test_workflows_are_created_read_and_waited_for(releasing: "Api") -> None:
    """If a workflow is created through the client, then wait() returns it completed,
    each step with its result and the join seeing both of its upstreams' results; the
    same key returns the same workflow; a failing step makes wait() raise naming it; a
    wait shorter than the run raises a timeout, and a cancel ends it as cancelled."""
    with Client(releasing.url, releasing.tokens[Role.OPERATOR], backoff=0.01) as client:
        key = f"fan-{uuid.uuid4()}"
        flow = client.workflows.create(FAN, idempotency_key=key)
        assert isinstance(flow, WorkflowOut)
        assert client.workflows.create(FAN, idempotency_key=key).id == flow.id
        done = client.workflows.wait(flow, timeout=60)
        assert done.status == "completed"
        steps = {step.name: step for step in done.steps}
        assert steps["extract"].result == {"value": 42}
        join = steps["join"].result or {}
        assert sorted(join["upstream"]) == ["left", "right"]
        assert join["upstream"]["left"]["echo"] == {"side": "l"}
        assert client.workflows.get(flow.id).steps == done.steps
        assert client.workflows.history(flow)[-1].type == "WorkflowCompleted"
        failing = client.workflows.create(
            WorkflowIn(
                steps=[
                    StepIn(name="charge", handler="test.fail", retry=RetryIn(max_retries=0)),
                    StepIn(name="ship", handler="test.echo", after=["charge"]),
                ]
            )
        )
        with pytest.raises(WorkflowFailedError, match="charge") as failed:
            client.workflows.wait(failing, timeout=60)
        assert failed.value.failed_steps == ["charge"]
        slow = client.workflows.create(
            {"steps": [{"name": "nap", "handler": "test.delay", "payload": {"seconds": 30}}]}
        )
        with pytest.raises(WorkflowTimedOutError, match="0 of 1 steps"):
            client.workflows.wait(slow, timeout=0.3)
        assert client.workflows.cancel(slow, reason="enough").status == "cancelled"
        with pytest.raises(WorkflowFailedError, match="cancelled"):
            client.workflows.wait(slow, timeout=10)


def test_the_async_client_waits_for_workflows_and_backfills(releasing: "Api") -> None:
    """If the AsyncClient starts a workflow and backfills a job, then the workflow is
    waited for to its end, a dry run counts the occurrences without firing, the run
    fires them, and a second backfill of the window fires none."""

    async def scenario() -> None:
        token = releasing.tokens[Role.OPERATOR]
        async with AsyncClient(releasing.url, token, backoff=0.01) as client:
            flow = await client.workflows.create(FAN)
            done = await client.workflows.wait(flow.id, timeout=60)
            assert [s.status for s in done.steps] == ["completed"] * 4
            assert (await client.workflows.get(flow)).status == "completed"
            assert (await client.workflows.history(flow))[0].type == "WorkflowStarted"
            hourly = await client.create_job(
                JobIn(name="hourly", handler="test.echo", schedule=CronIn(cron="0 * * * *"))
            )
            end = datetime.now(tz=UTC).replace(minute=30) - timedelta(hours=2)
            start = end - timedelta(hours=5)
            dry = await client.backfill_job(hourly.id, start=start, end=end, dry_run=True)
            assert (dry.occurrences, dry.to_fire, dry.fired, dry.dry_run) == (5, 5, 5, True)
            assert (await client.get_job(hourly.id)).fired_count == 0
            run = await client.backfill_job(hourly.id, start=start, end=end, reason="gap")
            assert isinstance(run, BackfillReport)
            assert (run.fired, run.dry_run) == (5, False)
            again = await client.backfill_job(hourly.id, start=start, end=end, overlap="skip")
            assert (again.already_fired, again.fired) == (5, 0)
            links = await client.job_dependencies(hourly.id)
            assert (links.upstreams, links.downstreams) == ([], [])

    asyncio.run(scenario())


def test_enqueue_many_sends_batches_and_a_retry_makes_nothing_new(served: "Api") -> None:
    """If 2,100 runs are enqueued with enqueue_many, then they go in three batch
    requests and come back in the payloads' order, each a run of its own; the same
    call again with its key answers the same runs and writes nothing; the async client
    enqueues a batch whose runs complete."""
    counting = CountsRequests()
    payloads = [{"customer": f"c{n}", "amount": n} for n in range(2100)]
    token = served.tokens[Role.OPERATOR]
    key = f"many-{uuid.uuid4().hex}"
    with Client(served.url, token, transport=counting) as client:
        runs = client.enqueue_many(
            code_jobs.send_invoice, payloads, queue="parked", idempotency_key=key
        )
        assert counting.count == 3
        assert len({run.id for run in runs}) == 2100
        head = served.container.ledger.recorder.max_notification_id()
        again = client.enqueue_many(
            code_jobs.send_invoice, payloads, queue="parked", idempotency_key=key
        )
        assert again == runs
        assert served.container.ledger.recorder.max_notification_id() == head
        spec = served.container.ledger.get_execution(runs[1234].id).spec
        assert (spec.queue, spec.payload) == ("parked", {"customer": "c1234", "amount": 1234})
        with pytest.raises(ValidationError) as refused:
            client.enqueue_many(code_jobs.send_invoice, [{"customer": "x", "amount": 1}, {}])
        assert refused.value.field is not None
        assert refused.value.field.startswith("runs[1].payload")

    async def scenario() -> list[Any]:
        async with AsyncClient(served.url, token) as client:
            made = await client.enqueue_many(
                code_jobs.send_invoice, [{"customer": "a", "amount": n} for n in range(5)]
            )
            return list(await asyncio.gather(*(client.wait(run, timeout=60) for run in made)))

    assert sorted(result["amount"] for result in asyncio.run(scenario())) == list(range(5))


def test_a_unique_enqueue_returns_the_run_holding_the_key(client: Client) -> None:
    """If two enqueues name the same unique key, then the second returns the first run,
    marked duplicate, and starts nothing."""
    key = f"invoice:{uuid.uuid4().hex[:8]}"
    rule = UniqueIn(key=key)
    first = client.enqueue(
        code_jobs.send_invoice, {"customer": "a", "amount": 1}, queue="parked", unique=rule
    )
    second = client.enqueue(
        code_jobs.send_invoice, {"customer": "a", "amount": 2}, queue="parked", unique=rule
    )
    assert (first.duplicate, second.duplicate) == (False, True)
    assert second.id == first.id


def _lease(api: "Api", queue: str) -> int:
    """Lease what ``queue`` lets lease now, as a worker would (no worker serves it)."""
    ids = [uuid.uuid4() for _ in range(10)]
    leased = api.container.queue.lease_round(
        queue, lease_ids=ids, ttl=timedelta(minutes=5), now=datetime.now(UTC)
    )
    return len(leased.leases)


def test_limits_are_made_changed_and_held_by_runs_the_client_enqueues(
    client: Client, served: "Api"
) -> None:
    """If a named limit is created and changed through the client, then a second
    create is a ConflictError and the same values change nothing; if runs enqueued with
    limits (a struct or a mapping) wait for its key and one leases, then limits() shows
    the key with 1 in use of 1 and 2 waiting."""
    name, queue = f"partner:{uuid.uuid4().hex[:8]}", "limited"
    created = client.create_limit(name, concurrency=2)
    assert (created.changed, created.limit.concurrency) == (True, 2)
    with pytest.raises(ConflictError):
        client.create_limit(name, concurrency=3)
    changed = client.change_limit(name, concurrency=1, rate=100, per_seconds=60)
    assert changed.changed
    assert not client.change_limit(name, concurrency=1, rate=100, per_seconds=60).changed
    limit = client.limit(name)
    assert isinstance(limit, LimitOut)
    assert (limit.version, limit.concurrency, limit.rate, limit.per_seconds) == (2, 1, 100, 60)
    # Each run also gives 1 itself: whether the lease step has read the named limit yet
    # or not, one run holds the key.
    own = LimitsIn(concurrency=ConcurrencyIn(key=name, max=1))
    given: list[LimitsIn | dict[str, Any]] = [own, {"concurrency": {"key": name, "max": 1}}, own]
    for limits in given:
        client.enqueue("test.echo", {}, queue=queue, limits=limits)
    served.wait_for(lambda: served.container.queue.depths(queue, now=datetime.now(UTC)).ready == 3)
    assert _lease(served, queue) == 1
    served.wait_for(lambda: any(row.name == name for row in client.limits().limits))
    overview = client.limits()
    assert (
        KeyUse(queue=queue, kind="concurrency", key=name, in_use=1, waiting=2, allowed=1)
        in overview.keys
    )
    assert [(row.in_use, row.waiting) for row in overview.limits if row.name == name] == [(1, 2)]


def test_queues_are_listed_paused_resumed_and_drained(client: Client) -> None:
    """If a queue with runs is paused through the client, then it lists as paused with
    the reason, a second pause changes nothing, resume runs it again, and a dry-run
    drain lists its pending runs without cancelling them, which the drain then does."""
    queue = f"q{uuid.uuid4().hex[:8]}"
    runs = {client.enqueue("test.echo", {}, queue=queue).id for _ in range(2)}
    paused = client.pause_queue(queue, "moving the database")
    assert (paused.name, paused.paused, paused.changed) == (queue, True, True)
    assert not client.pause_queue(queue, "again").changed
    listed = {row.name: row for row in client.queues().queues}
    assert (listed[queue].paused, listed[queue].pause_reason) == (True, "moving the database")
    assert client.resume_queue(queue).paused is False
    dry = client.drain_queue(queue, "not needed", dry_run=True)
    assert (dry.dry_run, set(dry.cancelled)) == (True, runs)
    assert client.get_execution(next(iter(runs))).execution.status == "pending"
    drained = client.drain_queue(queue, "not needed")
    assert set(drained.cancelled) == runs


def test_the_async_client_manages_queues_and_limits(served: "Api") -> None:
    """If the AsyncClient creates and changes a limit and pauses, resumes and drains a
    queue, then each answer is the same struct the blocking client gets."""
    name, queue = f"async:{uuid.uuid4().hex[:8]}", f"a{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with AsyncClient(served.url, served.tokens[Role.OPERATOR]) as client:
            assert (await client.create_limit(name, rate=5, per_seconds=10)).limit.rate == 5
            assert (await client.change_limit(name, concurrency=4)).changed
            assert (await client.limit(name)).concurrency == 4
            assert isinstance(await client.limits(), LimitList)
            run = await client.enqueue(
                "test.echo", {}, queue=queue, limits={"concurrency": {"key": name}}
            )
            assert (await client.pause_queue(queue, "a moment")).paused
            assert queue in {row.name for row in (await client.queues()).queues}
            assert not (await client.resume_queue(queue)).paused
            drained = await client.drain_queue(queue, "done", dry_run=True)
            assert drained.cancelled == [run.id]

    asyncio.run(scenario())
