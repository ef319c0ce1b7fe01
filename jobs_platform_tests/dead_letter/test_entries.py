"""Specifications of the quarantine: one entry per episode, released into a new episode."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.dead_letter.entries import (
    UNREAD_INPUT,
    DeadLetter,
    active_entry,
    entries_after,
    latest_entry,
    list_entries,
)
from jobs_platform.dead_letter.releases import (
    RequeuedBy,
    release_numbers,
    requeue_awaiting_run,
    requeue_log,
)
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.store.attempts import attempt_history, budget_state, record_fingerprint
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import current_episode, partition_rows
from jobs_platform.store.schema import EntryStatus, quarantine
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import (
    ASSET,
    AT,
    PARTITION,
    SECOND,
    a_quarantine_entry,
    an_attempt,
)

# The store takes the grace as given; the rule's own value is `dead_letter.requeue`'s.
GRACE = 300 * SECOND


def test_releasing_entries_logs_who_and_why_and_releases_each_once(connection):
    an_attempt(connection, error_class="terminal")
    opened = entry(connection, quarantine_it(connection))

    first = DeadLetter(DATABASE_CLOCK).release_entries(
        connection, [opened], by=RequeuedBy.REDRIVE, reason="input_changed"
    )
    again = DeadLetter(DATABASE_CLOCK).release_entries(
        connection, [opened], by=RequeuedBy.CLI, reason="requested"
    )

    assert [released.id for released in first] == [opened.id]
    assert again == []
    assert [(row.by, row.reason) for row in requeue_log(connection, ASSET, PARTITION)] == [
        ("redrive", "input_changed")
    ]
    assert entry(connection, opened.id).status == "requeued"


def quarantine_it(connection: sa.Connection, episode: int = 1) -> int:
    return DeadLetter(DATABASE_CLOCK).quarantine_partition(connection, ASSET, PARTITION, episode)


def entry(connection: sa.Connection, entry_id: int) -> sa.Row:
    return connection.execute(sa.select(quarantine).where(quarantine.c.id == entry_id)).one()


# Quarantining


def test_the_entry_is_built_from_the_failing_streak(connection):
    an_attempt(connection, error_class="retryable", started_at=AT)
    an_attempt(
        connection, error_class="terminal", message="line 3 is bad", started_at=AT + 60 * SECOND
    )

    quarantined = entry(connection, quarantine_it(connection))

    assert quarantined._asdict() | {"id": None, "quarantined_at": None} == {
        "id": None,
        "asset": ASSET,
        "partition": PARTITION,
        "episode": 1,
        "status": "quarantined",
        "attempts": 2,
        "error_class": "terminal",
        "error_type": "TerminalError",
        "last_error": "line 3 is bad",
        "first_failed_at": AT + SECOND,
        "last_failed_at": AT + 61 * SECOND,
        "quarantined_at": None,
        "requeued_at": None,
        "requeue_launched_at": None,
        "resolved_at": None,
        "signature": failure_signature(
            "terminal", "TerminalError", "line 3 is bad", asset=ASSET, partition=PARTITION
        ),
        "code_version": None,
        "fingerprint": UNREAD_INPUT,  # neither attempt fingerprinted its input
    }


def test_the_entry_keeps_the_code_version_and_input_its_failing_attempts_saw(connection):
    first = an_attempt(connection, error_class="retryable")
    record_fingerprint(connection, first, "file-a@1")
    an_attempt(connection, error_class="terminal")  # failed before it read its input

    quarantined = entry(connection, quarantine_it(connection))

    assert quarantined.fingerprint == "file-a@1"


def test_quarantining_marks_the_partition_quarantined(connection):
    an_attempt(connection, error_class="terminal")

    quarantine_it(connection)

    assert [row.status for row in partition_rows(connection)] == ["quarantined"]


def test_quarantining_the_same_episode_twice_returns_the_same_entry(connection):
    an_attempt(connection, error_class="terminal")
    first = quarantine_it(connection)
    an_attempt(connection, error_class="retryable")

    second = quarantine_it(connection)

    assert second == first
    assert len(list_entries(connection)) == 1
    assert entry(connection, first).error_class == "terminal"


# Finding entries


def test_a_released_partition_has_no_active_entry_but_still_a_latest_one(connection):
    a_quarantine_entry(connection, episode=1, status="resolved")
    released = a_quarantine_entry(connection, episode=2, status="requeued")

    assert active_entry(connection, ASSET, PARTITION) is None
    assert latest_entry(connection, ASSET, PARTITION).id == released


def test_listing_shows_open_entries_unless_other_statuses_are_asked_for(connection):
    open_entry = a_quarantine_entry(connection, partition="2024-01-01")
    requeued = a_quarantine_entry(connection, partition="2024-01-02", status="requeued")
    a_quarantine_entry(connection, partition="2024-01-03", status="resolved")

    by_default = [row.id for row in list_entries(connection)]
    asked = (EntryStatus.QUARANTINED, EntryStatus.REQUEUED)
    both = [row.id for row in list_entries(connection, asked)]

    assert (by_default, both) == ([open_entry], [open_entry, requeued])


def test_entries_after_an_id_come_oldest_first_a_page_at_a_time(connection):
    ids = [a_quarantine_entry(connection, partition=f"2024-01-0{day}") for day in range(1, 6)]

    first_page = [row.id for row in entries_after(connection, 0, limit=2)]
    next_page = [row.id for row in entries_after(connection, first_page[-1], limit=2)]

    assert (first_page, next_page) == (ids[0:2], ids[2:4])


# Requeueing and resolving


def test_requeueing_releases_the_entry_and_starts_a_new_episode(connection):
    an_attempt(connection, error_class="terminal")
    entry_id = quarantine_it(connection)

    released = DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, PARTITION)

    row = entry(connection, entry_id)
    assert (released.id, row.status) == (entry_id, "requeued")
    assert row.requeued_at is not None
    assert current_episode(connection, ASSET, PARTITION) == 2
    assert [row.status for row in partition_rows(connection)] == ["failed"]


def test_a_requeued_partition_starts_with_a_fresh_budget_and_keeps_its_history(connection):
    for _ in range(3):
        an_attempt(connection, episode=1)
    quarantine_it(connection, episode=1)

    DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, PARTITION)

    assert budget_state(connection, ASSET, PARTITION, episode=2).counted_failures == 0
    assert [row.episode for row in attempt_history(connection, ASSET, PARTITION)] == [1, 1, 1]


def test_a_new_episode_after_requeue_has_its_own_entry(connection):
    an_attempt(connection, episode=1, error_class="terminal")
    first = quarantine_it(connection, episode=1)
    DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, PARTITION)
    an_attempt(connection, episode=2, error_class="crash")
    an_attempt(connection, episode=2, error_class="crash")

    second = quarantine_it(connection, episode=2)

    row = entry(connection, second)
    assert second != first
    assert (row.episode, row.attempts, row.error_class) == (2, 2, "crash")
    assert active_entry(connection, ASSET, PARTITION).id == second


def test_resolving_closes_requeued_entries_and_leaves_open_ones(connection):
    requeued = a_quarantine_entry(connection, episode=1, status="requeued")
    open_entry = a_quarantine_entry(connection, episode=2, status="quarantined")
    elsewhere = a_quarantine_entry(connection, partition="2024-01-02", status="requeued")

    resolved = DeadLetter(DATABASE_CLOCK).resolve_requeued(connection, ASSET, PARTITION)

    statuses = [entry(connection, i).status for i in (requeued, open_entry, elsewhere)]
    assert (resolved, statuses) == (1, ["resolved", "quarantined", "requeued"])
    assert entry(connection, requeued).resolved_at is not None


def test_a_requeue_awaits_its_run_until_its_new_episode_records_an_attempt(connection):
    waiting = a_quarantine_entry(connection, partition="2024-01-01", status="requeued")
    started = a_quarantine_entry(connection, partition="2024-01-02", status="requeued")
    an_attempt(connection, partition="2024-01-02", episode=2)
    a_quarantine_entry(connection, asset="orders", status="requeued")  # not asked about

    awaiting = DeadLetter(ManualClock(AT)).requeues_awaiting_run(
        connection, [ASSET], 10, grace=GRACE
    )

    assert [row.id for row in awaiting] == [waiting]
    assert started not in [row.id for row in awaiting]


def test_a_launch_started_within_the_grace_is_left_to_its_launcher(connection):
    launched = a_quarantine_entry(connection, status="requeued", requeue_launched_at=AT)

    within = DeadLetter(ManualClock(AT + GRACE - SECOND)).requeues_awaiting_run(
        connection, [ASSET], 10, grace=GRACE
    )
    after = DeadLetter(ManualClock(AT + GRACE + SECOND)).requeues_awaiting_run(
        connection, [ASSET], 10, grace=GRACE
    )

    assert (within, [row.id for row in after]) == ([], [launched])


def test_never_launched_requeues_come_before_relaunches(connection):
    relaunch = a_quarantine_entry(
        connection, partition="2024-01-01", status="requeued", requeue_launched_at=AT
    )
    fresh = a_quarantine_entry(connection, partition="2024-01-02", status="requeued")

    later = AT + 2 * GRACE
    awaiting = DeadLetter(ManualClock(later)).requeues_awaiting_run(
        connection, [ASSET], 10, grace=GRACE
    )

    assert [row.id for row in awaiting] == [fresh, relaunch]


def test_only_the_partitions_latest_entry_can_await_a_requeue_run(connection):
    requeued = a_quarantine_entry(connection, status="requeued")
    before = requeue_awaiting_run(connection, ASSET, PARTITION)
    a_quarantine_entry(connection, episode=2)  # quarantined again: its run happened

    after = requeue_awaiting_run(connection, ASSET, PARTITION)

    assert (before.id, after) == (requeued, None)


def test_an_entry_released_again_logs_each_release_and_counts_them(connection):
    requeued = a_quarantine_entry(connection, status="requeued", requeue_launched_at=AT)
    never = a_quarantine_entry(connection, partition="2024-01-02")
    DeadLetter(DATABASE_CLOCK).release_entries(
        connection, [entry(connection, never)], by=RequeuedBy.CLI, reason="requested"
    )

    again = DeadLetter(ManualClock(AT + SECOND)).release_again(
        connection, {requeued: "run 1a2b3c4d failed"}, by=RequeuedBy.CLI
    )

    assert again == [requeued]
    assert [(row.by, row.reason) for row in requeue_log(connection, ASSET, PARTITION)] == [
        ("cli", "requested again: run 1a2b3c4d failed")
    ]
    row = entry(connection, requeued)
    assert (row.status, row.requeued_at, row.requeue_launched_at) == ("requeued", AT + SECOND, None)
    # Its first release is not in the log (made before the log was kept): counted all the same.
    assert release_numbers(connection, [requeued, never]) == {requeued: 2, never: 1}


def test_an_entry_whose_new_episode_started_is_not_released_again(connection):
    started = a_quarantine_entry(connection, status="requeued")
    an_attempt(connection, episode=2)  # its run got to an attempt
    still_open = a_quarantine_entry(connection, partition="2024-01-02")

    again = DeadLetter(DATABASE_CLOCK).release_again(
        connection, {started: "again", still_open: "again"}, by=RequeuedBy.CLI
    )

    assert again == []
    assert requeue_log(connection, ASSET, PARTITION) == []
    assert entry(connection, still_open).status == "quarantined"


def test_a_selection_awaiting_its_runs_is_its_requeued_entries_whose_episode_has_not_started(
    connection,
):
    awaiting = a_quarantine_entry(connection, status="requeued", partition="2024-01-01")
    started = a_quarantine_entry(connection, status="requeued", partition="2024-01-02")
    an_attempt(connection, partition="2024-01-02", episode=2)
    a_quarantine_entry(connection, partition="2024-01-03")  # open: not awaiting a run
    a_quarantine_entry(connection, asset="orders", status="requeued")  # another asset's

    by_asset = Selection(asset=ASSET).awaiting_entries(connection, [ASSET, "orders"])
    one = Selection(asset=ASSET, partition="2024-01-01").awaiting_entries(connection, [ASSET])
    elsewhere = Selection(asset=ASSET, partition="2024-01-01").awaiting_entries(connection, [])

    assert [row.id for row in by_asset] == [awaiting]
    assert started not in [row.id for row in by_asset]
    assert ([row.id for row in one], elsewhere) == ([awaiting], [])
