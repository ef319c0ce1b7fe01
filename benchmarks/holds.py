"""`bench holds`: one holds_sensor tick at 3 a.m. scale, on PostgreSQL.

A daily backfill of `held` days (2,000 by default) held back, in a fresh schema, its
partitions definition its own (`holds_definitions`), on an ephemeral Dagster instance.
Timed, one tick each:

- `resume`: every day held by a pause that was just lifted, but for every 15th of the
  month (done meanwhile, so the ranges break there): the runs requested, one per
  contiguous range of at most the policy's ten days;
- `again`: the next tick, no run found yet: the same requests under the same keys;
- `ready`: every day held as not ready and every file landed: the bounded check of
  `READINESS_CHECKS_PER_TICK` days, and the runs for those ready.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from benchmarks.database import fresh_schema
from jobs_platform import PartitionInput, backfill_asset, platform_definitions
from jobs_platform.steering.holds import HoldReason
from jobs_platform.steering.readiness import READINESS_CHECKS_PER_TICK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import backfill_holds

ASSET = "bench_landed"
FIRST_DAY = dt.date(2020, 1, 1)


def holds_definitions(landing: Path) -> dg.Definitions:
    """A daily backfill whose day is ready once its file is in `landing`."""
    table = sa.Table(
        "bench_landed",
        sa.MetaData(),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
    )

    def landed(source: PartitionInput) -> bool:
        return (landing / f"{source.partition_key}.csv").exists()

    @backfill_asset(
        table=table,
        partitions_def=dg.DailyPartitionsDefinition(start_date=FIRST_DAY.isoformat()),
        partition_scope=lambda t, p: t.c.day == dt.date.fromisoformat(p),
        ready=landed,
        backfill_policy=dg.BackfillPolicy.multi_run(10),
    )
    def bench_landed(source: PartitionInput):
        yield pd.DataFrame({"day": [dt.date.fromisoformat(source.partition_key)], "n": [1]})

    return platform_definitions([bench_landed])


def run_holds_bench(database_url: str, held: int = 2000) -> dict:
    days = [(FIRST_DAY + dt.timedelta(days=n)).isoformat() for n in range(held)]
    with fresh_schema(database_url, "holds") as url, tempfile.TemporaryDirectory() as folder:
        landing = Path(folder)
        engine = warehouse_engine(url)
        upgrade_warehouse(engine)
        saved = os.environ.get("JOBS_PLATFORM_DATABASE_URL")
        os.environ["JOBS_PLATFORM_DATABASE_URL"] = url
        try:
            defs = holds_definitions(landing)
            with dg.DagsterInstance.ephemeral() as instance:
                _hold(engine, days, HoldReason.PAUSED, skip_day=15)
                resume = _tick(defs, instance)
                again = _tick(defs, instance)
                _hold(engine, days, HoldReason.NOT_READY)
                for day in days:
                    (landing / f"{day}.csv").write_text("n\n1\n")
                ready = _tick(defs, instance)
        finally:
            if saved is None:
                os.environ.pop("JOBS_PLATFORM_DATABASE_URL", None)
            else:
                os.environ["JOBS_PLATFORM_DATABASE_URL"] = saved
            engine.dispose()
    return {
        "held": held,
        "results": {"resume": resume, "again": again, "ready": ready},
        "notes": {"checks_per_tick": READINESS_CHECKS_PER_TICK, "partitions_per_run": 10},
    }


def _hold(engine: sa.Engine, days: list[str], reason: HoldReason, skip_day: int = 0) -> None:
    now = dt.datetime.now(dt.UTC)
    rows = [
        {"asset": ASSET, "partition": day, "reason": reason.value, "since": now,
         "held_at": now, "run_id": "bench"}
        for day in days
        if not skip_day or int(day[-2:]) != skip_day
    ]  # fmt: skip
    with engine.begin() as connection:
        connection.execute(sa.delete(backfill_holds))
        connection.execute(sa.insert(backfill_holds), rows)


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict:
    context = dg.build_sensor_context(
        instance=instance, definitions=defs, resources=dict(defs.resources or {})
    )
    sensor = defs.resolve_sensor_def("holds_sensor")
    began = time.perf_counter()
    result = sensor.evaluate_tick(context)
    return {
        "seconds": round(time.perf_counter() - began, 3),
        "runs": len(result.run_requests or []),
    }
