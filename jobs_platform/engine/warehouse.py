"""`Warehouse`: the store's objects and the features' (the dead letter's, the outbox's, the
alerts'), on one engine and one clock.

The store sits below the features' pure parts, so its `Store` cannot hold their objects.
The engine sits above them all: every entry point that writes a warehouse
(`PartitionRunner`, the resource, the CLI's `open_store`, each sensor) builds this one.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.alerts.deliveries import AlertLedger
from jobs_platform.dead_letter.entries import DeadLetter
from jobs_platform.dead_letter.redrive import Redrives
from jobs_platform.gate.reviews import ChangeReviews
from jobs_platform.outbox.queue import Outbox
from jobs_platform.steering.circuits import Circuits
from jobs_platform.steering.holds import Holds
from jobs_platform.steering.pauses import Pauses
from jobs_platform.store.clock import DATABASE_CLOCK, Clock
from jobs_platform.store.handle import Store
from jobs_platform.store.migrate import ready_warehouse


class Warehouse(Store):
    """A `Store` that also holds the dead letter's, the outbox's and the alerts' objects,
    on the same clock."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        super().__init__(engine, clock)
        self.dead_letter = DeadLetter(clock)
        self.redrives = Redrives(clock)
        self.outbox = Outbox(clock)
        self.alert_ledger = AlertLedger(clock)
        self.circuits = Circuits(clock)
        self.notice_ledger = AlertLedger.of_notices(clock)
        self.pauses = Pauses(clock)
        self.holds = Holds(clock)
        self.change_reviews = ChangeReviews(clock)


def ready_store(database_url: str | sa.URL) -> Warehouse:
    """The warehouse at `database_url`, ready (`store.migrate.ready_warehouse`), on the
    database's clock: what every entry point that is not a test writes through."""
    return Warehouse(ready_warehouse(database_url), DATABASE_CLOCK)
