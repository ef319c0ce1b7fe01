"""`bench backfill --shape hourly`: a year of hourly partitions of small rows, UI path.

The shape issue 26 asks for: `hourly_events` (`hourly_location`) from 2025-01-01-00:00,
P hours of R small event rows each (8,760 x 20 for a year), its landing input seeded by
streaming (`hourly_events.seed_events`: one pass, one buffered write per file).

- Plain scripts, what an expert writes without the framework: read the same files with
  the same reader (`read_hour_rows`, each line validated; no DataFrame: the script needs
  none), COPY the rows (binary) into a temporary stage and merge it with one `INSERT …
  ON CONFLICT DO UPDATE … WHERE … IS DISTINCT FROM`, one transaction per batch. Three
  batches (`PLAIN_BATCHES`): an hour (a transaction per partition, as the framework
  commits), a day (24 hours) and the whole range (one transaction). Alternated, each run
  in a fresh schema; the best by median is what the framework is compared with.
- The framework through the UI path (`hourly_ui`): a webserver and a daemon
  (`daemon.DagsterStack`) loading `hourly_location` with the backfill policy named
  (`single_run` or `multi_run:N`), the backfill launched with GraphQL
  `launchPartitionBackfill` as the UI does. Its timeline: launch → first run created
  (the backfill daemon's tick), first run created → last run ended (the run window,
  compared with the plain script), launch → backfill complete; and where the run window
  goes, from the runs' event logs (`run_breakdown`): the run queue, the run worker's
  start, the step process's start, the step's partitions, and Dagster's events per
  partition.
- The Dagster floor, alternated with it round by round: the same partitions and policy
  launched the same way, of a plain Dagster asset with nothing of the framework
  (`hourly_floor_location`: the plain script's per-hour statements in an asset). Its run
  window is Dagster's own cost; the framework's minus it is the framework's.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

import psycopg
import sqlalchemy as sa

from benchmarks.backfill import BenchRunFailed, _load_average, expect_rows
from benchmarks.database import fresh_schema, server_facts
from benchmarks.hourly_events import events_table, hour_keys, seed_events
from benchmarks.hourly_partitions import backfill_policy
from benchmarks.hourly_plain import load_hours, plain_plans, plain_statements
from benchmarks.hourly_ui import (
    DAGSTER_STORAGES,
    UiPath,
    dagster_storage_yaml,
    framework_against_floor,
)
from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import libpq_dsn
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables

DEFAULT_POLICIES = ("single_run",)
# The plain script's batches: hours per transaction (None: the whole range in one).
PLAIN_BATCHES: dict[str, int | None] = {"per_hour": 1, "per_day": 24, "whole_range": None}


def run_hourly_bench(
    database_url: str,
    partitions: int,
    rows_per_partition: int,
    *,
    policies: tuple[str, ...] = DEFAULT_POLICIES,
    via: str = "daemon",
    chunk_rows: int | None = None,
    rerun: bool = False,
    repeats: int = 3,
    warmup: int = 1,
    profile: Path | None = None,
    dagster_storage: str = "postgres",
) -> dict:
    """The plain scripts alternated, then per policy the UI-path backfill alternated with
    the Dagster floor's (`hourly_ui.framework_against_floor`), as JSON figures.

    `via="process"`: instead of the UI path, one in-process run over the range (the
    single-run step without the daemon and the processes), under cProfile with `profile`
    (the stats file written there).

    `dagster_storage`: the Dagster instance's storage, `postgres` (a scratch database on
    the bench's server: what a deployment uses, docs/deploying.md) or `sqlite` (what
    `dagster dev` and the daily bench use). On SQLite Dagster writes one
    ASSET_MATERIALIZATION_PLANNED event per partition of a run, one transaction each,
    before the run starts; on PostgreSQL one per run (its partitions as a subset)."""
    if partitions < 1 or rows_per_partition < 1:
        raise ValueError("--partitions and --rows-per-partition must be >= 1")
    for policy in policies:
        backfill_policy(policy)  # a misspelt policy fails before anything is seeded
    load_before = _load_average()
    keys = hour_keys(partitions)
    expected = partitions * rows_per_partition
    if dagster_storage not in DAGSTER_STORAGES:
        raise ValueError(f"--dagster-storage must be one of {', '.join(DAGSTER_STORAGES)}")
    with tempfile.TemporaryDirectory(prefix="jp_bench_hourly_") as folder:
        return _measure(
            database_url, partitions, rows_per_partition, keys, expected, Path(folder),
            policies, via, chunk_rows, rerun, repeats, warmup, profile, dagster_storage,
            load_before,
        )  # fmt: skip


def _measure(
    database_url: str,
    partitions: int,
    rows_per_partition: int,
    keys: list[str],
    expected: int,
    folder: Path,
    policies: tuple[str, ...],
    via: str,
    chunk_rows: int | None,
    rerun: bool,
    repeats: int,
    warmup: int,
    profile: Path | None,
    dagster_storage: str,
    load_before: float,
) -> dict:
    run_config = {"ops": {"hourly_events": {"config": {"chunk_rows": chunk_rows}}}}
    landing = str(Path(folder) / "landing")
    began = time.perf_counter()
    seeded_bytes = seed_events(landing, partitions, rows_per_partition)
    seed_seconds = time.perf_counter() - began

    def plain(batch: int | None):
        def method() -> float:
            with fresh_schema(database_url, "plain") as url:
                seconds = plain_script(url, landing, keys, batch)
                expect_rows(url, expected, "plain script", events_table)
            return seconds

        return method

    timed = alternated(
        {name: plain(batch) for name, batch in PLAIN_BATCHES.items()}, repeats, warmup
    )
    plain_figures = {name: runs.figures(expected) for name, runs in timed.items()}
    best = min(plain_figures, key=lambda name: plain_figures[name]["seconds"])
    best_seconds = plain_figures[best]["seconds"]
    with fresh_schema(database_url, "plans") as url:
        _create_events_table(url)
        batches = {name: keys[: batch or len(keys)] for name, batch in PLAIN_BATCHES.items()}
        plans = plain_plans(libpq_dsn(url), landing, batches, expected)

    ui: dict[str, dict] = {}
    in_process = None
    if via == "process":
        with (
            fresh_schema(database_url, "process") as url,
            dagster_storage_yaml(database_url, dagster_storage) as storage_yaml,
        ):
            in_process = in_process_backfill(
                url, landing, keys, Path(folder) / "dagster_home", chunk_rows, profile,
                storage_yaml,
            )  # fmt: skip
            expect_rows(url, expected, "in-process backfill", events_table)
        in_process["ratio"] = round(in_process["seconds"] / best_seconds, 3)
        in_process["ratio_to_per_hour_plain_script"] = round(
            in_process["seconds"] / plain_figures["per_hour"]["seconds"], 3
        )
        policies = ()
    path = UiPath(
        database_url, landing, keys, folder, dagster_storage, run_config if chunk_rows else None
    )
    plain_seconds = {"best": best_seconds, "per_hour": plain_figures["per_hour"]["seconds"]}
    for policy in policies:
        ui[policy] = framework_against_floor(
            path, policy, expected, plain_seconds, repeats=repeats, warmup=warmup, rerun=rerun
        )
    return {
        "shape": "hourly",
        "partitions": partitions,
        "rows_per_partition": rows_per_partition,
        "rows": expected,
        "seed": {
            "seconds": round(seed_seconds, 3),
            "bytes": seeded_bytes,
            "files": partitions,
            "vs_best_plain_script": round(seed_seconds / best_seconds, 3),
        },
        "plain_script": {
            **plain_figures,
            "best": best,
            "pairwise_ratio_to_per_hour": {
                name: median_ratio(timed[name], timed["per_hour"]) for name in timed
            },
        },
        "plain_script_plans": plans,
        "ui": ui,
        "in_process": in_process,
        "notes": {
            "dagster_storage": dagster_storage,
            "chunk_rows": chunk_rows or "the backfill's default",
            "repeats": repeats,
            "order": "seed, then the plain scripts alternated (each run in a fresh schema), "
            "then per policy the framework's UI-path backfill and the Dagster floor's "
            "alternated, each on a fresh schema and instance",
            "load_average_1m": {"before": load_before, "after": _load_average()},
            "server": server_facts(database_url),
        },
    }


def plain_script(url: str, landing: str, keys: list[str], batch_hours: int | None) -> float:
    """Seconds to load every hour's file: per batch of hours, the rows COPYed (binary) into
    a temporary stage and merged with one INSERT … ON CONFLICT, in one transaction
    (`hourly_plain.load_hours`).

    The reader is the framework's reader's own (`read_hour_rows`, each line validated).
    The table is created before the clock starts."""
    _create_events_table(url)
    statements = plain_statements()
    size = batch_hours or len(keys)
    with psycopg.connect(libpq_dsn(url)) as connection:
        began = time.perf_counter()
        for start in range(0, len(keys), size):
            load_hours(connection, landing, keys[start : start + size], statements)
        return time.perf_counter() - began


def _create_events_table(url: str) -> None:
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        events_table.create(engine)
    finally:
        engine.dispose()


# What the profile reports of one partition's path (docs/ARCHITECTURE.md "The path of one
# partition attempt"): label, the function's file (a suffix of its path) and name. Their
# cumulative seconds overlap where one calls another (attempt holds the rest).
PROFILED = (
    (
        "the step (every partition, all of it)",
        "orchestration/backfill_asset.py",
        "run_backfill_step",
    ),
    ("  one attempt, whole", "engine/runner.py", "attempt"),
    ("    gate, lease, attempt row", "engine/attempt.py", "begin_attempt"),
    ("    fingerprint (reads the file)", "engine/runner.py", "_fingerprint"),
    ("    committed chunks (fingerprint recorded)", "engine/runner.py", "_committed_chunks"),
    ("    seen-keys temporary table", "writer/sweep.py", "seen_keys_on"),
    ("    read + DataFrame", "bench/hourly_events.py", "read_hour"),
    ("    chunk: rows + checkpoint + fence", "engine/chunk_commit.py", "commit_chunk"),
    # Inside the chunk's commit when the last chunk is short (one commit for both).
    ("    finalize: sweep, done, release", "engine/finalize.py", "finalize_in_transaction"),
    ("    heartbeat start", "engine/heartbeat.py", "__enter__"),
    ("    heartbeat stop", "engine/heartbeat.py", "__exit__"),
    ("    lifecycle log lines (Dagster log events)", "engine/events.py", "emit"),
    ("  results for Dagster (materializations)", "orchestration/dagster_results.py", "finish_step"),
    ("Dagster: an event stored", "dagster/_core/instance/__init__.py", "handle_new_event"),
)


def in_process_backfill(
    url: str,
    landing: str,
    keys: list[str],
    dagster_home: Path,
    chunk_rows: int | None = None,
    profile: Path | None = None,
    storage_yaml: str = "",
) -> dict:
    """`hourly_events` over `keys` in ONE in-process run (what a single-run backfill's step
    does, without the daemon and the processes); with `profile`, under cProfile (its
    stats written there) with the warehouse's statements and commits counted."""
    import cProfile
    import pstats

    import dagster as dg

    from benchmarks.hourly_location import hourly_events
    from jobs_platform.orchestration.resources import JobsPlatformResource
    from jobs_platform.orchestration.tags import (
        PARTITION_RANGE_END_TAG,
        PARTITION_RANGE_START_TAG,
    )
    from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone

    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + storage_yaml)
    warehouse = warehouse_engine(url)
    upgrade_warehouse(warehouse)
    create_user_tables(warehouse, events_table)
    counted: Counter[str] = Counter()

    def count(connection, cursor, statement, parameters, context, executemany) -> None:
        counted[f"{connection.dialect.name}_statements"] += 1

    def commit(connection) -> None:
        counted[f"{connection.dialect.name}_commits"] += 1

    config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if chunk_rows:
        config["ops"] = {"hourly_events": {"config": {"chunk_rows": chunk_rows}}}
    profiler = cProfile.Profile() if profile else None
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        if profile:
            sa.event.listen(sa.Engine, "before_cursor_execute", count)
            sa.event.listen(sa.Engine, "commit", commit)
        try:
            began = time.perf_counter()
            if profiler:
                profiler.enable()
            result = dg.materialize(
                [hourly_events],
                instance=instance,
                resources={
                    "jobs_platform": JobsPlatformResource(database_url=url),
                    LANDING_RESOURCE_KEY: LandingZone(root=landing),
                },
                run_config=config,
                tags={PARTITION_RANGE_START_TAG: keys[0], PARTITION_RANGE_END_TAG: keys[-1]},
                raise_on_error=False,
            )
            if profiler:
                profiler.disable()
            seconds = time.perf_counter() - began
        finally:
            if profile:
                sa.event.remove(sa.Engine, "before_cursor_execute", count)
                sa.event.remove(sa.Engine, "commit", commit)
        if not result.success:
            raise BenchRunFailed(f"the in-process run {result.run_id} failed")
        events = Counter(
            entry.dagster_event.event_type_value if entry.dagster_event else "LOG"
            for entry in instance.all_logs(result.run_id)
        )
    figures: dict = {"seconds": round(seconds, 4), "per_partition": round(seconds / len(keys), 5)}
    if profiler and profile:
        profiler.dump_stats(profile)
        figures["profile"] = _profile_breakdown(pstats.Stats(str(profile)), len(keys), seconds)
        figures["statements_per_partition"] = {
            name: round(number / len(keys), 2) for name, number in sorted(counted.items())
        }
        figures["dagster_events_per_partition"] = {
            kind: round(number / len(keys), 2) for kind, number in events.most_common()
        }
        figures["profile_file"] = str(profile)
    return figures


def _profile_breakdown(stats, partitions: int, wall_seconds: float) -> dict:
    """Cumulative seconds of each of PROFILED's functions, in all and per partition (ms)."""
    cumulative: Counter[str] = Counter()
    for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        for label, suffix, function in PROFILED:
            if name == function and filename.endswith(suffix):
                cumulative[label] += ct
    rows = {
        label: {
            "seconds": round(cumulative[label], 3),
            "ms_per_partition": round(1000 * cumulative[label] / partitions, 3),
        }
        for label, _suffix, _function in PROFILED
    }
    rows["the run, wall (profiled)"] = {
        "seconds": round(wall_seconds, 3),
        "ms_per_partition": round(1000 * wall_seconds / partitions, 3),
    }
    return rows
