"""The steering gate: a paused backfill, or a partition whose input is not ready, is held
before its attempt (no attempt recorded, no budget spent), and its hold is recorded."""

from __future__ import annotations

import dataclasses

import pytest

from jobs_platform.engine.outcomes import Held, PartitionReport
from jobs_platform.engine.runner import Attempter, PartitionRunner
from jobs_platform.steering.holds import HoldReason, held_partitions
from jobs_platform.steering.pauses import Pauses
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform_tests.engine.test_runner import (  # noqa: F401 (fixtures)
    ASSET,
    DAY,
    history,
    items_input,
    items_spec,
    settings,
    stored_items,
)


def pause(runner: PartitionRunner, reason: str | None = "warehouse maintenance") -> None:
    with runner.engine.begin() as connection:
        Pauses(DATABASE_CLOCK).pause(connection, ASSET, by="alice", reason=reason)


def resume(runner: PartitionRunner) -> None:
    with runner.engine.begin() as connection:
        Pauses(DATABASE_CLOCK).resume(connection, ASSET)


def attempt(runner: PartitionRunner, run_id: str = "run-1"):
    return runner.attempt(DAY, Attempter(run_id=run_id), chunk_rows=2)


@pytest.fixture
def runner(items_input, settings) -> PartitionRunner:  # noqa: F811
    return PartitionRunner(items_spec(items_input), settings)


def test_a_paused_backfill_holds_its_partition_with_no_attempt_recorded(runner, items_input):  # noqa: F811
    pause(runner)

    held = attempt(runner)

    assert isinstance(held, Held)
    assert held.reason is HoldReason.PAUSED
    assert "paused by alice" in held.message and "(warehouse maintenance)" in held.message
    assert history(runner) == []
    assert items_input.reads == []
    with runner.engine.connect() as connection:
        hold = held_partitions(connection, ASSET)[DAY]
    assert (hold.reason, hold.run_id) == (HoldReason.PAUSED, "run-1")


def test_a_resumed_backfill_attempts_its_partition_again(runner):
    pause(runner)
    attempt(runner)
    resume(runner)

    done = attempt(runner, run_id="run-2")

    assert isinstance(done, PartitionReport)
    assert done.attempt == 1  # the held run spent nothing
    assert len(stored_items(runner)) == 5


def test_a_partition_whose_input_is_not_ready_is_held_until_it_is(items_input, settings):  # noqa: F811
    landed: set[str] = set()
    asked = []

    def ready(source):
        asked.append(source.partition_key)
        return source.partition_key in landed

    runner = PartitionRunner(dataclasses.replace(items_spec(items_input), ready=ready), settings)

    held = attempt(runner)
    landed.add(DAY)
    done = attempt(runner, run_id="run-2")

    assert isinstance(held, Held) and held.reason is HoldReason.NOT_READY
    assert isinstance(done, PartitionReport) and done.attempt == 1
    assert asked == [DAY, DAY]
    assert [row[2] for row in history(runner)] == ["succeeded"]


def test_a_ready_check_that_raises_is_a_failure_before_the_attempt(items_input, settings):  # noqa: F811
    def ready(source):
        raise ConnectionError("the landing bucket is unreachable")

    runner = PartitionRunner(dataclasses.replace(items_spec(items_input), ready=ready), settings)

    failed = attempt(runner)

    assert not isinstance(failed, Held | PartitionReport)
    assert history(runner) == []
