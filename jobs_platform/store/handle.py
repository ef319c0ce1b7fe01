"""`Store`: one warehouse and its clock, with the store's time-reading operations as methods.

Built once where a warehouse engine is opened (`PartitionRunner`, the resource, the CLI's
`open_store`, each sensor), it hands its `clock` to every store function that stamps or
compares a time, so no call can read another clock than the one injected (`store.clock`:
the database's by default; a test's own). Each method is one call of the module function
of the same name, which keeps the SQL and the docstring; the caller still owns the
transaction (`store.begin()`), so one transaction stays one (rows + checkpoint + fence, a
finalize, a release).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.dead_letter import entries as dead_letter
from jobs_platform.dead_letter import redrive
from jobs_platform.store import (
    alert_ledger,
    attempts,
    catalog,
    checkpoints,
    health,
    leases,
    outbox,
    partitions,
    recovery,
)
from jobs_platform.store.clock import DATABASE_CLOCK, Clock
from jobs_platform.store.migrate import ready_warehouse
from jobs_platform.store.rows import TableRow


@dataclass(frozen=True)
class Store:
    """The warehouse's engine and the one clock every stamp and comparison reads."""

    engine: sa.Engine
    clock: Clock

    def now(self, connection: sa.Connection) -> dt.datetime:
        return self.clock.now(connection)

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """One transaction (committed at the end of the block, rolled back on an error)."""
        with self.engine.begin() as connection:
            yield connection

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as connection:
            yield connection

    # The attempt history (`store.attempts`).

    def start_attempt(
        self,
        connection: sa.Connection,
        *,
        asset: str,
        partition: str,
        episode: int,
        run_id: str | None,
        step_retry: int | None,
        token: int,
        holder: str,
        correlation_id: str | None,
        code_version: str | None = None,
    ) -> tuple[int, int]:
        return attempts.start_attempt(
            connection, asset=asset, partition=partition, episode=episode, run_id=run_id,
            step_retry=step_retry, token=token, holder=holder, correlation_id=correlation_id,
            code_version=code_version, clock=self.clock,
        )  # fmt: skip

    def finish_attempt(
        self,
        connection: sa.Connection,
        attempt_id: int,
        failure: attempts.AttemptFailure | None = None,
    ) -> None:
        attempts.finish_attempt(connection, attempt_id, failure, clock=self.clock)

    def record_abandoned_attempts(
        self, connection: sa.Connection, asset: str, partition: str, before_token: int
    ) -> int:
        return attempts.record_abandoned_attempts(
            connection, asset, partition, before_token, clock=self.clock
        )

    # Leases (`store.leases`).

    def acquire_lease(
        self, asset: str, partition: str, *, holder: str, run_id: str | None, ttl_seconds: float
    ) -> leases.Grant:
        return leases.acquire_lease(
            self.engine, asset, partition, holder=holder, run_id=run_id,
            ttl_seconds=ttl_seconds, clock=self.clock,
        )  # fmt: skip

    def fence(self, connection: sa.Connection, lease: leases.Lease, ttl_seconds: float) -> None:
        leases.fence(connection, lease, ttl_seconds, self.clock)

    def renew_lease(
        self, lease: leases.Lease, ttl_seconds: float, *, timeout_seconds: float | None = None
    ) -> bool:
        return leases.renew_lease(
            self.engine, lease, ttl_seconds, self.clock, timeout_seconds=timeout_seconds
        )

    # Partitions and checkpoints (`store.partitions`, `store.checkpoints`).

    def set_partition_status(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        status: partitions.PartitionStatus,
        *,
        episode: int | None = None,
        **details: object,
    ) -> None:
        partitions.set_partition_status(
            connection, asset, partition, status, episode=episode, clock=self.clock, **details
        )

    def record_chunk(
        self,
        connection: sa.Connection,
        *,
        asset: str,
        partition: str,
        fingerprint: str,
        chunk_index: int,
        chunk_hash: str,
        row_count: int,
        token: int,
    ) -> None:
        checkpoints.record_chunk(
            connection, asset=asset, partition=partition, fingerprint=fingerprint,
            chunk_index=chunk_index, chunk_hash=chunk_hash, row_count=row_count, token=token,
            clock=self.clock,
        )  # fmt: skip

    # The dead letter (`dead_letter.entries`, `dead_letter.redrive`).

    def quarantine_partition(
        self, connection: sa.Connection, asset: str, partition: str, episode: int
    ) -> int:
        return dead_letter.quarantine_partition(
            connection, asset, partition, episode, clock=self.clock
        )

    def requeue_partition(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        *,
        by: dead_letter.RequeuedBy = dead_letter.RequeuedBy.CLI,
        reason: str = "requested",
    ) -> TableRow:
        return dead_letter.requeue_partition(
            connection, asset, partition, by=by, reason=reason, clock=self.clock
        )

    def release_entries(
        self,
        connection: sa.Connection,
        entries: Sequence[TableRow],
        *,
        by: dead_letter.RequeuedBy,
        reason: str,
    ) -> list[TableRow]:
        return dead_letter.release_entries(
            connection, entries, by=by, reason=reason, clock=self.clock
        )

    def mark_requeue_launched(self, connection: sa.Connection, entry_ids: Sequence[int]) -> None:
        dead_letter.mark_requeue_launched(connection, entry_ids, clock=self.clock)

    def requeues_awaiting_run(
        self, connection: sa.Connection, assets: Sequence[str], limit: int, *, grace: dt.timedelta
    ) -> list[TableRow]:
        return dead_letter.requeues_awaiting_run(
            connection, assets, limit, grace=grace, clock=self.clock
        )

    def resolve_requeued(self, connection: sa.Connection, asset: str, partition: str) -> int:
        return dead_letter.resolve_requeued(connection, asset, partition, clock=self.clock)

    def cooldown_due_entries(
        self,
        connection: sa.Connection,
        assets: Sequence[str],
        *,
        first_cooldown_seconds: float,
        max_redrives: int,
        limit: int,
    ) -> list[TableRow]:
        return redrive.cooldown_due_entries(
            connection, assets, first_cooldown_seconds=first_cooldown_seconds,
            max_redrives=max_redrives, limit=limit, clock=self.clock,
        )  # fmt: skip

    # Recovery of crashed attempts and runs (`store.recovery`).

    def record_abandoned_attempts_everywhere(
        self, connection: sa.Connection, *, assets: Sequence[str] | None = None
    ) -> list[TableRow]:
        return recovery.record_abandoned_attempts_everywhere(connection, self.clock, assets=assets)

    def runs_with_live_attempts(self, connection: sa.Connection, run_ids: list[str]) -> set[str]:
        return recovery.runs_with_live_attempts(connection, run_ids, self.clock)

    def runs_whose_worker_died(
        self,
        connection: sa.Connection,
        run_ids: list[str],
        grace_seconds: float,
        *,
        assets: Sequence[str] | None = None,
    ) -> set[str]:
        return recovery.runs_whose_worker_died(
            connection, run_ids, grace_seconds, self.clock, assets=assets
        )

    # The alert ledger (`store.alert_ledger`).

    def claim_delivery(
        self, connection: sa.Connection, entry_id: int, sink: str, max_tries: int
    ) -> tuple[bool, alert_ledger.DeliveryStatus]:
        return alert_ledger.claim_delivery(connection, entry_id, sink, max_tries, clock=self.clock)

    def mark_sent(self, connection: sa.Connection, entry_id: int, sink: str) -> None:
        alert_ledger.mark_sent(connection, entry_id, sink, clock=self.clock)

    def record_failed_send(
        self, connection: sa.Connection, entry_id: int, sink: str, error: str, max_tries: int
    ) -> tuple[alert_ledger.DeliveryStatus, int]:
        return alert_ledger.record_failed_send(
            connection, entry_id, sink, error, max_tries, clock=self.clock
        )

    # The outbox (`store.outbox`).

    def insert_request(self, connection: sa.Connection, request: Mapping[str, object]) -> int:
        return outbox.insert_request(connection, request, clock=self.clock)

    def claim_pending(
        self, connection: sa.Connection, limit: int, *, assets: Sequence[str] | None = None
    ) -> list[outbox.ClaimedRequest]:
        return outbox.claim_pending(connection, limit, assets=assets, clock=self.clock)

    def reclaim_unlaunched(
        self, connection: sa.Connection, limit: int, *, assets: Sequence[str] | None = None
    ) -> list[outbox.ClaimedRequest]:
        return outbox.reclaim_unlaunched(connection, limit, assets=assets, clock=self.clock)

    def mark_launched(self, connection: sa.Connection, request_id: int, run_key: str) -> bool:
        return outbox.mark_launched(connection, request_id, run_key, clock=self.clock)

    def queue_stats(
        self, connection: sa.Connection, *, assets: Sequence[str] | None = None
    ) -> outbox.QueueStats:
        return outbox.queue_stats(connection, assets=assets, clock=self.clock)

    # Health and the catalog (`store.health`, `store.catalog`).

    def asset_health(
        self, connection: sa.Connection, partition_keys: Mapping[str, health.ExpectedKeys]
    ) -> dict[str, health.AssetHealth]:
        return health.asset_health(connection, partition_keys, clock=self.clock)

    def window_health(
        self, connection: sa.Connection, partition_keys: Mapping[str, Sequence[str]]
    ) -> dict[str, health.AssetHealth]:
        return health.window_health(connection, partition_keys, clock=self.clock)

    def backfill_status(
        self, connection: sa.Connection, partition_keys: Mapping[str, health.ExpectedKeys]
    ) -> dict[str, Any]:
        return health.backfill_status(connection, partition_keys, clock=self.clock)

    def write_catalog(self, location: str, entries: Sequence[catalog.CatalogEntry]) -> dt.datetime:
        return catalog.write_catalog(self.engine, location, entries, clock=self.clock)

    def read_catalog(
        self, connection: sa.Connection, location: str
    ) -> catalog.LocationCatalog | None:
        return catalog.read_catalog(connection, location, clock=self.clock)


def ready_store(database_url: str | sa.URL) -> Store:
    """The warehouse at `database_url`, ready (`store.migrate.ready_warehouse`), on the
    database's clock: what every entry point that is not a test writes through."""
    return Store(ready_warehouse(database_url), DATABASE_CLOCK)
