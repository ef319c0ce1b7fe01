"""A warehouse builds each object that reads the time once, all on its one clock."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from jobs_platform.engine.warehouse import Warehouse
from jobs_platform_tests.clocks import ManualClock


def test_every_object_of_a_warehouse_reads_the_clock_it_was_given():
    engine = sa.create_engine("sqlite://")
    clock = ManualClock(dt.datetime(2001, 2, 3, tzinfo=dt.UTC))

    warehouse = Warehouse(engine, clock)

    objects = {
        name: value for name, value in vars(warehouse).items() if name not in ("engine", "clock")
    }
    assert set(objects) == {
        "attempts",
        "leases",
        "checkpoints",
        "partitions",
        "catalog",
        "health",
        "outbox_backlog",
        "recovery",
        "dead_letter",
        "redrives",
        "outbox",
        "alert_ledger",
        "notice_ledger",
        "circuits",
        "pauses",
        "holds",
        "change_reviews",
    }
    assert all(value.clock is clock for value in objects.values())
    assert warehouse.leases.engine is warehouse.catalog.engine is engine
