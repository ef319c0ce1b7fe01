"""`bench gate --rows N`: what the change gate costs, against the direct path.

One partition of N orders-shaped rows through `PartitionRunner` (plain Python, no
Dagster), chunk by chunk as a backfill writes it, twice per round, alternated:
direct (no `expect=`) and gated (`expect=ChangeContract(max_updated_fraction=0.05)`:
staged, diffed, then published). Two situations, each timed on its own:
- `load`: the partition is empty (the direct path's COPY fast path; the gate stages,
  then merges into the table);
- `update`: the partition holds the rows and the input changes 2 % of them, spread over
  every chunk (each path rewrites every chunk; the gate diffs before publishing).
The set-up (emptying the table, loading it for `update`) stays off the clock.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pandas as pd
import sqlalchemy as sa

from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import orders_frame
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import UtcDateTime

CHUNK_ROWS = 10_000
CHANGED = 0.02
CONTRACT = ChangeContract(max_updated_fraction=0.05)
PARTITION = "2024-01-01"


def gate_table() -> sa.Table:
    return sa.Table(
        "bench_gate_orders",
        sa.MetaData(),
        sa.Column("order_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("customer_id", sa.BigInteger, nullable=False),
        sa.Column("amount_cents", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("ordered_at", UtcDateTime, nullable=False),
        sa.Column("day", sa.Text, nullable=False),
    )


class _Input:
    """The frame the reader hands out in chunks; swapped between situations."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def read_chunks(self, source: PartitionInput):
        for start in range(0, len(self.frame), source.chunk_rows):
            yield self.frame.iloc[start : start + source.chunk_rows]


def run_gate_bench(database_url: str, rows: int, repeats: int, warmup: int) -> dict[str, Any]:
    engine = warehouse_engine(database_url)
    upgrade_warehouse(engine)
    table = gate_table()
    table.drop(engine, checkfirst=True)
    table.create(engine)
    frame = orders_frame(rows).assign(day=PARTITION)
    changed = frame.copy()
    every = round(1 / CHANGED)
    changed.loc[changed.index[::every], "amount_cents"] += 1
    source = _Input(frame)
    settings = Settings(database_url=database_url, landing_root=".", lease_seconds=300)
    runners = {
        name: PartitionRunner(
            BackfillSpec(
                asset=f"bench_gate_{name}",
                table=table,
                key=("order_id",),
                read_chunks=source.read_chunks,
                partition_scope=lambda t, p: t.c.day == p,
                expect=expect,
            ),
            settings,
        )
        for name, expect in (("direct", None), ("gated", CONTRACT))
    }
    rounds = iter(range(1_000_000))

    def timed(name: str, situation: str) -> float:
        runner = runners[name]
        with engine.begin() as connection:
            connection.execute(sa.delete(table))
        # A fresh partition key each run: no checkpoint or done record to skip by.
        partition = f"{PARTITION}#{next(rounds)}"
        if situation == "update":
            source.frame = frame.assign(day=partition)
            _done(runner.attempt(partition, Attempter(run_id="setup"), CHUNK_ROWS))
            source.frame = changed.assign(day=partition)
        else:
            source.frame = frame.assign(day=partition)
        began = time.perf_counter()
        _done(runner.attempt(partition, Attempter(run_id="timed"), CHUNK_ROWS))
        return time.perf_counter() - began

    results: dict[str, Any] = {}
    for situation in ("load", "update"):
        runs = alternated(
            {name: functools.partial(timed, name, situation) for name in runners},
            repeats,
            warmup,
        )
        results[situation] = {
            **{name: kept.figures(rows) for name, kept in runs.items()},
            "gated_vs_direct_time": median_ratio(runs["gated"], runs["direct"]),
        }
    table.drop(engine)
    return {
        "rows": rows,
        "results": results,
        "notes": {
            "chunk_rows": CHUNK_ROWS,
            "repeats": repeats,
            "changed_fraction_in_update": CHANGED,
            "contract": CONTRACT.describe(),
        },
    }


def _done(outcome: object) -> PartitionReport:
    if not isinstance(outcome, PartitionReport):
        raise AssertionError(f"the bench's attempt did not finish: {outcome!r}")
    return outcome


def show_gate(figures: dict[str, Any]) -> None:
    notes = figures["notes"]
    print(
        f"\n{figures['rows']:,} rows in one partition, chunks of {notes['chunk_rows']:,}; "
        f"median (min - max) of {notes['repeats']} alternated runs after a warm-up\n"
    )
    for situation, result in figures["results"].items():
        print(f"  {situation}")
        for name in ("direct", "gated"):
            run = result[name]
            print(
                f"    {name:<7} {run['seconds']:>8.2f} s  ({run['min_seconds']:.2f} - "
                f"{run['max_seconds']:.2f})  {run['rows_per_s']:>11,.0f} rows/s"
            )
        print(f"    gated / direct: {result['gated_vs_direct_time']}x")
