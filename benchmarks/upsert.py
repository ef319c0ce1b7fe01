"""`bench upsert`: the framework's upsert writer against the usual ways to load PostgreSQL.

One deterministic DataFrame of orders (the example's six columns, built once with numpy so
that generating it costs nothing measurable). Every method runs `--repeats` times after a
warm-up round, alternated (round by round, each method once: drift hits all alike), each
run into a new empty table of the orders shape (primary key and `ordered_at` index
included), a CHECKPOINT before each so no run pays for the previous one's dirty pages:

- framework_upsert             `upsert_frame`, 50,000-row chunks, one transaction each
- framework_upsert_unchanged   the same chunks again; must write no new row version
- copy_floor_server_binary     the server COPYs binary files written before the clock
                               starts, one transaction per chunk: the physical floor, in
                               the format the framework's writer sends (`bench.floors`)
- copy_floor_server            the same from text files
- copy_floor                   psycopg COPY … FROM STDIN of text prepared before the clock
- plain_script_<variant>       the expert's script (`bench.baselines.plain_script`, no
                               code shared with the framework): per chunk a stage filled
                               the fastest way (`bench staging`), then one of
                               `baselines.PLAIN_VARIANTS`;
  plain_script_<variant>_unchanged  the same again over the loaded table
- best_plain_script(_unchanged) the variant with the lowest median (named in `variant`)
- raw_copy_append              COPY of the framework's own COPY text (its cost of staging)
- pandas_to_sql_multi          `DataFrame.to_sql(method="multi")` append, on a sample
- executemany_upsert           SQLAlchemy executemany `INSERT … ON CONFLICT DO UPDATE`,
                               on a sample

Off the clock, each variant's merge is EXPLAINed on the first chunk, against the empty
table and the loaded one (`plans`).

Each figure is the median run with its min and max and every run's seconds; a ratio is
the median of the ratios of the runs pair by pair (`bench.timing`). Durability is left as
the server has it (`synchronous_commit` untouched): every chunk's commit waits for its WAL
flush, in every method alike.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from benchmarks import baselines, floors
from benchmarks.database import (
    fresh_schema,
    new_row_versions,
    server_facts,
    snapshot_row_versions,
)
from benchmarks.timing import Runs, alternated, median_ratio
from jobs_platform.store.db import normalize_url
from jobs_platform.writer.copy_text import copy_text
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame
from orders_example.orders.tables import orders_table

CHUNK_ROWS = 50_000  # like a backfill's chunk: one transaction per chunk
DEFAULT_REPEATS = 5
# pandas' to_sql(method="multi") and executemany take minutes on a million rows.
SAMPLE_ROWS = 100_000
# pandas sends `chunksize` rows per INSERT; 10,000 rows of 6 columns stays under PostgreSQL's
# 65,535 bind parameters per statement.
PANDAS_CHUNK_ROWS = 10_000
KEY = ("order_id",)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", None, ""}

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
    repeats: int = DEFAULT_REPEATS,
    warmup: int = 1,
) -> dict:
    """Measure every method on `rows` rows (JSON shape: docs/ARCHITECTURE.md, "Contracts").

    `also(engine, frame)`, when given, measures more on the same rows and engine, under
    `notes.bad_rows` (the writer with rejected rows: `bench.bad_rows`, by `--bad-every`).
    """
    if rows < 1:
        raise ValueError(f"--rows must be at least 1, got {rows}")
    frame = orders_frame(rows)
    sample = frame.head(min(rows, SAMPLE_ROWS))
    with fresh_schema(database_url, "upsert") as url, tempfile.TemporaryDirectory() as folder:
        engine = sa.create_engine(normalize_url(url))
        try:
            methods = UpsertMethods(engine, libpq_dsn(url), frame, sample, Path(folder))
            runs = alternated(methods.all(), repeats, warmup)
            checks = methods.checks
            plans = methods.plans()
            if also is not None:
                checks["bad_rows"] = also(engine, frame)
        finally:
            engine.dispose()
    sizes = {"pandas_to_sql_multi": len(sample), "executemany_upsert": len(sample)}
    results = {name: kept.figures(sizes.get(name, rows)) for name, kept in runs.items()}
    for kind in ("", "_unchanged"):
        best = min(
            (v for v in baselines.PLAIN_VARIANTS if f"plain_script_{v}{kind}" in results),
            key=lambda v: results[f"plain_script_{v}{kind}"]["seconds"],
        )
        results[f"best_plain_script{kind}"] = {
            **results[f"plain_script_{best}{kind}"],
            "variant": best,
        }
        runs[f"best_plain_script{kind}"] = runs[f"plain_script_{best}{kind}"]
    notes = {
        "chunk_rows": CHUNK_ROWS,
        "repeats": repeats,
        "sample_rows": len(sample),
        "pandas_to_sql_multi_sample_rows": len(sample),
        "pandas_to_sql_multi_chunksize": PANDAS_CHUNK_ROWS,
        **checks,
        "framework_upsert_unchanged_time_vs_first_run": median_ratio(
            runs["framework_upsert_unchanged"], runs["framework_upsert"]
        ),
        # Framework speed / the method's speed, run by run (rows/s: samples differ).
        "framework_speed_relative_to": {
            name: _speed_ratio(runs, name, rows, sizes.get(name, rows))
            for name in runs
            if name not in ("framework_upsert", "framework_upsert_unchanged")
        }
        | {
            "framework_upsert_unchanged": median_ratio(
                runs["framework_upsert_unchanged"], runs["framework_upsert"]
            )
        },
        "unchanged_speed_relative_to_best_plain_script_unchanged": median_ratio(
            runs["best_plain_script_unchanged"], runs["framework_upsert_unchanged"]
        ),
        "server": server_facts(database_url),
    }
    return {"rows": rows, "results": results, "plans": plans, "notes": notes}


def _speed_ratio(runs: dict[str, Runs], name: str, rows: int, other_rows: int) -> float:
    framework = runs["framework_upsert"]
    other = Runs([s * rows / other_rows for s in runs[name].seconds])
    return median_ratio(other, framework)


class UpsertMethods:
    """Each method as a callable that sets up its table, times itself and checks its rows."""

    def __init__(
        self, engine: sa.Engine, dsn: str, frame: pd.DataFrame, sample: pd.DataFrame, folder: Path
    ):
        self.engine, self.dsn, self.frame, self.sample = engine, dsn, frame, sample
        self.rows = len(frame)
        self.columns = list(frame.columns)
        self.texts = floors.prepared_copy_text(frame, CHUNK_ROWS)
        folder.chmod(0o755)  # the server's own user reads the floor's files
        self.files = floors.write_copy_files(self.texts, folder / "floor")
        self.server_reads_files = _server_is_local(engine)
        self.checks: dict = {}
        self._loaded: dict[str, sa.Table] = {}
        self._tables = 0
        shape = self._table("binary_files")
        self.binary_files = floors.write_binary_copy_files(
            dsn, shape.name, self.columns, self.texts, folder / "binary_floor"
        )
        shape.drop(engine)

    def plans(self) -> dict[str, dict[str, str]]:
        """Each variant's plan of the first chunk, into the empty table and the loaded one."""
        target = self._table("plans")
        chunk = self.frame.head(CHUNK_ROWS)
        variants = baselines.every_variant(target.name, KEY, self.columns)
        plans: dict[str, dict[str, str]] = {}
        for table_rows in (0, self.rows):
            if table_rows:
                baselines.plain_script(self.dsn, target.name, KEY, self.frame, CHUNK_ROWS)
            label = f"chunk_rows={len(chunk)},table_rows={table_rows}"
            baselines.add_plans(plans, baselines.merge_plans(self.dsn, variants, KEY, chunk, label))
        target.drop(self.engine)
        return plans

    def all(self) -> dict[str, Callable[[], float | None]]:
        methods: dict[str, Callable[[], float | None]] = {
            "framework_upsert": self.framework_new,
            "framework_upsert_unchanged": self.framework_unchanged,
            "copy_floor_server_binary": functools.partial(self.server_floor, binary=True),
            "copy_floor_server": self.server_floor,
            "copy_floor": self.client_floor,
        }
        for variant in baselines.PLAIN_VARIANTS:
            methods[f"plain_script_{variant}"] = functools.partial(self.plain_new, variant)
            methods[f"plain_script_{variant}_unchanged"] = functools.partial(
                self.plain_again, variant
            )
        methods |= {
            "raw_copy_append": self.raw_copy_append,
            "pandas_to_sql_multi": self.pandas_to_sql_multi,
            "executemany_upsert": self.executemany_upsert,
        }
        return methods

    def _table(self, name: str) -> sa.Table:
        self._tables += 1
        return orders_shaped(self.engine, f"bench_{name}_{self._tables}")

    def _timed(self, work: Callable[[], object]) -> tuple[float, object]:
        return timed(self.engine, work)

    def framework_new(self) -> float:
        target = self._table("framework")
        seconds, counts = self._timed(lambda: framework_upsert(self.engine, target, self.frame))
        _expect(counts == UpsertCounts(inserted=self.rows), "framework_upsert", counts)
        self._loaded["framework"] = target
        return seconds

    def framework_unchanged(self) -> float:
        target = self._loaded.pop("framework")
        first = "framework_upsert_unchanged_new_row_versions" not in self.checks
        if first:
            snapshot_row_versions(self.engine, target.name, KEY[0])
        seconds, counts = self._timed(lambda: framework_upsert(self.engine, target, self.frame))
        _expect(counts == UpsertCounts(unchanged=self.rows), "framework_upsert_unchanged", counts)
        if first:
            self.checks["framework_upsert_unchanged_new_row_versions"] = new_row_versions(
                self.engine, target.name, KEY[0]
            )
        _drop_checked(self.engine, target, self.rows)
        return seconds

    def server_floor(self, binary: bool = False) -> float | None:
        if not self.server_reads_files:
            self.checks["copy_floor_server"] = "not measured: the server is not on this host"
            return None
        target = self._table("server_floor")
        checkpoint(self.engine)
        files = self.binary_files if binary else self.files
        try:
            seconds = floors.server_copy_floor(
                self.dsn, target.name, self.columns, files, binary=binary
            )
        except Exception as error:  # a server that cannot read the files: say so, go on
            self.checks["copy_floor_server"] = f"not measured: {error}".splitlines()[0]
            self.server_reads_files = False
            target.drop(self.engine)
            return None
        _drop_checked(self.engine, target, self.rows)
        return seconds

    def client_floor(self) -> float:
        target = self._table("client_floor")
        checkpoint(self.engine)
        seconds = floors.copy_floor(self.dsn, target.name, self.columns, self.texts)
        _drop_checked(self.engine, target, self.rows)
        return seconds

    def plain_new(self, variant: str) -> float:
        target = self._table(f"plain_{variant}")
        checkpoint(self.engine)
        seconds = baselines.plain_script(
            self.dsn, target.name, KEY, self.frame, CHUNK_ROWS, variant
        )
        self._loaded[variant] = target
        return seconds

    def plain_again(self, variant: str) -> float:
        target = self._loaded.pop(variant)
        checkpoint(self.engine)
        seconds = baselines.plain_script(
            self.dsn, target.name, KEY, self.frame, CHUNK_ROWS, variant
        )
        _drop_checked(self.engine, target, self.rows)
        return seconds

    def raw_copy_append(self) -> float:
        target = self._table("raw_copy_append")
        seconds, _ = self._timed(lambda: _raw_copy_append(self.engine, target, self.frame))
        _drop_checked(self.engine, target, self.rows)
        return seconds

    def pandas_to_sql_multi(self) -> float:
        target = self._table("pandas_to_sql_multi")
        seconds, _ = self._timed(lambda: _pandas_to_sql_multi(self.engine, target, self.sample))
        _drop_checked(self.engine, target, len(self.sample))
        return seconds

    def executemany_upsert(self) -> float:
        target = self._table("executemany_upsert")
        seconds, _ = self._timed(lambda: _executemany_upsert(self.engine, target, self.sample))
        _drop_checked(self.engine, target, len(self.sample))
        return seconds


def _server_is_local(engine: sa.Engine) -> bool:
    """Whether the server shares this host's files (a server elsewhere cannot read them)."""
    return engine.url.host in LOCAL_HOSTS


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


def timed(engine: sa.Engine, work: Callable[[], object]) -> tuple[float, object]:
    """`work`'s wall seconds and what it returned, after a CHECKPOINT."""
    checkpoint(engine)
    began = time.perf_counter()
    outcome = work()
    return time.perf_counter() - began, outcome


def rate(rows: int, seconds: float) -> dict:
    return {"seconds": round(seconds, 4), "rows_per_s": round(rows / seconds, 1)}


def checkpoint(engine: sa.Engine) -> None:
    """Flush the previous method's dirty pages now, so that it is not charged to the next."""
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(sa.text("CHECKPOINT"))
    except sa.exc.DBAPIError:
        pass  # CHECKPOINT needs superuser or pg_checkpoint; the figures just get noisier


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
