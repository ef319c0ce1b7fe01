"""The steering read API and its rows: pauses, and the partitions held back."""

from __future__ import annotations

import datetime as dt

from jobs_platform.steering.holds import HoldReason, Holds, held_partitions
from jobs_platform.steering.pauses import Pauses, pause_of, paused_backfills
from jobs_platform_tests.clocks import ManualClock


def test_a_pause_says_who_when_and_why_until_resumed(connection):
    clock = ManualClock()
    pauses = Pauses(clock)
    assert pause_of(connection, "orders") is None

    paused = pauses.pause(connection, "orders", by="alice", reason="warehouse maintenance")
    clock.advance(60)
    again = pauses.pause(connection, "orders", by="bob")

    assert again == paused
    assert paused.by == "alice"
    assert paused.at == clock.now() - dt.timedelta(seconds=60)
    assert paused.reason == "warehouse maintenance"
    assert "paused by alice" in paused.describe()
    assert paused_backfills(connection) == {"orders": paused}
    assert pauses.resume(connection, "orders") == paused
    assert pause_of(connection, "orders") is None
    assert pauses.resume(connection, "orders") is None


def test_a_partition_held_again_for_the_same_reason_keeps_its_since_and_report(connection):
    clock = ManualClock()
    holds = Holds(clock)
    first = holds.hold(connection, "orders", "2024-01-01", HoldReason.NOT_READY, run_id="r1")
    holds.mark_reported(connection, "orders", ["2024-01-01"])
    clock.advance(60)

    again = holds.hold(connection, "orders", "2024-01-01", HoldReason.NOT_READY, run_id="r2")

    assert again.since == first.since
    assert again.run_id == "r2"
    assert again.held_at == clock.now()
    assert again.reported


def test_a_partition_held_for_another_reason_starts_over(connection):
    clock = ManualClock()
    holds = Holds(clock)
    holds.hold(connection, "orders", "2024-01-01", HoldReason.NOT_READY, run_id="r1")
    holds.mark_reported(connection, "orders", ["2024-01-01"])
    clock.advance(60)

    again = holds.hold(connection, "orders", "2024-01-01", HoldReason.PAUSED, run_id="r2")

    assert (again.reason, again.since, again.reported) == (HoldReason.PAUSED, clock.now(), False)


def test_a_launched_hold_is_forgotten_by_its_run_key_unless_held_again(connection):
    holds = Holds(ManualClock())
    for partition in ("a", "b"):
        holds.hold(connection, "orders", partition, HoldReason.PAUSED, run_id="r1")
    holds.mark_launched(connection, "orders", ["a", "b"], "hold-key")
    # The launched run held `b` again (the backfill was paused again before it started).
    holds.hold(connection, "orders", "b", HoldReason.PAUSED, run_id="r2")

    assert holds.forget_launched(connection, ["hold-key"]) == 1
    assert list(held_partitions(connection, "orders")) == ["b"]
    assert held_partitions(connection, "orders")["b"].launch_key is None


def test_a_partition_is_reported_past_its_max_wait_once(connection):
    holds = Holds(ManualClock())
    holds.hold(connection, "orders", "a", HoldReason.NOT_READY, run_id="r1")

    assert holds.mark_reported(connection, "orders", ["a"]) == ["a"]
    assert holds.mark_reported(connection, "orders", ["a"]) == []


def test_readiness_checks_walk_the_least_recently_checked_first(connection):
    clock = ManualClock()
    holds = Holds(clock)
    for partition in ("a", "b", "c"):
        holds.hold(connection, "orders", partition, HoldReason.NOT_READY, run_id="r1")
    holds.mark_checked(connection, "orders", ["a"])
    clock.advance(1)
    holds.mark_checked(connection, "orders", ["b"])

    assert [hold.partition for hold in holds.to_check(connection, "orders", limit=2)] == ["c", "a"]
