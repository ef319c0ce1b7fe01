"""What the warehouse knows of a range of partitions, read once per table for `plan`.

`jobs-platform plan` decides for thousands of partitions at once. Each table the gate,
the lease and the redrive read is read here once for the range: by the partition key's
range on the primary key's index (between the least and the greatest key asked), kept
when the key is one asked about. So 8,760 hourly partitions cost a handful of queries,
not a handful per partition.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from jobs_platform.dead_letter.redrive import RedriveReason
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.steering.plan_budget import failures_at_start
from jobs_platform.store.attempts import AttemptOutcome
from jobs_platform.store.clock import Clock
from jobs_platform.store.holders import holder_is_dead
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import (
    EntryStatus,
    attempts,
    leases,
    partitions,
    quarantine,
    requeues,
)

UpstreamPairs = Mapping[str, Sequence[tuple[str, str]]]
"""Per partition, the (backfill, partition) pairs it reads (`orchestration.upstream`)."""


@dataclass(frozen=True)
class PartitionFacts:
    """One backfill's partitions as the warehouse has them, for the keys asked about.

    Each mapping holds only the keys it has something for: a key with no state is missing
    from `states`, one with no open entry from `open_entries`, and so on.
    """

    now: dt.datetime  # the database's clock, as the leases and the redrive judge time
    states: Mapping[str, TableRow]  # the partition's `jp_partitions` row
    open_entries: Mapping[str, TableRow]  # its open dead-letter entry
    redrives: Mapping[str, int]  # redrives of the partition, across its episodes
    cooldown_redrives: Mapping[str, int]  # those of them for a cool-down
    live_leases: Mapping[str, TableRow]  # a lease held by a live worker
    done_code_versions: Mapping[str, str | None]  # the code of its last successful attempt
    waiting_on: Mapping[str, dict[tuple[str, str], str]]  # upstream not done: (name, key) → status
    # The counted failures a launch's start would settle on, where they may spend the budget.
    failures_at_start: Mapping[str, int] = field(default_factory=dict)


def read_facts(
    connection: sa.Connection,
    clock: Clock,
    asset: str,
    keys: Collection[str],
    upstream: UpstreamPairs | None = None,
    max_attempts: int | None = None,
) -> PartitionFacts:
    """The facts `plan` decides on for `keys` of `asset`, and of what they read (`upstream`).

    With `max_attempts` (the budget), the failures a start would settle on too
    (`plan_budget.failures_at_start`).
    """
    wanted = set(keys)
    now = clock.now(connection)
    if not wanted:
        return PartitionFacts(now, {}, {}, {}, {}, {}, {}, {})
    lowest, highest = min(wanted), max(wanted)

    def in_range(table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.asset == asset, table.c.partition.between(lowest, highest))

    def kept(rows: sa.Result[sa.Row[object]]) -> list[TableRow]:
        # Fetched at once: row by row, the driver's per-fetch checks cost more than the rows.
        return [row for row in rows.all() if row.partition in wanted]

    states = {
        row.partition: row
        for row in kept(connection.execute(sa.select(partitions).where(in_range(partitions))))
    }
    entries = kept(
        connection.execute(
            sa.select(quarantine).where(
                in_range(quarantine), quarantine.c.status == EntryStatus.QUARANTINED
            )
        )
    )
    redrives: dict[str, int] = defaultdict(int)
    cooldowns: dict[str, int] = defaultdict(int)
    for row in kept(
        connection.execute(
            sa.select(requeues.c.partition, requeues.c.reason, sa.func.count().label("redrives"))
            .where(in_range(requeues), requeues.c.by == str(RequeuedBy.REDRIVE))
            .group_by(requeues.c.partition, requeues.c.reason)
        )
    ):
        redrives[row.partition] += row.redrives
        if row.reason == RedriveReason.COOLDOWN:
            cooldowns[row.partition] += row.redrives
    # As `Leases.acquire` judges a lease: live on the database's clock, its holder not
    # provably dead (a holder on this host whose process is gone is taken over at once).
    live = {
        row.partition: row
        for row in kept(
            connection.execute(
                sa.select(leases).where(
                    in_range(leases), leases.c.holder.is_not(None), leases.c.expires_at > now
                )
            )
        )
        if not holder_is_dead(row.holder)
    }
    versions = {
        row.partition: row.code_version
        for row in kept(
            connection.execute(
                sa.select(attempts.c.partition, attempts.c.code_version)
                .where(in_range(attempts), attempts.c.outcome == AttemptOutcome.SUCCEEDED)
                .order_by(attempts.c.id)
            )
        )
    }
    return PartitionFacts(
        now=now,
        states=states,
        open_entries={row.partition: row for row in entries},
        redrives=dict(redrives),
        cooldown_redrives=dict(cooldowns),
        live_leases=live,
        done_code_versions=versions,
        waiting_on=_waiting_on(connection, upstream or {}),
        failures_at_start=failures_at_start(
            connection,
            asset,
            wanted,
            {key: state.episode or 1 for key, state in states.items()},
            max_attempts,
        )
        if max_attempts is not None
        else {},
    )


def _waiting_on(
    connection: sa.Connection, upstream: UpstreamPairs
) -> dict[str, dict[tuple[str, str], str]]:
    """Per partition, the upstream partitions it reads that are not done, with their status
    or `missing`, as `store.partitions.unfinished` says for one; one query per upstream
    backfill, by its keys' range."""
    by_asset: dict[str, set[str]] = defaultdict(set)
    for pairs in upstream.values():
        for name, key in pairs:
            by_asset[name].add(key)
    status: dict[tuple[str, str], str] = {}
    for name, keys in by_asset.items():
        rows = connection.execute(
            sa.select(partitions.c.partition, partitions.c.status).where(
                partitions.c.asset == name,
                partitions.c.partition.between(min(keys), max(keys)),
            )
        ).all()
        status.update({(name, row.partition): row.status for row in rows if row.partition in keys})
    waiting: dict[str, dict[tuple[str, str], str]] = {}
    for partition, pairs in upstream.items():
        not_done = {
            pair: status.get(pair, "missing")
            for pair in pairs
            if status.get(pair) != PartitionStatus.DONE
        }
        if not_done:
            waiting[partition] = not_done
    return waiting
