"""`bench staging`: the ways psycopg offers to COPY a DataFrame into a stage, client side.

What the expert's plain script (`bench.baselines`) stages its chunks with is the fastest
of these on this machine (`stage_copy.FASTEST`), not a guess; the JSON names the fastest
way of the run (`fastest`). Each way (`bench.stage_copy`) COPYs the same orders rows
into an empty temporary table, alternated run by run. The figures are wall seconds and
this process's CPU seconds: the formatting is client work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import psycopg

from benchmarks import stage_copy
from benchmarks.timing import alternated
from benchmarks.upsert import DEFAULT_REPEATS, libpq_dsn, orders_frame

STAGE = (
    "CREATE TEMPORARY TABLE stage (order_id bigint, customer_id bigint, amount_cents "
    "bigint, currency text, status text, ordered_at timestamptz)"
)


def run_staging_bench(
    database_url: str, rows: int, repeats: int = DEFAULT_REPEATS, warmup: int = 1
) -> dict:
    if rows < 1:
        raise ValueError(f"--rows must be at least 1, got {rows}")
    frame = orders_frame(rows)
    into = stage_copy.target("stage", list(frame.columns))
    cpu: dict[str, list[float]] = {}
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as connection:
        connection.execute(STAGE)

        def timed(name: str, way: stage_copy.StageWay) -> Callable[[], float]:
            def run() -> float:
                connection.execute("TRUNCATE stage")
                began, began_cpu = time.perf_counter(), time.process_time()
                with connection.cursor() as cursor:
                    way(cursor, into, frame)
                cpu.setdefault(name, []).append(time.process_time() - began_cpu)
                return time.perf_counter() - began

            return run

        ways = {name: timed(name, way) for name, way in stage_copy.WAYS.items()}
        runs = alternated(ways, repeats, warmup)
        stored = connection.execute("SELECT count(*) FROM stage").fetchone()
    if stored != (rows,):
        raise AssertionError(f"the stage holds {stored} rows, expected {rows}")
    results = {}
    for name, kept in runs.items():
        spent = cpu[name][-repeats:]  # the warm-up's CPU is not kept either
        results[name] = {**kept.figures(rows), "cpu_seconds": round(statistics.median(spent), 4)}
    return {
        "rows": rows,
        "repeats": repeats,
        "fastest": min(results, key=lambda name: results[name]["seconds"]),
        "plain_script_stages_with": stage_copy.FASTEST,
        "results": results,
    }
