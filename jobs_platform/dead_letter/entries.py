"""The dead letter's entries: partitions that must stop and wait for a person.

Quarantining a partition creates its entry (table `jp_quarantine`). An entry is created
once per partition and episode, however many times the runner, the
failure hook or a repeated sensor tick report the same failure. Creating and reading
entries is here; releasing them, the requeue log, launch marks and resolving are
`dead_letter.releases` (`DeadLetter` is a `Releases`, so `store.dead_letter` does both).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.dead_letter.releases import Releases, RequeuedBy, entry_filters
from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.store.attempts import budget_state, failing_streak
from jobs_platform.store.clock import Clock
from jobs_platform.store.partitions import Partitions, PartitionStatus
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import EntryStatus, quarantine

# The recorded input of an entry none of whose failing attempts could fingerprint its
# input (the file was missing, the source unreachable). Entries quarantined before
# fingerprints were recorded have none (NULL): nothing is known of their input.
UNREAD_INPUT = ""


class UnknownEntry(LookupError):
    """No dead-letter entry matches."""


class DeadLetter(Releases):
    """The dead letter's entries and their releases (`Releases`), stamped on one clock."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.partitions = Partitions(clock)

    def quarantine_partition(
        self, connection: sa.Connection, asset: str, partition: str, episode: int
    ) -> int:
        """Quarantine the partition's episode from its history; returns the entry id."""
        existing = _entry_id_for_episode(connection, asset, partition, episode)
        if existing is not None:
            return existing
        history = failing_streak(connection, asset, partition, episode)
        last = history[-1] if history else None
        now = self.clock.now(connection)
        error_class = last.error_class if last else "unknown"
        error_type = last.error_type if last else None
        last_error = last.message if last else None
        inserted = upsert_row(
            connection,
            quarantine,
            {
                "asset": asset,
                "partition": partition,
                "episode": episode,
                "status": EntryStatus.QUARANTINED,
                # What spent the budget: lease-lost and interrupted attempts stay in the history.
                "attempts": budget_state(connection, asset, partition, episode).counted_failures,
                "error_class": error_class,
                "error_type": error_type,
                "last_error": last_error,
                "first_failed_at": history[0].ended_at if history else now,
                "last_failed_at": last.ended_at if last else now,
                "quarantined_at": now,
                # A failure a taught rule decided keeps its cause's signature (signed with
                # the table's class, `dead_letter.rules`): it stays in the group it taught.
                "signature": (last.rule if last is not None and last.rule else None)
                or failure_signature(
                    error_class, error_type, last_error, asset=asset, partition=partition
                ),
                "code_version": last.code_version if last else None,
                # The input the failing attempts saw, the latest that was computed; or that
                # none could be fingerprinted (a file not there yet): once it can, it changed.
                "fingerprint": next(
                    (row.fingerprint for row in reversed(history) if row.fingerprint),
                    UNREAD_INPUT,
                ),
            },
            key=("asset", "partition", "episode"),
            returning=(quarantine.c.id,),
        )
        if inserted is None:
            # The hook and the runner reported the same failure at once; the other one's entry
            # stands, and it set the partition's state.
            other = _entry_id_for_episode(connection, asset, partition, episode)
            assert other is not None  # the insert found it by this key
            return other
        self.partitions.set_status(connection, asset, partition, PartitionStatus.QUARANTINED)
        entry_id: int = inserted.id
        return entry_id

    def requeue_partition(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        *,
        by: RequeuedBy = RequeuedBy.CLI,
        reason: str = "requested",
    ) -> TableRow:
        """Release the open entry: the partition starts a new episode with a fresh budget.

        The old attempts stay in the history under their episode.
        """
        entry = active_entry(connection, asset, partition)
        if entry is None:
            raise UnknownEntry(f"{asset}/{partition} is not quarantined")
        return self.release_entries(connection, [entry], by=by, reason=reason)[0]


def sign_unsigned_entries(connection: sa.Connection) -> int:
    """Give each entry without a signature its own (entries a printed upgrade script left
    unsigned: their signature is computed here, in Python); returns how many."""
    unsigned = connection.execute(
        sa.select(
            quarantine.c.id,
            quarantine.c.asset,
            quarantine.c.partition,
            quarantine.c.error_class,
            quarantine.c.error_type,
            quarantine.c.last_error,
        ).where(quarantine.c.signature.is_(None))
    ).all()
    for row in unsigned:
        connection.execute(
            sa.update(quarantine)
            .where(quarantine.c.id == row.id)
            .values(
                signature=failure_signature(
                    row.error_class,
                    row.error_type,
                    row.last_error,
                    asset=row.asset,
                    partition=row.partition,
                )
            )
        )
    return len(unsigned)


def active_entry(connection: sa.Connection, asset: str, partition: str) -> TableRow | None:
    """The partition's open entry, if it is quarantined now."""
    return connection.execute(
        sa.select(quarantine).where(
            quarantine.c.asset == asset,
            quarantine.c.partition == partition,
            quarantine.c.status == EntryStatus.QUARANTINED,
        )
    ).first()


def latest_entry(connection: sa.Connection, asset: str, partition: str) -> TableRow:
    row = connection.execute(
        sa.select(quarantine)
        .where(quarantine.c.asset == asset, quarantine.c.partition == partition)
        .order_by(quarantine.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        raise UnknownEntry(f"{asset}/{partition} has never been quarantined")
    return row


def list_entries(
    connection: sa.Connection,
    statuses: tuple[EntryStatus, ...] = (EntryStatus.QUARANTINED,),
    asset: str | None = None,
) -> list[TableRow]:
    """Entries in `statuses` (of one asset if given), oldest first; by `ix_jp_quarantine_status`."""
    query = sa.select(quarantine).where(quarantine.c.status.in_([str(s) for s in statuses]))
    if asset is not None:
        query = query.where(quarantine.c.asset == asset)
    return list(connection.execute(query.order_by(quarantine.c.id)))


def entries_by_id(connection: sa.Connection, entry_ids: Sequence[int]) -> list[TableRow]:
    """The entries with these ids, oldest first (unknown ids are left out)."""
    if not entry_ids:
        return []
    return list(
        connection.execute(
            sa.select(quarantine)
            .where(quarantine.c.id.in_(list(entry_ids)))
            .order_by(quarantine.c.id)
        )
    )


def entries_after(
    connection: sa.Connection, after_id: int, limit: int, *, assets: Sequence[str] | None = None
) -> list[TableRow]:
    """Entries created after `after_id` (of `assets` if given), oldest first.

    A sensor's cursor walk, by the primary key. A code location passes its backfills:
    the warehouse may hold other locations' entries too.
    """
    query = sa.select(quarantine).where(quarantine.c.id > after_id)
    if assets is not None:
        query = query.where(quarantine.c.asset.in_(list(assets)))
    return list(connection.execute(query.order_by(quarantine.c.id).limit(limit)))


def open_entries(
    connection: sa.Connection,
    *,
    signature: str | None = None,
    asset: str | None = None,
    error_class: str | None = None,
    assets: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[TableRow]:
    """Quarantined entries matching every filter given, oldest first: a selection to
    requeue (`signature`: one cause; `asset`, `error_class`; `assets`: a location's)."""
    query = sa.select(quarantine).where(
        quarantine.c.status == EntryStatus.QUARANTINED,
        *entry_filters(signature, asset, error_class, assets),
    )
    query = query.order_by(quarantine.c.id)
    if limit is not None:
        query = query.limit(limit)
    return list(connection.execute(query))


def _entry_id_for_episode(
    connection: sa.Connection, asset: str, partition: str, episode: int
) -> int | None:
    entry_id: int | None = connection.execute(
        sa.select(quarantine.c.id).where(
            quarantine.c.asset == asset,
            quarantine.c.partition == partition,
            quarantine.c.episode == episode,
        )
    ).scalar()
    return entry_id
