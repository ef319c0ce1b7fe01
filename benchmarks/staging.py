"""`bench staging`: the ways psycopg offers to COPY a DataFrame into a stage, client side.

What the expert's plain script (`bench.baselines`) stages its chunks with is the fastest
of these on this machine, not a guess. Each way COPYs the same orders rows into an empty
temporary table, alternated run by run; the figures are wall seconds and this process's
CPU seconds (the formatting is client work; the server's share is the same for all).

- text_write_row     COPY … FROM STDIN, `copy.write_row` per row (psycopg formats text)
- binary_write_row   binary COPY with `set_types`, `write_row` of the frame's numpy values
- binary_python      binary COPY with `set_types`, `write_row` of Python values (`tolist`)
- csv_to_csv         `DataFrame.to_csv` into a buffer, one `copy.write` of CSV
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable

import psycopg

from benchmarks.baselines import copy_types
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
    types = copy_types(frame)
    cpu: dict[str, list[float]] = {}
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as connection:
        connection.execute(STAGE)

        def way(name: str, copy_in: Callable[[psycopg.Cursor], None]) -> Callable[[], float]:
            def run() -> float:
                connection.execute("TRUNCATE stage")
                began, began_cpu = time.perf_counter(), time.process_time()
                with connection.cursor() as cursor:
                    copy_in(cursor)
                cpu.setdefault(name, []).append(time.process_time() - began_cpu)
                return time.perf_counter() - began

            return run

        def text_write_row(cursor: psycopg.Cursor) -> None:
            with cursor.copy("COPY stage FROM STDIN") as copy:
                for row in frame.itertuples(index=False, name=None):
                    copy.write_row(row)

        def binary_write_row(cursor: psycopg.Cursor) -> None:
            with cursor.copy("COPY stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types)
                for row in frame.itertuples(index=False, name=None):
                    copy.write_row(row)

        def binary_python(cursor: psycopg.Cursor) -> None:
            columns = [frame[name].astype(object).tolist() for name in frame.columns]
            with cursor.copy("COPY stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types)
                for row in zip(*columns, strict=True):
                    copy.write_row(row)

        def csv_to_csv(cursor: psycopg.Cursor) -> None:
            buffer = io.StringIO()
            frame.to_csv(buffer, index=False, header=False)
            with cursor.copy("COPY stage FROM STDIN (FORMAT CSV)") as copy:
                copy.write(buffer.getvalue())

        ways = (text_write_row, binary_write_row, binary_python, csv_to_csv)
        runs = alternated({w.__name__: way(w.__name__, w) for w in ways}, repeats, warmup)
    results = {}
    for name, kept in runs.items():
        spent = cpu[name][-repeats:]  # the warm-up's CPU is not kept either
        results[name] = {**kept.figures(rows), "cpu_seconds": round(statistics.median(spent), 4)}
    return {"rows": rows, "repeats": repeats, "results": results}
