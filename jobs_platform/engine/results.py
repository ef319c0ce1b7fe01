"""What an attempt at a partition returns: a report of its work, or why it stopped."""

from __future__ import annotations

from dataclasses import dataclass

from jobs_platform.engine.decisions import Decision
from jobs_platform.errors import Verdict
from jobs_platform.store.upsert import UpsertCounts


@dataclass(frozen=True)
class AttemptInfo:
    """Who is attempting: the run, the step retry, and this process as a lease holder."""

    run_id: str | None = None
    step_retry: int = 0
    correlation_id: str | None = None
    holder: str = ""


@dataclass(frozen=True)
class PartitionReport:
    """What a successful attempt did (becomes the materialization's metadata)."""

    asset: str
    partition: str
    attempt: int
    input_rows: int
    counts: UpsertCounts
    rows_swept: int
    chunks_written: int
    chunks_resumed: int
    duration_seconds: float
    fingerprint: str


@dataclass(frozen=True)
class FailedAttempt:
    """An attempt that did not finish the partition, and what to do next."""

    asset: str
    partition: str
    decision: Decision
    verdict: Verdict | None  # None when nothing failed: the partition was busy or blocked
    attempt: int | None  # None when no attempt was started (gated or busy)
    failures: int
    entry_id: int | None
    error: BaseException | None
    gated: bool = False  # refused at the gate: already quarantined

    @property
    def message(self) -> str:
        return str(self.error) if self.error is not None else "partition busy"
