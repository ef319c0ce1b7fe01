"""Per-partition state: done, failing or quarantined, and the current episode."""

from __future__ import annotations

import enum

import sqlalchemy as sa

from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import partitions


class PartitionStatus(enum.StrEnum):
    """Where a partition stands; missing partitions have no row at all."""

    DONE = "done"  # its finalize transaction committed
    FAILED = "failed"  # its last attempt failed and it will be retried
    QUARANTINED = "quarantined"  # it failed terminally or ran out of attempts


def current_episode(connection: sa.Connection, asset: str, partition: str) -> int:
    episode = connection.execute(
        sa.select(partitions.c.episode).where(
            partitions.c.asset == asset, partitions.c.partition == partition
        )
    ).scalar_one_or_none()
    return episode or 1


def partition_status(connection: sa.Connection, asset: str, partition: str) -> str | None:
    """The partition's status; None while it has no state (no attempt of it has ended)."""
    status: str | None = connection.execute(
        sa.select(partitions.c.status).where(
            partitions.c.asset == asset, partitions.c.partition == partition
        )
    ).scalar_one_or_none()
    return status


def done_record(connection: sa.Connection, asset: str, partition: str) -> TableRow | None:
    """The partition's row if it is done (with the fingerprint of the input it was done from)."""
    return connection.execute(
        sa.select(partitions).where(
            partitions.c.asset == asset,
            partitions.c.partition == partition,
            partitions.c.status == PartitionStatus.DONE,
        )
    ).first()


def unfinished(
    connection: sa.Connection, asset_partitions: list[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """Of the given (asset, partition) pairs, those not done, with their status or `missing`."""
    if not asset_partitions:
        return {}
    assets = sorted({asset for asset, _ in asset_partitions})
    keys = sorted({partition for _, partition in asset_partitions})
    rows = connection.execute(
        sa.select(partitions.c.asset, partitions.c.partition, partitions.c.status).where(
            partitions.c.asset.in_(assets), partitions.c.partition.in_(keys)
        )
    )
    status = {(row.asset, row.partition): row.status for row in rows}
    return {
        pair: status.get(pair, "missing")
        for pair in asset_partitions
        if status.get(pair) != PartitionStatus.DONE
    }


class Partitions:
    """The partitions' states, stamped on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def set_status(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        status: PartitionStatus,
        *,
        episode: int | None = None,
        **details: object,
    ) -> None:
        """Upsert the partition's row (idempotent: the same call twice leaves the same row)."""
        values = {
            "status": str(status),
            "updated_at": now_in_statement(self.clock, connection),
            **details,
        }
        if episode is not None:
            values["episode"] = episode
        # A new partition starts in episode 1; an existing one keeps its episode unless told.
        upsert_row(
            connection,
            partitions,
            {"asset": asset, "partition": partition, "episode": 1, **values},
            update=list(values),
        )


def partition_rows(connection: sa.Connection, asset: str | None = None) -> list[TableRow]:
    query = sa.select(partitions)
    if asset is not None:
        query = query.where(partitions.c.asset == asset)
    return list(connection.execute(query.order_by(partitions.c.asset, partitions.c.partition)))
