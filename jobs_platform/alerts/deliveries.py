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

import enum

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import upsert_row
from jobs_platform.store.schema import alert_ledger, notice_ledger


class DeliveryStatus(enum.StrEnum):
    """Where the delivery of one entry's alert to one sink stands."""

    SENDING = "sending"
    """Claimed just before the send; still so if that tick died mid-send, so it is resent."""
    SENT = "sent"
    """The sink accepted the alert; it is never sent there again."""
    FAILED = "failed"
    """The last send raised; a later tick tries again while tries remain."""
    GAVE_UP = "gave_up"
    """Every allowed try failed; the last error stays in the ledger for a person."""


SETTLED = frozenset({DeliveryStatus.SENT, DeliveryStatus.GAVE_UP})
# The event of an entry's first alert: its quarantine. Its ledger rows are keyed by the
# sink's bare name, as they were before there were other events.
QUARANTINED_EVENT = "quarantined"


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
        # FAILED, or SENDING left by a tick that died: send again, same Idempotency-Key.
        self._update(connection, entry_id, sink, status=DeliveryStatus.SENDING, tries=row.tries + 1)
        return True, DeliveryStatus.SENDING

    def mark_sent(self, connection: sa.Connection, entry_id: int, sink: str) -> None:
        self._update(connection, entry_id, sink, status=DeliveryStatus.SENT, last_error=None)

    def record_failed_send(
        self, connection: sa.Connection, entry_id: int, sink: str, error: str, max_tries: int
    ) -> tuple[DeliveryStatus, int]:
        """Keep the send's error; the delivery gives up once its tries are spent. (status, tries)"""
        tries = connection.execute(
            sa.select(self.table.c.tries).where(*self._of(entry_id, sink))
        ).scalar_one()
        status = DeliveryStatus.GAVE_UP if tries >= max_tries else DeliveryStatus.FAILED
        self._update(connection, entry_id, sink, status=status, last_error=error)
        return status, tries

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
