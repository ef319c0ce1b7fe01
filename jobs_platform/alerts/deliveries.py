"""The alert ledgers' rows: one per alert and sink, saying where its delivery stands.

A quarantine entry's deliveries are rows of `jp_alert_ledger` (keyed by the entry), a
notice's rows of `jp_notice_ledger` (keyed by the notice): one `AlertLedger` each, with
the same states and the same rules.

`jobs_platform.alerts.ledger` calls the sinks; these functions only read and move the rows,
each in the caller's transaction, so that the network call happens between two commits.

The alerts' pure part, below the engine: `engine.warehouse.Warehouse` holds an `AlertLedger`
(`store.alert_ledger`), and the dead letter's redrive reads which deliveries are settled.
"""

from __future__ import annotations

import datetime as dt
import enum
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import upsert_row
from jobs_platform.store.schema import alert_ledger, notice_ledger


class DeliveryStatus(enum.StrEnum):
    """Where the delivery of one entry's alert to one sink stands."""

    PENDING = "pending"
    """Not tried yet: its sink ran out of time or rests after failing in a row, so a later
    tick makes the first try. Never stored: no row means pending."""
    SENDING = "sending"
    """Claimed just before the send; still so if that tick died mid-send, so it is resent."""
    SENT = "sent"
    """The sink accepted the alert; it is never sent there again."""
    FAILED = "failed"
    """The last send raised; a tick at or after `next_try_at` tries again while tries remain."""
    GAVE_UP = "gave_up"
    """Every allowed try failed; the last error stays in the ledger for a person."""


SETTLED = frozenset({DeliveryStatus.SENT, DeliveryStatus.GAVE_UP})

# A failed delivery's next try waits 30-60 s after its first failure, doubling each time up
# to 15 minutes: five tries span about 7 to 15 minutes of a sink's outage.
RETRY_BASE_SECONDS = 60.0
RETRY_CEILING_SECONDS = 15 * 60.0


def retry_delay(
    tries: int, *, uniform: Callable[[float, float], float] = random.uniform
) -> dt.timedelta:
    """How long a delivery that failed its `tries`-th try waits for the next (equal jitter:
    between half and all of the doubling ceiling, so a burst's retries spread out)."""
    ceiling = min(RETRY_BASE_SECONDS * 2 ** (tries - 1), RETRY_CEILING_SECONDS)
    return dt.timedelta(seconds=uniform(ceiling / 2, ceiling))


def nothing_to_do_now(table: sa.Table, now: dt.datetime) -> sa.ColumnElement[bool]:
    """A ledger row whose delivery needs no send now: settled, or failed and not yet due."""
    return sa.or_(
        table.c.status.in_([str(status) for status in SETTLED]),
        sa.and_(table.c.status == DeliveryStatus.FAILED, table.c.next_try_at > now),
    )


@dataclass(frozen=True)
class Undelivered:
    """Alerts not yet settled for every sink, split by whether a sink has a send due now."""

    due: list[int]
    waiting: list[int]
    """Each unsettled delivery failed and waits for its `next_try_at`."""


# The event of an entry's first alert: its quarantine. Its ledger rows are keyed by the
# sink's bare name, as they were before there were other events.
QUARANTINED_EVENT = "quarantined"
# Bound on the ids of one IN list (SQLite's default limit on a statement's parameters is
# 999 before 3.32).
_IDS_PER_QUERY = 500


def event_sink(sink: str, event: str) -> str:
    """The ledger's key for one sink and one event of an entry: each event is alerted once
    per sink (`log`, then `log:redrives_exhausted` when the redrive gives up)."""
    return sink if event == QUARANTINED_EVENT else f"{sink}:{event}"


class AlertLedger:
    """One ledger's deliveries, stamped on one clock: the quarantine entries'
    (`jp_alert_ledger`, by default) or the notices' (`jp_notice_ledger`)."""

    def __init__(self, clock: Clock, table: sa.Table = alert_ledger) -> None:
        self.clock = clock
        self.table = table
        # The alert a row delivers: its first key column (`entry_id`, `notice_id`).
        self._alert_id = table.primary_key.columns.values()[0]

    @classmethod
    def of_notices(cls, clock: Clock) -> AlertLedger:
        """The notices' ledger (`jp_notice_ledger`)."""
        return cls(clock, notice_ledger)

    def claim_delivery(
        self, connection: sa.Connection, entry_id: int, sink: str, max_tries: int
    ) -> tuple[bool, DeliveryStatus]:
        """Mark the delivery `sending` when it is ours to make; (ours?, current status)."""
        row = connection.execute(
            sa.select(self.table).where(*self._of(entry_id, sink)).with_for_update()
        ).first()
        if row is None:
            # The row is created here, so there is nothing to lock yet: a concurrent tick may
            # create it first, and then that tick sends.
            created = upsert_row(
                connection,
                self.table,
                {
                    self._alert_id.name: entry_id,
                    "sink": sink,
                    "status": DeliveryStatus.SENDING,
                    "tries": 1,
                    "updated_at": self.clock.now(connection),
                },
            )
            return created is not None, DeliveryStatus.SENDING
        status = DeliveryStatus(row.status)
        if status in SETTLED:
            return False, status
        if row.tries >= max_tries:
            self._update(connection, entry_id, sink, status=DeliveryStatus.GAVE_UP)
            return False, DeliveryStatus.GAVE_UP
        waiting = row.next_try_at is not None and row.next_try_at > self.clock.now(connection)
        if status is DeliveryStatus.FAILED and waiting:
            return False, status  # backing off: this sink's outage costs no other
        # FAILED, or SENDING left by a tick that died: send again, same Idempotency-Key.
        self._update(connection, entry_id, sink, status=DeliveryStatus.SENDING, tries=row.tries + 1)
        return True, DeliveryStatus.SENDING

    def mark_sent(self, connection: sa.Connection, entry_id: int, sink: str) -> None:
        self._update(
            connection,
            entry_id,
            sink,
            status=DeliveryStatus.SENT,
            last_error=None,
            next_try_at=None,
        )

    def record_failed_send(
        self, connection: sa.Connection, entry_id: int, sink: str, error: str, max_tries: int
    ) -> tuple[DeliveryStatus, int]:
        """Keep the send's error; the delivery gives up once its tries are spent. (status, tries)"""
        tries = connection.execute(
            sa.select(self.table.c.tries).where(*self._of(entry_id, sink))
        ).scalar_one()
        if tries >= max_tries:
            self._update(
                connection, entry_id, sink, status=DeliveryStatus.GAVE_UP, last_error=error
            )
            return DeliveryStatus.GAVE_UP, tries
        self._update(
            connection,
            entry_id,
            sink,
            status=DeliveryStatus.FAILED,
            last_error=error,
            next_try_at=self.clock.now(connection) + retry_delay(tries),
        )
        return DeliveryStatus.FAILED, tries

    def undelivered(
        self, connection: sa.Connection, alert_ids: Sequence[int], sinks: Sequence[str]
    ) -> Undelivered:
        """Which of `alert_ids` some of `sinks` has not settled, due now or waiting; the
        settled ones are left out. In id order."""
        now = self.clock.now(connection)
        idle: dict[int, int] = {}  # per alert, its sinks with nothing to do now
        settled: dict[int, int] = {}
        for start in range(0, len(alert_ids), _IDS_PER_QUERY):
            rows = connection.execute(
                sa.select(
                    self._alert_id,
                    self.table.c.status.in_([str(status) for status in SETTLED]),
                    nothing_to_do_now(self.table, now),
                ).where(
                    self._alert_id.in_(list(alert_ids[start : start + _IDS_PER_QUERY])),
                    self.table.c.sink.in_(list(sinks)),
                )
            )
            for alert_id, is_settled, is_idle in rows:
                settled[alert_id] = settled.get(alert_id, 0) + bool(is_settled)
                idle[alert_id] = idle.get(alert_id, 0) + bool(is_idle)
        due: list[int] = []
        waiting: list[int] = []
        for alert_id in sorted(set(alert_ids)):
            if settled.get(alert_id, 0) == len(sinks):
                continue
            (waiting if idle.get(alert_id, 0) == len(sinks) else due).append(alert_id)
        return Undelivered(due, waiting)

    def _update(
        self, connection: sa.Connection, entry_id: int, sink: str, **values: object
    ) -> None:
        connection.execute(
            sa.update(self.table)
            .where(*self._of(entry_id, sink))
            .values(**values, updated_at=self.clock.now(connection))
        )

    def _of(self, alert_id: int, sink: str) -> list[sa.ColumnElement[bool]]:
        return [self._alert_id == alert_id, self.table.c.sink == sink]
