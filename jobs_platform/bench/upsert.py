"""`bench upsert`: the framework's upsert writer against the usual ways to load PostgreSQL.

One run, one deterministic DataFrame of orders (the example's six columns, built once
with numpy so that generating it costs nothing measurable), every method into its own
empty table of the orders shape (primary key and `ordered_at` index included):

- framework_upsert            `upsert_frame`, 50,000-row chunks, one transaction each
- framework_upsert_unchanged  the same chunks again; must write no new row versions
- best_plain_script           the baseline: per chunk, COPY into a stage and one merging
                              `INSERT … ON CONFLICT DO UPDATE … WHERE … IS DISTINCT FROM`
                              (`bench.baselines`, no code shared with the framework)
- best_plain_script_unchanged the same again over the loaded table
- copy_floor                  an independent psycopg COPY of text prepared beforehand:
                              the physical floor (only the COPY is timed)
- raw_copy_append             COPY of the framework's own COPY text (its cost of staging)
- pandas_to_sql_multi         `DataFrame.to_sql(method="multi")` append, on a sample
- executemany_upsert          SQLAlchemy executemany `INSERT … ON CONFLICT DO UPDATE`

Durability is left as the server has it (`synchronous_commit` untouched): every chunk's
commit waits for its WAL flush, in every method alike.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from jobs_platform.bench import baselines
from jobs_platform.bench.database import (
    fresh_schema,
    new_row_versions,
    server_facts,
    snapshot_row_versions,
)
from jobs_platform.examples.orders.tables import orders_table
from jobs_platform.store.copy_text import copy_text
from jobs_platform.store.db import normalize_url
from jobs_platform.store.upsert import UpsertCounts, upsert_frame

CHUNK_ROWS = 50_000  # like a backfill's chunk: one transaction per chunk
PANDAS_SAMPLE_ROWS = 100_000  # to_sql(method="multi") runs minutes on a million rows
# pandas sends `chunksize` rows per INSERT; 10,000 rows of 6 columns stays under PostgreSQL's
# 65,535 bind parameters per statement.
PANDAS_CHUNK_ROWS = 10_000
KEY = ("order_id",)

_FIRST_DAY_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
_DAY_US = 86_400_000_000
_CURRENCIES = np.array(["USD", "EUR", "GBP"], dtype=object)
_STATUSES = np.array(["paid", "paid", "paid", "refunded", "pending"], dtype=object)


def orders_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """`rows` orders shaped like `read_order_chunks` output, the same for the same seed."""
    rng = np.random.default_rng(seed)
    moments = _FIRST_DAY_US + np.sort(rng.integers(0, _DAY_US, rows))
    return pd.DataFrame(
        {
            "order_id": np.arange(1, rows + 1, dtype=np.int64),
            "customer_id": rng.integers(1, 5_001, rows),
            "amount_cents": rng.integers(0, 50_001, rows),
            "currency": _CURRENCIES[rng.integers(0, len(_CURRENCIES), rows)],
            "status": _STATUSES[rng.integers(0, len(_STATUSES), rows)],
            "ordered_at": pd.to_datetime(moments, unit="us", utc=True).as_unit("ns"),
        }
    )


def run_upsert_bench(
    database_url: str,
    rows: int,
    also: Callable[[sa.Engine, pd.DataFrame], dict] | None = None,
) -> dict:
    """Measure every method on `rows` rows (JSON shape: docs/ARCHITECTURE.md, "Contracts").

    `also(engine, frame)`, when given, measures more on the same rows and engine, under
    `notes.bad_rows` (the writer with refused rows: `bench.bad_rows`, by `--bad-every`).
    """
    if rows < 1:
        raise ValueError(f"--rows must be at least 1, got {rows}")
    frame = orders_frame(rows)
    sample_rows = min(rows, PANDAS_SAMPLE_ROWS)
    with fresh_schema(database_url, "upsert") as url:
        engine = sa.create_engine(normalize_url(url))
        try:
            results, checks = _measure_all(engine, frame, sample_rows)
            results.update(_measure_baselines(engine, libpq_dsn(url), frame))
            if also is not None:
                checks["bad_rows"] = also(engine, frame)
        finally:
            engine.dispose()
    framework = results["framework_upsert"]["rows_per_s"]
    notes = {
        "chunk_rows": CHUNK_ROWS,
        "pandas_to_sql_multi_sample_rows": sample_rows,
        "pandas_to_sql_multi_chunksize": PANDAS_CHUNK_ROWS,
        **checks,
        "framework_speed_relative_to": {
            name: round(framework / result["rows_per_s"], 3)
            for name, result in results.items()
            if name != "framework_upsert"
        },
        "server": server_facts(database_url),
    }
    return {"rows": rows, "results": results, "notes": notes}


def _measure_all(
    engine: sa.Engine, frame: pd.DataFrame, sample_rows: int
) -> tuple[dict[str, dict], dict]:
    rows = len(frame)
    results: dict[str, dict] = {}

    target = orders_shaped(engine, "bench_framework")
    seconds, counts = _timed(engine, lambda: framework_upsert(engine, target, frame))
    _expect(counts == UpsertCounts(inserted=rows), "framework_upsert", counts)
    results["framework_upsert"] = _result(rows, seconds)
    snapshot_row_versions(engine, target.name, KEY[0])
    seconds, counts = _timed(engine, lambda: framework_upsert(engine, target, frame))
    _expect(counts == UpsertCounts(unchanged=rows), "framework_upsert_unchanged", counts)
    results["framework_upsert_unchanged"] = _result(rows, seconds)
    checks = {
        "framework_upsert_unchanged_new_row_versions": new_row_versions(
            engine, target.name, KEY[0]
        ),
        "framework_upsert_unchanged_time_vs_first_run": round(
            results["framework_upsert_unchanged"]["seconds"]
            / results["framework_upsert"]["seconds"],
            3,
        ),
    }
    _drop_checked(engine, target, rows)

    methods = (
        ("raw_copy_append", _raw_copy_append, frame),
        ("pandas_to_sql_multi", _pandas_to_sql_multi, frame.head(sample_rows)),
        ("executemany_upsert", _executemany_upsert, frame),
    )
    for name, method, data in methods:
        target = orders_shaped(engine, f"bench_{name}")
        seconds, _ = _timed(engine, functools.partial(method, engine, target, data))
        results[name] = _result(len(data), seconds)
        _drop_checked(engine, target, len(data))
    return results, checks


def _measure_baselines(engine: sa.Engine, dsn: str, frame: pd.DataFrame) -> dict[str, dict]:
    rows, results = len(frame), {}
    target = orders_shaped(engine, "bench_best_plain_script")
    checkpoint(engine)
    results["best_plain_script"] = _result(
        rows, baselines.best_plain_script(dsn, target.name, KEY, frame, CHUNK_ROWS)
    )
    checkpoint(engine)
    results["best_plain_script_unchanged"] = _result(
        rows, baselines.best_plain_script(dsn, target.name, KEY, frame, CHUNK_ROWS)
    )
    _drop_checked(engine, target, rows)
    target = orders_shaped(engine, "bench_copy_floor")
    texts = baselines.prepared_copy_text(frame, CHUNK_ROWS)
    checkpoint(engine)
    results["copy_floor"] = _result(
        rows, baselines.copy_floor(dsn, target.name, list(frame.columns), texts)
    )
    _drop_checked(engine, target, rows)
    return results


def libpq_dsn(url: str) -> str:
    """A SQLAlchemy URL as psycopg connects to it (driver name dropped, options kept)."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def chunks(frame: pd.DataFrame) -> Iterator[pd.DataFrame]:
    for start in range(0, len(frame), CHUNK_ROWS):
        yield frame.iloc[start : start + CHUNK_ROWS]


def framework_upsert(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame) -> UpsertCounts:
    """The framework's writer over `frame`, one transaction per chunk."""
    counts = UpsertCounts()
    for chunk in chunks(frame):
        with engine.begin() as connection:
            counts += upsert_frame(connection, table, KEY, chunk)
    return counts


def _raw_copy_append(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame) -> None:
    # The same column-wise COPY text the framework sends, straight into the table: the
    # framework's time above this is its own work (the key probe and savepoint of new
    # rows; the stage and the merge when keys exist).
    columns = list(frame.columns)
    types = [table.c[name].type for name in columns]
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
    for chunk in chunks(frame):
        with engine.begin() as connection:
            text = copy_text(chunk, types, connection.dialect)
            if text is None:
                raise AssertionError("the bench frame must take the column-wise COPY path")
            driver = connection.connection.driver_connection
            if driver is None:
                raise AssertionError("the bench connection has no psycopg connection")
            cursor = driver.cursor()
            with cursor, cursor.copy(statement) as copy:
                copy.write(text)


def _pandas_to_sql_multi(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame) -> None:
    frame.to_sql(
        table.name,
        engine,
        if_exists="append",
        index=False,
        method="multi",
        chunksize=PANDAS_CHUNK_ROWS,
    )


def _executemany_upsert(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame) -> None:
    insert = postgresql.insert(table)
    statement = insert.on_conflict_do_update(
        index_elements=list(KEY),
        set_={c.name: insert.excluded[c.name] for c in table.columns if c.name not in KEY},
    )
    for chunk in chunks(frame):
        with engine.begin() as connection:
            connection.execute(statement, cast("list[dict[str, Any]]", chunk.to_dict("records")))


def _timed(engine: sa.Engine, work: Callable[[], object]) -> tuple[float, object]:
    checkpoint(engine)
    began = time.perf_counter()
    outcome = work()
    return time.perf_counter() - began, outcome


def checkpoint(engine: sa.Engine) -> None:
    """Flush the previous method's dirty pages now, so that it is not charged to the next."""
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(sa.text("CHECKPOINT"))
    except sa.exc.DBAPIError:
        pass  # CHECKPOINT needs superuser or pg_checkpoint; the figures just get noisier


def _result(rows: int, seconds: float) -> dict:
    return {"seconds": round(seconds, 4), "rows_per_s": round(rows / seconds, 1)}


def orders_shaped(engine: sa.Engine, name: str, *, checked: bool = False) -> sa.Table:
    """An empty table of the orders shape; `checked`: refusing a negative `amount_cents`."""
    table = orders_table.to_metadata(sa.MetaData(), name=name)
    if checked:
        table.append_constraint(sa.CheckConstraint("amount_cents >= 0", name=f"ck_{name}"))
    for index in table.indexes:
        columns = "_".join(column.name for column in index.columns)
        index.name = sa.quoted_name(f"ix_{name}_{columns}", quote=None)
    table.create(engine)
    return table


def _drop_checked(engine: sa.Engine, table: sa.Table, rows: int) -> None:
    """Drop a method's table once it is seen to hold every row it was given."""
    with engine.connect() as connection:
        stored = connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
    if stored != rows:
        raise AssertionError(f"{table.name} holds {stored} rows, expected {rows}")
    table.drop(engine)


def _expect(condition: bool, method: str, counts: object) -> None:
    if not condition:
        raise AssertionError(f"{method}: unexpected upsert counts {counts}")
