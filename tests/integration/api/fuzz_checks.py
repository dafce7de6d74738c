"""What every answer of the fuzz campaign must keep, and the tally of what was tried.

An answer is checked against the store it came from: the head of the event log and the
accounts tables are read before and after each request, so a refusal that wrote
anything is caught at the request that did it.
"""

import collections
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import hypothesis
import psycopg
from litestar import Litestar
from schemathesis.engine.errors import is_inconsistent_replay

from jobledger.bootstrap import Container
from jobledger.domain.roles import Role

# The accounts tables as digests, without the columns every use of a credential touches
# (last_used_at, last_seen_at: a read, by design), and the sign-in throttle's bookings
# apart, as a refused sign-in makes them on purpose (ADR 21).
_ACCOUNTS: Final = """
SELECT
  (SELECT md5(coalesce(string_agg(u::text, ',' ORDER BY id), '')) FROM jobledger_users u),
  (SELECT md5(coalesce(string_agg(concat_ws('|', id, name, token_hash, user_id, role,
      created_at, expires_at, revoked_at), ',' ORDER BY id), '')) FROM jobledger_api_tokens),
  (SELECT md5(coalesce(string_agg(concat_ws('|', id, user_id, csrf_token, created_at,
      expires_at), ',' ORDER BY id), '')) FROM jobledger_sessions),
  (SELECT md5(coalesce(string_agg(key || '@' || at_ms, ',' ORDER BY key, at_ms), ''))
      FROM jobledger_login_failures)
"""
LOGIN: Final = ("POST", "/api/v1/auth/login")
ERROR_KEYS: Final = frozenset({"status", "code", "message", "field", "fix"})
SHOWN: Final = 300  # characters of a body quoted in a violation
KEPT: Final = 20  # violations quoted per tally (all are counted)
MAX_STALLED_ROUNDS: Final = 5


class CrashError(Exception):
    """The server stopped answering: the part cannot go on."""


@dataclass(frozen=True)
class Snapshot:
    """What a refused request must leave as it was."""

    head: int
    accounts: tuple[str, str, str]
    bookings: str


class Snapshots(Protocol):
    def snapshot(self) -> Snapshot: ...

    def close(self) -> None: ...


class Probe:
    """Reads the log head and the accounts tables of the store the API serves."""

    def __init__(self, container: Container) -> None:
        self._container = container
        self._connection = psycopg.connect(container.settings.database_url, autocommit=True)

    def snapshot(self) -> Snapshot:
        row = self._connection.execute(_ACCOUNTS).fetchone()
        assert row is not None
        return Snapshot(self._container.head(), (row[0], row[1], row[2]), row[3])

    def close(self) -> None:
        self._connection.close()


@dataclass
class Tally:
    """Inputs tried by one part of the campaign as one role, and what they got."""

    part: str
    role: str
    inputs: int = 0  # requests sent
    cases: int = 0  # generated examples (a stateful scenario is one, of many requests)
    seconds: float = 0.0
    restarts: int = 0  # rounds hypothesis ended early (see ``rounds``)
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    violations: collections.Counter[str] = field(default_factory=collections.Counter)
    refused: collections.Counter[str] = field(default_factory=collections.Counter)  # by field
    links: collections.Counter[str] = field(default_factory=collections.Counter)  # followed
    known: collections.Counter[str] = field(default_factory=collections.Counter)  # documented
    quoted: list[str] = field(default_factory=list)

    def violation(self, kind: str, text: str) -> None:
        self.violations[kind] += 1
        if len(self.quoted) < KEPT:
            self.quoted.append(f"{kind}: {text}")

    def as_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "role": self.role,
            "inputs": self.inputs,
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "restarts": self.restarts,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "violations": dict(self.violations),
            "refused": dict(self.refused.most_common()),
            "links": dict(self.links.most_common()),
            "known": dict(self.known),
            "quoted": self.quoted,
        }


@dataclass(frozen=True)
class Answer:
    """One request as sent and its answer, in the terms the checks need."""

    method: str
    route: str  # the path template, e.g. /api/v1/jobs/{job_id}
    path: str  # as sent, with its query
    body: bytes
    status: int
    content: bytes

    def describe(self) -> str:
        sent = self.body[:SHOWN].decode(errors="replace")
        got = self.content[:SHOWN].decode(errors="replace")
        return f"{self.method} {self.path} {sent!r} -> {self.status} {got}"


@dataclass(frozen=True)
class Target:
    """The running API: its address, a token per role, and what its routes need."""

    url: str
    tokens: Mapping[Role, str]
    probe: Snapshots
    needs: Mapping[tuple[str, str], Role | None]  # (METHOD, route) -> role; None: public
    protected: frozenset[str]  # the campaign's own user and token ids: left alone

    def headers(self, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


def settings(examples: int, **extra: Any) -> hypothesis.settings:
    """Generation only (a violation is recorded, not shrunk), no example database."""
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
        **extra,
    )


def rounds(run: Callable[[], None], until: float, tally: Tally, cases: int) -> None:
    """``run`` until ``tally`` counts ``cases`` cases and the monotonic time is past
    ``until``, or the server crashed. Hypothesis ends a round early when the live API
    answers a replayed step differently (its data tree then looks inconsistent): the
    next round goes on from there, as Schemathesis's own runner does."""
    stalled = 0
    while stalled < MAX_STALLED_ROUNDS:
        counted = tally.cases
        try:
            run()
        except CrashError:
            return
        except (hypothesis.errors.Flaky, AssertionError) as error:
            if not isinstance(error, hypothesis.errors.Flaky) and not is_inconsistent_replay(error):
                raise
            tally.restarts += 1
        if tally.cases >= cases and time.monotonic() >= until:
            return
        stalled = stalled + 1 if tally.cases == counted else 0


def route_needs(app: Litestar) -> dict[tuple[str, str], Role | None]:
    """The role each route declares, by method and path as the OpenAPI document names it."""
    found: dict[tuple[str, str], Role | None] = {}
    for route in app.routes:
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        for handler in getattr(route, "route_handlers", ()):
            needed = handler.opt.get("role")
            for method in handler.http_methods:
                found[method, path] = needed if isinstance(needed, Role) else None
    return found


def error_problem(content: bytes, status: int) -> str | None:
    """Why a refusal's body is not ``{"error": {"status", "code", "message", ...}}``."""
    try:
        body = json.loads(content)
    except ValueError:
        return "the body is not JSON"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(body) != {"error"}:
        return "the body is not one error object"
    problems = [f"unexpected key {key!r}" for key in set(error) - ERROR_KEYS]
    if error.get("status") != status:
        problems.append(f"status {error.get('status')!r} is not the answer's {status}")
    problems += [
        f"{key} is not a non-empty string"
        for key in ("code", "message")
        if not isinstance(error.get(key), str) or not error[key]
    ]
    problems += [
        f"{key} is not a string"
        for key in ("field", "fix")
        if key in error and not isinstance(error[key], str)
    ]
    return "; ".join(problems) or None


def check_answer(
    target: Target, tally: Tally, role: Role, answer: Answer, *, before: Snapshot, after: Snapshot
) -> None:
    """Count ``answer`` and record every rule it breaks."""
    tally.inputs += 1
    tally.statuses[answer.status] += 1
    for kind, problem in _problems(target, role, answer, before, after):
        tally.violation(kind, f"{problem}: {answer.describe()}")


def _problems(
    target: Target, role: Role, answer: Answer, before: Snapshot, after: Snapshot
) -> Iterator[tuple[str, str]]:
    if answer.status >= 500:
        yield "5xx", "a server error"
    needed = target.needs.get((answer.method, answer.route))
    if needed is not None and not role.includes(needed) and not _refused_for_role(answer):
        yield "role", f"{role} got {answer.status} from a route that needs {needed}"
    if not 400 <= answer.status < 500:
        return
    if (problem := error_problem(answer.content, answer.status)) is not None:
        yield "error shape", problem
    elif answer.status in {400, 422} and "fix" not in json.loads(answer.content)["error"]:
        yield "no fix", "a refused input whose error names no fix"
    if after.head != before.head:
        yield "write on refusal", f"the log head moved from {before.head} to {after.head}"
    if after.accounts != before.accounts:
        yield "write on refusal", "the accounts tables changed"
    if after.bookings != before.bookings and (answer.method, answer.route) != LOGIN:
        yield "write on refusal", "sign-in bookings changed outside a sign-in"


def _refused_for_role(answer: Answer) -> bool:
    # A path whose id is not a UUID matches no route: 404 before any guard runs.
    return answer.status == 403 or (answer.status == 404 and not _ids_are_uuids(answer))


def _ids_are_uuids(answer: Answer) -> bool:
    names = re.findall(r"\{(\w+)\}", answer.route)
    pattern = re.escape(answer.route)
    for name in names:
        pattern = pattern.replace(re.escape(f"{{{name}}}"), "([^/]*)")
    match = re.fullmatch(pattern, answer.path.partition("?")[0])
    if match is None:
        return False
    try:
        for value in match.groups():
            uuid.UUID(urllib.parse.unquote(value))
    except ValueError:
        return False
    return True
