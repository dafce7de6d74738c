"""Job definitions: bad input is rejected with the field, the problem and the fix."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobledger.domain.definitions import ExecutionSpec, JobDefinition, Limits
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule, OneShotSchedule, Schedule


def job(
    schedule: Schedule = CronSchedule("0 * * * *"), name: str = "job", **spec: Any
) -> JobDefinition:
    return JobDefinition(
        name=name, spec=ExecutionSpec(**{"handler": "test.echo", **spec}), schedule=schedule
    )


BAD = [
    pytest.param(job(CronSchedule("0 0 * * * *")), "schedule.expression", "6 fields", id="6-field"),
    pytest.param(
        job(CronSchedule("* * * * * *")), "schedule.expression", "seconds", id="every-second"
    ),
    pytest.param(
        job(CronSchedule("0 * * * *", "Mars/Olympus")), "schedule.timezone", "IANA", id="zone"
    ),
    pytest.param(job(payload={"blob": "x" * 70_000}), "payload", "limit", id="payload-size"),
    pytest.param(
        job(retry=RetryPolicy(max_retries=-1)), "retry.max_retries", "range", id="negative-retries"
    ),
    pytest.param(job(priority=10), "priority", "range", id="priority-high"),
    pytest.param(job(priority=-1), "priority", "range", id="priority-low"),
    pytest.param(job(timeout=timedelta(0)), "timeout", "range", id="zero-timeout"),
    pytest.param(job(timeout=timedelta(days=2)), "timeout", "range", id="long-timeout"),
    pytest.param(job(handler="Not A Handler"), "handler", "not a handler", id="handler"),
    pytest.param(job(queue="Bad Queue!"), "queue", "not a queue", id="queue"),
    pytest.param(job(name=""), "name", "empty", id="empty-name"),
    pytest.param(
        job(OneShotSchedule(datetime(2026, 5, 1, 9, 0))),  # noqa: DTZ001 (the point of the test)
        "schedule.run_at",
        "zone",
        id="naive-run-at",
    ),
]


@pytest.mark.parametrize(("definition", "field", "words"), BAD)
def test_bad_definitions_name_the_field(definition: JobDefinition, field: str, words: str) -> None:
    """If a definition is bad, then the error names the field and says what to do."""
    with pytest.raises(InvalidDefinitionError) as caught:
        definition.check()
    assert caught.value.field == field
    assert words.lower() in str(caught.value).lower()
    assert caught.value.fix


def test_a_good_definition_passes() -> None:
    """If every field is in range, then check() accepts the definition."""
    definition = job(
        CronSchedule("*/5 9-17 * * 1-5", "Europe/Berlin"),
        payload={"url": "https://example.org/hook"},
        priority=9,
        timeout=timedelta(hours=1),
    )
    definition.check()
    JobDefinition(
        name="once",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=OneShotSchedule(datetime(2026, 5, 1, 9, 0, tzinfo=UTC)),
    ).check()


def test_limits_come_from_settings() -> None:
    """If the payload limit is raised, then a payload that was too large passes."""
    big = job(payload={"blob": "x" * 70_000})
    big.check(Limits(max_payload_bytes=100_000))
