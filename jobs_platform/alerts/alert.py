"""What a quarantine alert says: the entry, its whole failure history and how to requeue it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import sqlalchemy as sa

from jobs_platform.alerts.deliveries import QUARANTINED_EVENT
from jobs_platform.dead_letter.entries import UnknownEntry, entries_by_id
from jobs_platform.dead_letter.view import one_line
from jobs_platform.store.attempts import attempt_history
from jobs_platform.store.rows import TableRow
from jobs_platform.suggested_commands import requeue_command


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt at the partition, as an alert and the dead letter show it."""

    episode: int
    attempt: int
    run_id: str | None
    error_class: str
    error_type: str | None
    message: str | None
    at: dt.datetime | None
    rule: str | None = None  # the signature of the taught rule that decided the class

    @classmethod
    def from_row(cls, row: TableRow) -> AttemptRecord:
        """From a `jp_attempts` row; a finished success shows its outcome as its class."""
        return cls(
            episode=row.episode,
            attempt=row.attempt,
            run_id=row.run_id,
            error_class=row.error_class or row.outcome,
            error_type=row.error_type,
            message=row.message,
            at=row.ended_at or row.started_at,
            rule=row.rule,
        )


@dataclass(frozen=True)
class QuarantineAlert:
    """A quarantined partition, told once per quarantine entry."""

    entry_id: int
    asset: str
    partition: str
    episode: int
    status: str
    attempts: int
    error_class: str
    last_error: str | None
    first_failed_at: dt.datetime | None
    last_failed_at: dt.datetime | None
    history: tuple[AttemptRecord, ...]
    location: str | None = None
    """The code location that alerts (its module, as `-m` names it), for the requeue command."""
    event: str = QUARANTINED_EVENT
    """What happened to the entry: quarantined, or `redrives_exhausted` (the redrive gave up
    on it after its last redrive; it now waits for a person)."""
    redrives: int = 0
    """Redrives of the partition so far (a `redrives_exhausted` alert says how many)."""

    @classmethod
    def from_rows(
        cls, entry: TableRow, history: Iterable[TableRow], location: str | None = None
    ) -> QuarantineAlert:
        """Build the alert from a `jp_quarantine` row and the partition's `jp_attempts` rows."""
        return cls(
            entry_id=entry.id,
            asset=entry.asset,
            partition=entry.partition,
            episode=entry.episode,
            status=entry.status,
            attempts=entry.attempts,
            error_class=entry.error_class,
            last_error=entry.last_error,
            first_failed_at=entry.first_failed_at,
            last_failed_at=entry.last_failed_at,
            # Later episodes belong to later entries; this one ends with its own episode.
            history=tuple(
                AttemptRecord.from_row(row) for row in history if row.episode <= entry.episode
            ),
            location=location,
        )

    def with_event(self, event: str, *, redrives: int) -> QuarantineAlert:
        """The same entry's alert for a later event of it (`redrives_exhausted`)."""
        return replace(self, event=event, redrives=redrives)

    @property
    def requeue_command(self) -> str:
        return requeue_command(self.asset, self.partition, self.location)

    @property
    def idempotency_key(self) -> str:
        """The same for every delivery of this entry's event, so a receiver can drop repeats."""
        if self.event == QUARANTINED_EVENT:
            return str(self.entry_id)
        return f"{self.entry_id}:{self.event}"

    def as_dict(self) -> dict[str, Any]:
        """The alert as JSON-ready values (timestamps in ISO 8601)."""
        fields = asdict(self)
        fields["history"] = [_json_ready(attempt) for attempt in fields["history"]]
        return {**_json_ready(fields), "requeue_command": self.requeue_command}

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    def summary(self) -> str:
        """A few lines of plain text for chat and mail."""
        when = f"first failed {_iso(self.first_failed_at)}, last failed {_iso(self.last_failed_at)}"
        if self.event != QUARANTINED_EVENT:
            return (
                f"jobs_platform: {self.asset}/{self.partition} is still quarantined "
                f"(entry {self.entry_id}) after {self.redrives} redrive(s): the redrive has "
                "given up on it and it waits for a person.\n"
                f"Last error ({self.error_class}): {one_line(self.last_error, 500)}\n"
                f"{when}.\n"
                f"Requeue with: {self.requeue_command}"
            )
        return (
            f"jobs_platform: {self.asset}/{self.partition} is quarantined "
            f"(entry {self.entry_id}) after {self.attempts} attempt(s).\n"
            f"Last error ({self.error_class}): {one_line(self.last_error, 500)}\n"
            f"{when}.\n"
            f"Requeue with: {self.requeue_command}"
        )


def load_alerts(
    connection: sa.Connection, entry_ids: Sequence[int], location: str | None = None
) -> list[QuarantineAlert]:
    """The alerts of the given entries, oldest entry first (one query per entry's history)."""
    return [
        alert_for_entry(connection, entry, location)
        for entry in entries_by_id(connection, entry_ids)
    ]


def load_alert(
    connection: sa.Connection, entry_id: int, location: str | None = None
) -> QuarantineAlert:
    alerts = load_alerts(connection, [entry_id], location)
    if not alerts:
        raise UnknownEntry(f"there is no quarantine entry {entry_id}")
    return alerts[0]


def alert_for_entry(
    connection: sa.Connection, entry: TableRow, location: str | None = None
) -> QuarantineAlert:
    history = attempt_history(connection, entry.asset, entry.partition)
    return QuarantineAlert.from_rows(entry, history, location)


def _json_ready(values: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _iso(value) if isinstance(value, dt.datetime) else value
        for name, value in values.items()
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
