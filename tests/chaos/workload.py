"""The mixed workload of a fault run, sent to the REST API as operators and programs
send it.

Cron jobs with each misfire and overlap policy (one of them always failing, one paused
and resumed), one-shot jobs due across the window, ad-hoc runs with Idempotency-Keys
(some of them sent again with the same key), manual triggers, long runs cancelled while
they run, requeues from the dead-letter queue, and poison runs when the injector asks.
Every request has a key, so one that got no answer, or a 503, is sent again until the
API accepts it; what it accepted (2xx) is what the checker holds jobledger to.
"""

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
from tests.chaos.history import Accepted
from tests.roles import ADMIN_PASSWORD

RETRY = {"max_retries": 2, "initial_backoff_seconds": 1.0, "max_backoff_seconds": 4.0}
RETRY |= {"jitter": False}  # a back-off the checker can hold each retry to
EVERY_MINUTE = {"kind": "cron", "cron": "* * * * *"}
RESEND_AFTER = 1.0  # seconds before a request without a 2xx answer is sent again
CANCEL_AFTER = 3.0  # seconds from a long run's acceptance to its cancel
PROGRESS_EVERY = 60.0


class Api:
    """An admin session that outlives the API's restarts and the stores' outages: a
    call returns the response, or None when none came (it signs in again as needed)."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=10)
        self._signed_in = False

    def call(self, method: str, path: str, **options: Any) -> httpx.Response | None:
        if not self._signed_in and not self._sign_in():
            return None
        try:
            response = self._client.request(method, path, **options)
        except httpx.TransportError:
            return None
        if response.status_code == 401:
            self._signed_in = False
        return response

    def _sign_in(self) -> bool:
        login = {"username": "admin", "password": ADMIN_PASSWORD}
        try:
            response = self._client.post("/api/v1/auth/login", json=login)
        except httpx.TransportError:
            return False
        if response.status_code != 200:
            return False
        self._client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
        self._signed_in = True
        return True

    def close(self) -> None:
        self._client.close()


@dataclass
class Request:
    """A keyed POST: sent until the API accepts it."""

    kind: str  # "adhoc" | "trigger" | "job"
    key: str
    path: str
    body: dict[str, Any] | None = None
    name: str = ""  # a job's name
    cancel: bool = False  # a long run, to cancel once it runs
    last_sent: float = 0.0


@dataclass
class Workload:
    api: Api
    rng: random.Random
    window: float
    adhoc_every: float = 0.8
    accepted: list[Accepted] = field(default_factory=list)
    answers: dict[str, set[UUID]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    crons: dict[str, UUID] = field(default_factory=dict)
    progress: Callable[[str], None] = lambda _: None
    _sent: list[Request] = field(default_factory=list)
    _pending: list[Request] = field(default_factory=list)
    _cancels: list[tuple[float, UUID]] = field(default_factory=list)
    _manual: UUID | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- before the faults ----------------------------------------------------------------

    def prepare(self, window_start: datetime, timeout: float = 60) -> None:
        """Create the jobs: the cron jobs, a manual one, and one-shots due in the window."""
        for name, fields in _cron_jobs().items():
            self._queue(Request("job", f"job:{name}", "/api/v1/jobs", _job(name, **fields), name))
        self._queue(Request("job", "job:manual", "/api/v1/jobs", _job("manual"), "manual"))
        for n in range(int(self.window / 4)):
            at = window_start + timedelta(seconds=self.rng.uniform(8, self.window - 8))
            name = f"once {n}"
            body = _job(name, schedule={"kind": "once", "run_at": at.isoformat()})
            body["misfire"] = self.rng.choice(["skip", "fire_once", "fire_all"])
            body["payload"] = {"seconds": round(self.rng.uniform(0.1, 1.0), 2)}
            if self.rng.random() < 0.1:
                body["handler"] = "chaos.failing"
            self._queue(Request("job", f"job:{name}", "/api/v1/jobs", body, name))
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            self._resend(force=True)
            time.sleep(0.2)
        assert not self._pending, f"the jobs were not all created: {self._pending}"

    # ---- under the faults -----------------------------------------------------------------

    def run(self, started: float) -> None:
        """The window's actions at their times, counted from ``started`` (monotonic),
        with cancels and unanswered requests in between."""
        said = started
        for at, action in [*self._schedule(), (self.window, lambda: None)]:
            while time.monotonic() < started + at:
                self._between()
                time.sleep(0.05)
                if time.monotonic() - said >= PROGRESS_EVERY:
                    said = time.monotonic()
                    self._say_progress(said - started)
            action()

    def _say_progress(self, elapsed: float) -> None:
        accepted = sum(1 for a in self.accepted if a.kind != "job")
        self.progress(
            f"window {elapsed:.0f}/{self.window:.0f} s: {accepted} runs accepted,"
            f" {len(self._pending)} waiting for an answer"
        )

    def drain(self, timeout: float) -> None:
        """Send what is still unanswered until the API accepts it, and the cancels due."""
        deadline = time.monotonic() + timeout
        while (self._pending or self._cancels) and time.monotonic() < deadline:
            self._between()
            time.sleep(0.1)

    def pause_crons(self, timeout: float = 30) -> None:
        """Pause every cron job (the run settles: no new occurrences)."""
        waiting = dict(self.crons)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for name, job_id in list(waiting.items()):
                response = self.api.call("POST", f"/api/v1/jobs/{job_id}/pause", json={})
                if response is not None and response.status_code == 200:
                    del waiting[name]
            time.sleep(0.2)
        assert not waiting, f"the cron jobs {sorted(waiting)} could not be paused"

    def submit_poison(self) -> None:
        """A run of test.crash, which ends the worker that runs it (from any thread)."""
        body = {"handler": "test.crash", "retry": RETRY | {"max_retries": 1}}
        self._queue(Request("adhoc", f"poison:{uuid.uuid4().hex}", "/api/v1/executions", body))

    # ---- the actions ----------------------------------------------------------------------

    def _schedule(self) -> list[tuple[float, Callable[[], None]]]:
        rng, window = self.rng, self.window
        plan: list[tuple[float, Callable[[], None]]] = []
        for kind, every in ((self._adhoc, self.adhoc_every), (self._trigger, 6.0)):
            plan += [(t, kind) for t in _times(rng, window, every)]
        plan += [(t, self._long_run) for t in _times(rng, window, 12.0)]
        plan += [(t, self._requeue) for t in _times(rng, window, 15.0)]
        plan += [(0.3 * window, self._pause_one), (0.6 * window, self._resume_one)]
        return sorted(plan, key=lambda item: item[0])

    def _adhoc(self) -> None:
        earlier = [r for r in self._sent if r.kind == "adhoc" and not r.key.startswith("poison")]
        if earlier and self.rng.random() < 0.2:
            self.counts["repeats"] += 1
            self._send(self.rng.choice(earlier))
            return
        failing = self.rng.random() < 0.15
        body = {
            "handler": "chaos.failing" if failing else "chaos.effect",
            "payload": {"seconds": round(self.rng.uniform(0.1, 1.5), 2)},
            "retry": RETRY | {"max_retries": 1 if failing else 2},
        }
        self._queue(Request("adhoc", uuid.uuid4().hex, "/api/v1/executions", body))

    def _trigger(self) -> None:
        if self._manual is None:
            return
        earlier = [r for r in self._sent if r.kind == "trigger"]
        if earlier and self.rng.random() < 0.25:
            self.counts["repeats"] += 1
            self._send(self.rng.choice(earlier))
            return
        path = f"/api/v1/jobs/{self._manual}/trigger"
        self._queue(Request("trigger", uuid.uuid4().hex, path))

    def _long_run(self) -> None:
        # Several lease ttls long; every other one reports its progress as it goes (each
        # report an event the queue folds while heartbeats extend the lease).
        payload: dict[str, Any] = {"seconds": 8}
        if self.rng.random() < 0.5:
            payload["progress_every"] = 0.5
        body = {"handler": "chaos.effect", "payload": payload, "retry": RETRY}
        request = Request("adhoc", uuid.uuid4().hex, "/api/v1/executions", body, cancel=True)
        self._queue(request)

    def _requeue(self) -> None:
        response = self.api.call("GET", "/api/v1/dlq", params={"limit": 20})
        if response is None or response.status_code != 200 or not response.json()["items"]:
            return
        item = self.rng.choice(response.json()["items"])
        answer = self.api.call(
            "POST", f"/api/v1/dlq/{item['id']}/requeue", json={"reason": "chaos"}
        )
        self.counts[f"requeue {answer.status_code if answer is not None else 'unanswered'}"] += 1

    def _pause_one(self) -> None:
        job_id = self.crons.get("pausable")
        if job_id is not None:
            answer = self.api.call("POST", f"/api/v1/jobs/{job_id}/pause", json={})
            self.counts[f"pause {answer.status_code if answer is not None else 'unanswered'}"] += 1

    def _resume_one(self) -> None:
        job_id = self.crons.get("pausable")
        if job_id is not None:
            answer = self.api.call("POST", f"/api/v1/jobs/{job_id}/resume")
            self.counts[f"resume {answer.status_code if answer is not None else 'unanswered'}"] += 1

    # ---- sending --------------------------------------------------------------------------

    def _between(self) -> None:
        self._resend()
        now = time.monotonic()
        due = [c for c in self._cancels if c[0] <= now]
        for cancel in due:
            self._cancels.remove(cancel)
            path = f"/api/v1/executions/{cancel[1]}/cancel"
            answer = self.api.call("POST", path, json={"reason": "chaos"})
            if answer is None or answer.status_code >= 500:
                self._cancels.append((now + RESEND_AFTER, cancel[1]))
            else:
                self.counts[f"cancel {answer.status_code}"] += 1

    def _queue(self, request: Request) -> None:
        with self._lock:
            self._pending.append(request)

    def _resend(self, *, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            due = [r for r in self._pending if force or now - r.last_sent >= RESEND_AFTER]
        for request in due:
            self._send(request)

    def _send(self, request: Request) -> None:
        request.last_sent = time.monotonic()
        headers = {"Idempotency-Key": request.key}
        response = self.api.call("POST", request.path, json=request.body, headers=headers)
        status = response.status_code if response is not None else "unanswered"
        self.counts[f"{request.kind} {status}"] += 1
        if response is None or not response.is_success:
            return
        with self._lock:
            if request in self._pending:
                self._pending.remove(request)
            if request not in self._sent:
                self._sent.append(request)
        self._accepted(request, response.json())

    def _accepted(self, request: Request, answer: dict[str, Any]) -> None:
        at = datetime.now(UTC)
        the_id = UUID(answer["id"])
        if request.kind == "job":
            self.accepted.append(Accepted("job", at, job_id=the_id, key=request.key))
            if request.name == "manual":
                self._manual = the_id
            elif not request.name.startswith("once"):
                self.crons[request.name] = the_id
            return
        first = request.key not in self.answers
        self.answers.setdefault(request.key, set()).add(the_id)
        self.accepted.append(Accepted(request.kind, at, execution_id=the_id, key=request.key))
        if request.cancel and first:
            self._cancels.append((time.monotonic() + CANCEL_AFTER, the_id))


def _times(rng: random.Random, window: float, every: float) -> list[float]:
    """Times in the window, ``every`` seconds apart on average."""
    return sorted(rng.uniform(0, window) for _ in range(int(window / every)))


def _job(name: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "handler": "chaos.effect",
        "payload": {"seconds": 0.3},
        "retry": RETRY,
        "timeout_seconds": 120,
        "schedule": {"kind": "manual"},
    }
    return body | fields


def _cron_jobs() -> dict[str, dict[str, Any]]:
    """The cron jobs, every minute: each misfire policy, each overlap policy (the
    skip_if_running one runs past its next occurrence), one always failing, one that
    the window pauses and resumes."""
    return {
        "fire_once": {"schedule": EVERY_MINUTE, "misfire": "fire_once"},
        "fire_all": {"schedule": EVERY_MINUTE, "misfire": "fire_all", "catch_up_cap": 3},
        "skip": {"schedule": EVERY_MINUTE, "misfire": "skip"},
        "skip_if_running": {
            "schedule": EVERY_MINUTE,
            "overlap": "skip_if_running",
            "payload": {"until": 62},
        },
        "queue_one": {"schedule": EVERY_MINUTE, "overlap": "queue_one"},
        "failing": {"schedule": EVERY_MINUTE, "handler": "chaos.failing"},
        "pausable": {"schedule": EVERY_MINUTE},
    }
