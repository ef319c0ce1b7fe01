"""Which dead-letter entries a person requeues: one entry, one cause, or a backfill's.

The three forms `jobs-platform dead-letter requeue` takes as arguments and the
`requeue_dead_letter` job as config, checked and resolved to entries in one place. Plain
Python over the store, no Dagster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.dead_letter import entries, releases
from jobs_platform.store.rows import TableRow


@dataclass(frozen=True)
class Selection:
    """Which open entries a person requeues, in one of three forms: `asset` and
    `partition` (one entry), `group` (a signature: one cause), or `asset` with an optional
    `error_class`. The CLI's arguments and the `requeue_dead_letter` job's config."""

    asset: str | None = None
    partition: str | None = None
    group: str | None = None
    error_class: str | None = None

    def problem(self) -> str | None:
        """Why this is not one of the three forms, or None when it is."""
        if self.group is not None:
            if any(v is not None for v in (self.asset, self.partition, self.error_class)):
                return "a group (signature) is requeued alone: no asset, partition or error class"
            return None
        if self.asset is None:
            return "give an asset and a partition, a group (signature), or an asset"
        if self.partition is not None and self.error_class is not None:
            return "a partition names one entry: it takes no error class"
        return None

    @property
    def is_single(self) -> bool:
        return self.partition is not None

    def describe(self) -> str:
        if self.group is not None:
            return f"group {self.group}"
        if self.partition is not None:
            return f"{self.asset}/{self.partition}"
        cause = f" with error class {self.error_class}" if self.error_class else ""
        return f"every open entry of {self.asset}{cause}"

    def open_entries(self, connection: sa.Connection, served: Sequence[str]) -> list[TableRow]:
        """The open (quarantined) entries it selects among the `served` backfills' ones."""
        if self.partition is not None:
            assert self.asset is not None
            entry = entries.active_entry(connection, self.asset, self.partition)
            return [entry] if entry is not None and self.asset in served else []
        return entries.open_entries(
            connection,
            signature=self.group,
            asset=self.asset,
            error_class=self.error_class,
            assets=list(served),
        )

    def awaiting_entries(self, connection: sa.Connection, served: Sequence[str]) -> list[TableRow]:
        """The requeued entries it selects among the `served` backfills' ones whose new
        episode has not started: a person may requeue them again once their run ended."""
        if self.partition is not None:
            assert self.asset is not None
            entry = releases.requeue_awaiting_run(connection, self.asset, self.partition)
            return [entry] if entry is not None and self.asset in served else []
        return releases.requeues_awaiting_run_matching(
            connection,
            signature=self.group,
            asset=self.asset,
            error_class=self.error_class,
            assets=list(served),
        )
