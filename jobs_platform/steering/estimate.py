"""How long a backfill's partitions take, from its own history: `plan`'s estimate, `status`'s ETA.

One rule for both: the median (p50) of the done partitions' last duration and rows, times
the partitions to go, divided by how many runs a launch of them makes at once. The
backfill policy says that: `multi_run(n)` splits them into runs of n partitions that the
run queue may run side by side (each run's partitions one after the other);
`single_run()` is one run. Dagster's run queue may allow fewer runs at once than that:
the figure is then a floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.health import AssetHealth
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.schema import partitions


@dataclass(frozen=True)
class History:
    """What one backfill's done partitions took: the median of their last attempts."""

    partitions: int  # done partitions with a recorded duration
    p50_seconds: float
    p50_rows: float


@dataclass(frozen=True)
class Estimate:
    """Rows and seconds of `count` partitions; None when the backfill has no history."""

    count: int
    runs_at_once: int
    history: History | None

    @property
    def rows(self) -> int | None:
        return None if self.history is None else round(self.history.p50_rows * self.count)

    @property
    def seconds(self) -> float | None:
        if self.history is None:
            return None
        return round(self.history.p50_seconds * self.count / max(self.runs_at_once, 1), 1)

    def as_dict(self) -> dict[str, object]:
        if self.history is None:
            return {"rows": None, "seconds": None, "history": "no history"}
        return {
            "rows": self.rows,
            "seconds": self.seconds,
            "runs_at_once": self.runs_at_once,
            "p50_seconds": self.history.p50_seconds,
            "p50_rows": self.history.p50_rows,
            "done_partitions": self.history.partitions,
        }

    def describe(self) -> str:
        if self.history is None:
            return "estimate: no history (no partition of this backfill is done yet)"
        return (
            f"estimate: {self.rows:,} rows, {_duration(self.seconds or 0.0)} "
            f"(p50 {self.history.p50_seconds:g} s and {self.history.p50_rows:g} rows per "
            f"partition over {self.history.partitions} done, times {self.count} over "
            f"{self.runs_at_once} run{'s' if self.runs_at_once != 1 else ''} at once)"
        )


def read_history(connection: sa.Connection, asset: str) -> History | None:
    """The median duration and rows of `asset`'s done partitions (their last attempts);
    None when none is done with a recorded duration. One query."""
    rows = connection.execute(
        sa.select(partitions.c.duration_seconds, partitions.c.row_count).where(
            partitions.c.asset == asset,
            partitions.c.status == PartitionStatus.DONE,
            partitions.c.duration_seconds.is_not(None),
        )
    ).all()
    if not rows:
        return None
    return History(
        partitions=len(rows),
        p50_seconds=round(median([float(row.duration_seconds) for row in rows]), 3),
        p50_rows=median([float(row.row_count or 0) for row in rows]),
    )


def runs_at_once(count: int, partitions_per_run: int | None) -> int:
    """How many runs a launch of `count` partitions makes (and may run side by side):
    runs of `partitions_per_run` each; None is one run (`single_run()`)."""
    if count <= 0:
        return 1
    if partitions_per_run is None:
        return 1
    return math.ceil(count / max(partitions_per_run, 1))


def estimate(count: int, partitions_per_run: int | None, history: History | None) -> Estimate:
    """Rows and seconds of launching `count` partitions, from the backfill's history."""
    return Estimate(count, runs_at_once(count, partitions_per_run), history)


def median(values: Sequence[float]) -> float:
    """The nearest-rank median (p50), as `status` reads its percentiles."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) / 2) - 1)]


@dataclass(frozen=True)
class Progress:
    """A backfill under way: done, still to run, failing, and when the rest should end."""

    done: int
    remaining: int  # missing or failed: what the runs still attempt
    failing: int  # failed (retrying) or quarantined
    eta_seconds: float | None  # None without history

    def as_dict(self) -> dict[str, object]:
        return {
            "done": self.done,
            "remaining": self.remaining,
            "failing": self.failing,
            "eta_seconds": self.eta_seconds,
        }


def progress(
    *,
    done: int,
    missing: int,
    failed: int,
    quarantined: int,
    p50_seconds: float | None,
    partitions_per_run: int | None,
) -> Progress:
    """Where a backfill stands, and its ETA: the p50 times the partitions remaining, over
    the runs at once, as `plan` estimates. `status` and `platform_health` give the p50
    they already read."""
    remaining = missing + failed
    eta = None
    if p50_seconds is not None:
        eta = round(p50_seconds * remaining / runs_at_once(remaining, partitions_per_run), 1)
    return Progress(done, remaining, failed + quarantined, eta)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def backfill_progress(
    assets: Mapping[str, AssetHealth], partitions_per_run: Mapping[str, int | None]
) -> dict[str, Progress]:
    """Each backfill's progress from its health (`status`, `platform_health`); a backfill
    whose policy is not known (`partitions_per_run` lacks it) counts as one run at once."""
    return {
        asset: progress(
            done=health.done,
            missing=health.missing,
            failed=health.failed,
            quarantined=health.quarantined,
            p50_seconds=health.duration_p50_seconds,
            partitions_per_run=partitions_per_run.get(asset),
        )
        for asset, health in assets.items()
    }
