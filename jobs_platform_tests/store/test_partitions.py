"""Specifications of per-partition state: its status, its episode and its done record."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import (
    Partitions,
    PartitionStatus,
    current_episode,
    done_record,
    partition_rows,
)
from jobs_platform_tests.store.factories import ASSET, PARTITION, a_partition


def the_row(connection: sa.Connection) -> sa.Row:
    [row] = partition_rows(connection, ASSET)
    return row


def test_the_current_episode_is_the_partitions_own_and_1_before_it_has_a_row(connection):
    a_partition(connection, partition="2024-01-01", episode=3)

    episodes = [current_episode(connection, ASSET, day) for day in ("2024-01-01", "2024-01-02")]

    assert episodes == [3, 1]


def test_only_a_done_partition_has_a_done_record_with_its_fingerprint(connection):
    a_partition(connection, partition="2024-01-01", status="done", fingerprint="f-1")
    a_partition(connection, partition="2024-01-02", status="quarantined", fingerprint="f-2")

    done = done_record(connection, ASSET, "2024-01-01")
    not_done = done_record(connection, ASSET, "2024-01-02")

    assert (done.fingerprint, not_done) == ("f-1", None)


def test_setting_the_same_status_twice_leaves_the_same_row(connection):
    def set_done() -> None:
        Partitions(DATABASE_CLOCK).set_status(
            connection, ASSET, PARTITION, PartitionStatus.DONE, fingerprint="f-1", row_count=42
        )

    set_done()
    once = the_row(connection)._asdict()
    set_done()
    twice = the_row(connection)._asdict()

    # Only the bookkeeping timestamp moves.
    assert {**twice, "updated_at": None} == {**once, "updated_at": None}
    assert {**once, "updated_at": None} == {
        "asset": ASSET,
        "partition": PARTITION,
        "status": "done",
        "episode": 1,
        "fingerprint": "f-1",
        "row_count": 42,
        "duration_seconds": None,
        "run_id": None,
        "updated_at": None,
    }


def test_setting_a_status_keeps_the_episode_unless_one_is_given(connection):
    a_partition(connection, status="quarantined", episode=2)

    Partitions(DATABASE_CLOCK).set_status(connection, ASSET, PARTITION, PartitionStatus.FAILED)
    kept = the_row(connection).episode
    Partitions(DATABASE_CLOCK).set_status(
        connection, ASSET, PARTITION, PartitionStatus.FAILED, episode=3
    )

    assert (kept, the_row(connection).episode) == (2, 3)


def test_marking_a_done_partition_done_again_keeps_its_fingerprint_and_row_count(connection):
    a_partition(connection, status="done", fingerprint="f-1", row_count=42, run_id="run-1")

    Partitions(DATABASE_CLOCK).set_status(
        connection, ASSET, PARTITION, PartitionStatus.DONE, run_id="run-2"
    )

    row = the_row(connection)
    assert (row.fingerprint, row.row_count, row.run_id) == ("f-1", 42, "run-2")
