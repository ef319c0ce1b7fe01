"""`bench backfill`: the orders backfill through Dagster against a plain script, end to end.

Both read the same seeded landing files with `read_order_chunks`, in chunks of the same
size, into their own fresh `orders` table:

- Dagster: the `orders` asset materialized in this process on a Dagster instance of its
  own (SQLite storage under a temporary DAGSTER_HOME, as `dagster dev` has by default),
  all partitions in ONE run over the partition range (`--runs one`, the default; what a
  UI backfill of a single-run asset does), or one run per partition (`--runs
  per-partition`, what `orders-example demo` and a default UI backfill do, minus their
  process start-ups). Everything the framework does is timed: leases, attempt history,
  checkpoints, the upserts, the sweep, Dagster's event log.
- Plain script: the best one would write without the framework — a loop over days and
  chunks of the same reader, each chunk COPYed into a stage and merged with one `INSERT …
  ON CONFLICT DO UPDATE … WHERE … IS DISTINCT FROM` in its own transaction
  (`bench.baselines`, variant `PLAIN_VARIANT`); no Dagster, no framework. Off the clock,
  every variant's merge of the first chunk is EXPLAINed against the empty table and the
  loaded one (`plans`).

The backfill is then run again on the unchanged input, which the framework should turn
into (almost) no work: every chunk's checkpoint matches, so nothing is rewritten.

`via="daemon"` replaces the in-process Dagster side with the UI path (`daemon.py`): a
webserver and a daemon, the backfill launched with GraphQL `launchPartitionBackfill`.

Peak RSS is the high-water mark of this process during each phase (the kernel's VmHWM,
reset before each phase through /proc/self/clear_refs); under the daemon, of the run
workers and step processes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

from benchmarks import EXAMPLE_MODULE, baselines
from benchmarks.daemon import ASSETS as DAEMON_ASSETS
from benchmarks.daemon import run_daemon_bench
from benchmarks.database import (
    fresh_schema,
    new_row_versions,
    server_facts,
    snapshot_row_versions,
)
from benchmarks.run_config import chunk_rows_config
from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import DEFAULT_REPEATS, libpq_dsn
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables
from orders_example.orders.landing import landing_file, read_order_chunks
from orders_example.orders.seed import ORDER_ID_EPOCH, iter_days, seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

RUN_MODES = ("one", "per-partition")
KEY = ("order_id",)
# Every row of a backfill is new: the variants filtering unchanged rows only add work.
PLAIN_VARIANT = "on_conflict"
VIA = ("process", "daemon")
# What the UI's launchpad may set for the runs of a backfill (`execution:` run config of
# the framework's multi_or_in_process executor); "default" sets nothing, which since issue
# 13 forks step processes from a forkserver that preloaded the code location; "spawn" is
# Dagster's own default; "forkserver" as Dagster configures it (preloading only Dagster's
# executor module, so each step still imports the code location).
UI_EXECUTION: dict[str, dict | None] = {
    "default": None,
    "spawn": {"multiprocess": {"start_method": {"spawn": {}}}},
    "forkserver": {"multiprocess": {"start_method": {"forkserver": {}}}},
    "in_process": {"in_process": {}},
}


class BenchRunFailed(RuntimeError):
    """A Dagster run of the benchmark did not succeed, so its time means nothing."""


def run_backfill_bench(
    database_url: str,
    partitions: int,
    rows_per_partition: int,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    runs: str = "one",
    via: str = "process",
    execution: str = "default",
    rerun: bool = True,
    module: str | None = None,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = 1,
) -> dict:
    """Time both ways of loading the same days (JSON shape: docs/ARCHITECTURE.md, "Contracts").

    `module`: with `via="daemon"`, the code location the webserver and daemon load (its
    `orders` and `daily_revenue` backfills run); the in-process path materializes the
    example's `orders` asset itself and loads no location."""
    if partitions < 1 or rows_per_partition < 1 or chunk_rows < 1:
        raise ValueError("--partitions, --rows-per-partition and --chunk-rows must be >= 1")
    if runs not in RUN_MODES:
        raise ValueError(f"--runs must be one of {', '.join(RUN_MODES)}, got {runs!r}")
    if via not in VIA:
        raise ValueError(f"--via must be one of {', '.join(VIA)}, got {via!r}")
    if execution not in UI_EXECUTION:
        raise ValueError(f"--execution must be one of {', '.join(UI_EXECUTION)}")
    if module is not None and via != "daemon":
        raise ValueError("-m applies to --via daemon: --via process loads no code location")
    load_before = _load_average()
    last_day = ORDER_ID_EPOCH + dt.timedelta(days=partitions - 1)
    days = [day.isoformat() for day in iter_days(ORDER_ID_EPOCH, last_day)]
    expected_rows = partitions * rows_per_partition
    rss: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory(prefix="jp_bench_backfill_") as folder:
        landing = str(Path(folder) / "landing")
        seed_orders(landing, ORDER_ID_EPOCH, last_day, orders_per_day=rows_per_partition)

        if via == "daemon":
            with fresh_schema(database_url, "plain") as url:
                _reset_peak_rss()
                plain_seconds = _plain_script(url, landing, days, chunk_rows)
                rss["plain_script"] = _peak_rss_mib()
                expect_rows(url, expected_rows, "plain script")
            with fresh_schema(database_url, "daemon") as url:
                # What a deploy does before the first run, outside the timed part.
                warehouse = warehouse_engine(url)
                upgrade_warehouse(warehouse)
                create_user_tables(warehouse, orders_table, daily_revenue_table)
                run_config = _ui_run_config(module, chunk_rows, execution)
                ui = run_daemon_bench(
                    url, landing, Path(folder) / "daemon", days, run_config, rerun=rerun,
                    module=module or EXAMPLE_MODULE,
                )  # fmt: skip
                expect_rows(url, expected_rows, "UI-path backfill")
            figures = _daemon_figures(
                ui, plain_seconds, partitions, rows_per_partition, chunk_rows, rss,
                load_before, database_url,
            )  # fmt: skip
            figures["notes"]["execution"] = execution
            return figures

        methods = _ProcessPathRounds(
            database_url, landing, Path(folder), days, chunk_rows, runs, expected_rows
        )
        timed = alternated(
            {"plain_script": methods.plain, "dagster_backfill": methods.dagster}, repeats, warmup
        )
        with fresh_schema(database_url, "plans") as url:
            plans = _plain_plans(url, landing, days, chunk_rows, expected_rows)
    dagster_runs, plain_runs = timed["dagster_backfill"], timed["plain_script"]
    dagster_seconds = statistics.median(dagster_runs.seconds)
    plain_median = statistics.median(plain_runs.seconds)
    rerun_seconds = statistics.median(methods.rerun_seconds[-repeats:])
    for phase, peaks in methods.rss.items():
        rss[phase] = max(peaks)
    notes = {
        "partitions": partitions,
        "rows_per_partition": rows_per_partition,
        "chunk_rows": chunk_rows,
        "repeats": repeats,
        "dagster_runs": (
            "one in-process run over the partition range"
            if runs == "one"
            else f"{partitions} in-process runs, one per partition"
        ),
        "dagster_backfill": dagster_runs.figures(expected_rows),
        "plain_script": plain_runs.figures(expected_rows),
        "dagster_seconds_per_partition": round(dagster_seconds / partitions, 4),
        "plain_script_seconds_per_partition": round(plain_median / partitions, 4),
        "dagster_rerun_unchanged_seconds": round(rerun_seconds, 4),
        "dagster_rerun_unchanged_vs_first_run_time": round(rerun_seconds / dagster_seconds, 3),
        "dagster_rerun_unchanged_new_row_versions": max(methods.rewritten),
        "order": "alternated: a warm-up round, then rounds of the plain script and the "
        "Dagster backfill (with its unchanged re-run, untimed in the ratio), each in a fresh "
        "schema",
        "load_average_1m": {"before": load_before, "after": _load_average()},
        "server": server_facts(database_url),
    }
    return {
        "dagster_backfill_seconds": round(dagster_seconds, 4),
        "plain_script_seconds": round(plain_median, 4),
        # The median of the rounds' ratios (each round's two runs, side by side).
        "ratio": median_ratio(dagster_runs, plain_runs),
        "plans": plans,
        "notes": {**notes, "plain_script_variant": PLAIN_VARIANT, "peak_rss_mib": rss},
    }


class _ProcessPathRounds:
    """The two methods of the in-process comparison, each run in a fresh schema."""

    def __init__(
        self,
        database_url: str,
        landing: str,
        folder: Path,
        days: list[str],
        chunk_rows: int,
        runs: str,
        expected_rows: int,
    ):
        self.database_url, self.landing, self.folder = database_url, landing, folder
        self.days, self.chunk_rows, self.runs = days, chunk_rows, runs
        self.expected_rows = expected_rows
        self.rerun_seconds: list[float] = []
        self.rewritten: list[int] = []
        self.rss: dict[str, list[float]] = {"plain_script": [], "dagster_backfill": []}
        self._homes = 0

    def plain(self) -> float:
        with fresh_schema(self.database_url, "plain") as url:
            _reset_peak_rss()
            seconds = _plain_script(url, self.landing, self.days, self.chunk_rows)
            self.rss["plain_script"].append(_peak_rss_mib())
            expect_rows(url, self.expected_rows, "plain script")
        return seconds

    def dagster(self) -> float:
        self._homes += 1
        home = self.folder / f"dagster_home_{self._homes}"
        with (
            fresh_schema(self.database_url, "dagster") as url,
            _DagsterBackfill(url, self.landing, home, self.chunk_rows) as dagster,
        ):
            _reset_peak_rss()
            seconds = dagster.run(self.days, self.runs)
            self.rss["dagster_backfill"].append(_peak_rss_mib())
            expect_rows(url, self.expected_rows, "Dagster backfill")
            engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
            snapshot_row_versions(engine, "orders", "order_id")
            self.rerun_seconds.append(dagster.run(self.days, self.runs))
            self.rewritten.append(new_row_versions(engine, "orders", "order_id"))
            engine.dispose()
        return seconds


def _ui_run_config(module: str | None, chunk_rows: int, execution: str) -> dict | None:
    """The launchpad config a user would set; none when every default applies."""
    config: dict = {}
    if chunk_rows != DEFAULT_CHUNK_ROWS:
        config.update(chunk_rows_config(module, DAEMON_ASSETS, chunk_rows))
    if UI_EXECUTION[execution] is not None:
        config["execution"] = {"config": UI_EXECUTION[execution]}
    return config or None


def _daemon_figures(
    ui: dict,
    plain_seconds: float,
    partitions: int,
    rows_per_partition: int,
    chunk_rows: int,
    rss: dict,
    load_before: float,
    database_url: str,
) -> dict:
    first, rerun = ui["first"], ui["rerun"]
    framework = first["first_run_created_to_last_run_ended_seconds"]
    return {
        # The framework's part (first run created to last run ended) is what is compared
        # with the plain script; the daemon's 30 s tick is Dagster's, reported beside it.
        "dagster_backfill_seconds": framework,
        "plain_script_seconds": round(plain_seconds, 4),
        "ratio": round(framework / plain_seconds, 3),
        "via": "daemon",
        "end_to_end_seconds": first["end_to_end_seconds"],
        "ratio_end_to_end": round(first["end_to_end_seconds"] / plain_seconds, 3),
        "first_run_created_to_last_run_ended_seconds": framework,
        "wait_for_first_run_seconds": first["wait_for_first_run_seconds"],
        "launch_to_last_run_ended_seconds": first["launch_to_last_run_ended_seconds"],
        "runs_created": first["runs_created"],
        "idle_between_runs_seconds": first["idle_between_runs_seconds"],
        "run_created_to_started_median_seconds": first["run_created_to_started_median_seconds"],
        "run_started_to_ended_median_seconds": first["run_started_to_ended_median_seconds"],
        "rerun_unchanged": rerun
        and {
            **{name: value for name, value in rerun.items() if name != "backfill_id"},
            "new_row_versions": ui["rerun_new_row_versions"],
            "vs_first_run_time": round(
                rerun["first_run_created_to_last_run_ended_seconds"] / framework, 3
            ),
        },
        "peak_rss_mib": {**rss, **{f"daemon_{role}": mib for role, mib in ui["rss"].items()}},
        "notes": {
            "partitions": partitions,
            "rows_per_partition": rows_per_partition,
            "chunk_rows": chunk_rows,
            "dagster_runs": "UI path: webserver + daemon, GraphQL launchPartitionBackfill of "
            "orders and daily_revenue, runs as the backfill policy groups them",
            "backfill_id": first["backfill_id"],
            "order": "plain script first, then the UI-path backfill, then its unchanged re-run",
            "load_average_1m": {"before": load_before, "after": _load_average()},
            "server": server_facts(database_url),
        },
    }


def _load_average() -> float:
    return round(os.getloadavg()[0], 2)


def _reset_peak_rss() -> None:
    """Start a new high-water mark at the current RSS (Linux 4.0+; elsewhere a no-op)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_mib() -> float:
    """This process's peak RSS since `_reset_peak_rss`, in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _plain_script(
    url: str, landing: str, days: list[str], chunk_rows: int, *, create: bool = True
) -> float:
    """The best one would write without the framework: the same reader, then per chunk a
    COPY into a stage and one merging `INSERT … ON CONFLICT DO UPDATE … WHERE … IS
    DISTINCT FROM`, committed per chunk (`bench.baselines`)."""
    if create:
        engine = sa.create_engine(normalize_url(url))
        try:
            orders_table.create(engine)
        finally:
            engine.dispose()
    columns = [column.name for column in orders_table.columns]
    statements = baselines.merge_statements(orders_table.name, KEY, columns, PLAIN_VARIANT)
    with psycopg.connect(libpq_dsn(url)) as connection:
        began = time.perf_counter()
        for day in days:
            for chunk in read_order_chunks(landing_file(landing, day), day, chunk_rows):
                baselines.merge_chunk(connection, statements, KEY, chunk[columns])
        return time.perf_counter() - began


def _plain_plans(url: str, landing: str, days: list[str], chunk_rows: int, rows: int) -> dict:
    """Every variant's plan of the first chunk, into the empty table and the loaded one."""
    columns = [column.name for column in orders_table.columns]
    chunk = next(read_order_chunks(landing_file(landing, days[0]), days[0], chunk_rows))[columns]
    variants = baselines.every_variant(orders_table.name, KEY, columns)
    plans: dict[str, dict[str, str]] = {}
    for loaded in (False, True):
        # No day loads the empty table; every day loads it in full.
        _plain_script(url, landing, days if loaded else [], chunk_rows, create=not loaded)
        label = f"chunk_rows={len(chunk)},table_rows={rows if loaded else 0}"
        plans_now = baselines.merge_plans(libpq_dsn(url), variants, KEY, chunk, label)
        baselines.add_plans(plans, plans_now)
    expect_rows(url, rows, "plain script (plans)")
    return plans


class _DagsterBackfill:
    """The `orders` asset on a Dagster instance of its own, against the schema at `url`."""

    def __init__(self, url: str, landing: str, dagster_home: Path, chunk_rows: int):
        import dagster as dg

        from jobs_platform.orchestration.resources import JobsPlatformResource
        from orders_example.orders.assets import orders
        from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone

        dagster_home.mkdir(parents=True)
        (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        # What a deploy does before the first run, outside the timed part.
        warehouse = warehouse_engine(url)
        upgrade_warehouse(warehouse)
        create_user_tables(warehouse, orders_table)
        self._dg = dg
        self._asset = orders
        self._instance = dg.DagsterInstance.from_config(str(dagster_home))
        self._resources = {
            "jobs_platform": JobsPlatformResource(database_url=url),
            LANDING_RESOURCE_KEY: LandingZone(root=landing),
        }
        self._run_config = {
            "ops": {"orders": {"config": {"chunk_rows": chunk_rows}}},
            # The event log keeps every event; the terminal would only scroll.
            "loggers": {"console": {"config": {"log_level": "WARNING"}}},
        }

    def __enter__(self) -> _DagsterBackfill:
        return self

    def __exit__(self, *exc_info) -> None:
        self._instance.dispose()

    def run(self, days: list[str], runs: str) -> float:
        """Materialize every day; seconds from the first run's start to the last one's end."""
        batches: list[dict[str, Any]]
        if runs == "one":
            batches = [
                {"tags": {PARTITION_RANGE_START_TAG: days[0], PARTITION_RANGE_END_TAG: days[-1]}}
            ]
        else:
            batches = [{"partition_key": day} for day in days]
        began = time.perf_counter()
        for batch in batches:
            result = self._dg.materialize(
                [self._asset],
                instance=self._instance,
                resources=self._resources,
                run_config=self._run_config,
                raise_on_error=False,
                **batch,
            )
            if not result.success:
                raise BenchRunFailed(f"Dagster run {result.run_id} failed: {_failure(result)}")
        return time.perf_counter() - began


def _failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            return event.step_failure_data.error.message.strip()
    return "see its event log"


def expect_rows(url: str, expected: int, who: str, table: sa.Table = orders_table) -> int:
    """`who` left exactly `expected` rows in `table` (returned), or its time means nothing."""
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            stored = connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
    finally:
        engine.dispose()
    if stored != expected:
        raise BenchRunFailed(f"{who} left {stored} rows in {table.name}, expected {expected}")
    return stored
