"""Lifecycle events: one structured log line per step of a partition's life.

Each event carries run id, asset, partition, attempt, error class and correlation id, so a
request can be followed end to end. Human-readable by default; JSON lines when
`JOBS_PLATFORM_LOG_FORMAT=json`. They go to whatever logger the caller hands over —
Dagster's, in a run, so they show in the run view.

Dagster stores each line of its log as an event, a write of its own. So a progress line
that the end line repeats goes to `progress_log` instead (Python's `jobs_platform` logger
in a run): a first attempt's `started`, and the `chunk_committed` of a partition read in
one chunk. A retry's `started` and every chunk of a longer partition stay in the run's log.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


class Lifecycle(enum.StrEnum):
    """A step in a partition's life, as logged."""

    REQUESTED = "requested"  # an application asked for the work (outbox)
    STARTED = "started"  # an attempt took the lease and began
    CHUNK_COMMITTED = "chunk_committed"  # a chunk's rows and checkpoint committed
    SUCCEEDED = "succeeded"  # the finalize transaction committed
    FAILED = "failed"  # an attempt ended with an error
    RETRYING = "retrying"  # it will be tried again after a delay
    QUARANTINED = "quarantined"  # it stopped for a person to look at
    BLOCKED = "blocked"  # a partition it reads is not done, so it was not attempted
    HELD = "held"  # its backfill is paused or its input not ready, so it was not attempted
    REQUEUED = "requeued"  # a person released it from the quarantine


class LogFormat(enum.StrEnum):
    HUMAN = "human"
    JSON = "json"


_LEVELS = {
    Lifecycle.FAILED: logging.WARNING,
    Lifecycle.RETRYING: logging.WARNING,
    Lifecycle.QUARANTINED: logging.ERROR,
    Lifecycle.BLOCKED: logging.WARNING,
    Lifecycle.HELD: logging.WARNING,
}


@dataclass(frozen=True)
class EventTrail:
    """The fields every event of one attempt shares; `emit` adds the event's own."""

    log: Any  # a logging.Logger, LoggerAdapter or Dagster's log manager
    asset: str
    partition: str
    run_id: str | None = None
    attempt: int | None = None
    correlation_id: str | None = None
    log_format: LogFormat = LogFormat.HUMAN
    progress_log: Any = None  # where the lines not `kept` go; None: `log` too

    def with_attempt(self, attempt: int) -> EventTrail:
        return replace(self, attempt=attempt)

    def emit(
        self,
        event: Lifecycle,
        message: str = "",
        *,
        error_class: str | None = None,
        kept: bool = True,
        **details: Any,
    ) -> dict[str, object]:
        """Log the event's line; `kept=False` sends it to `progress_log` (not stored)."""
        record: dict[str, object] = {
            "event": str(event),
            "run_id": self.run_id,
            "asset": self.asset,
            "partition": self.partition,
            "attempt": self.attempt,
            "error_class": error_class,
            "correlation_id": self.correlation_id,
            **details,
            "message": message,
        }
        log = self.log if kept or self.progress_log is None else self.progress_log
        log.log(_LEVELS.get(event, logging.INFO), render(record, self.log_format))
        return record


def render(record: Mapping[str, object], log_format: LogFormat) -> str:
    """One line: JSON, or `asset/partition event …` for people."""
    if log_format is LogFormat.JSON:
        return json.dumps(record, default=str, sort_keys=False)
    head = f"{record['asset']}/{record['partition']} {record['event']}"
    if record.get("attempt") is not None:
        head += f" (attempt {record['attempt']})"
    parts = [head]
    if record.get("message"):
        parts.append(f"— {record['message']}")
    tags = [
        f"{name}={record[name]}"
        for name in record
        if name not in ("event", "asset", "partition", "attempt", "message")
        and record[name] is not None
    ]
    if tags:
        parts.append(f"[{' '.join(tags)}]")
    return " ".join(parts)
