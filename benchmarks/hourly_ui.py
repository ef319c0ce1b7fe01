"""The UI path of `bench backfill --shape hourly`: the framework's backfill against Dagster's floor.

Two methods, alternated round by round (A B A B …, `timing.alternated`), each run on a
fresh schema and a fresh Dagster instance (its own scratch storage, webserver and
daemon: `daemon.DagsterStack`), the backfill launched with GraphQL
`launchPartitionBackfill` as the UI does, over the same partitions with the same policy:

- the framework: `hourly_location`'s `hourly_events` (and its asset check, as
  "Materialize" selects it);
- the Dagster floor: `hourly_floor_location`'s `hourly_events`, the same load in plain
  Dagster with nothing of the framework (the plain script's statements, a transaction an
  hour, the same executor shape).

A method's figure is its run window (first run created → last run ended: the part the
daemon's 30 s tick before and after does not blur), median with min and max; their
ratio is the median of the rounds' ratios. The floor's window is what Dagster itself
costs for these partitions, the framework's minus it the framework's own
(`per_partition_split`), and each side's runs are split by phase from their event logs
(`run_breakdown`), so the difference can be read phase by phase.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from benchmarks.backfill import BenchRunFailed, _load_average, expect_rows
from benchmarks.daemon import BACKFILL_TAG, DagsterStack, timed_ui_backfill
from benchmarks.database import (
    fresh_schema,
    new_row_versions,
    scratch_database,
    snapshot_row_versions,
)
from benchmarks.hourly_events import events_table
from benchmarks.hourly_partitions import POLICY_VARIABLE
from benchmarks.timing import Runs, alternated, median_ratio
from benchmarks.upsert import libpq_dsn
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables

HOURLY_MODULE = "benchmarks.hourly_location"
FLOOR_MODULE = "benchmarks.hourly_floor_location"
HOURLY_ASSETS = ("hourly_events",)
DAGSTER_STORAGES = ("postgres", "sqlite")
WINDOW = "first_run_created_to_last_run_ended_seconds"
# A run's phases (`run_breakdown`): created → dequeued, → RUN_START (the run worker's
# process, the location loaded), → the first STEP_START (the step process), → the first
# log line of the step (its set-up: the framework's first lifecycle line, the floor's
# "loading" line), the first to the last log line (the partitions' attempts), the
# materializations stored, the steps in all (with the framework's asset check's step),
# the last step → the run's end.
_PHASES = (
    "queued",
    "run_worker_start",
    "step_process_start",
    "step_to_first_partition_started",
    "partitions_attempted",
    "materializations_stored",
    "step",
    "run_end",
)


class UiPath:
    """What both methods need: where to measure, the input, and how."""

    def __init__(
        self,
        database_url: str,
        landing: str,
        keys: list[str],
        folder: Path,
        dagster_storage: str,
        run_config: dict | None,
    ):
        self.database_url = database_url
        self.landing = landing
        self.keys = keys
        self.folder = folder
        self.dagster_storage = dagster_storage
        self.run_config = run_config
        self.stacks = 0

    def stack_folder(self, label: str) -> Path:
        self.stacks += 1
        folder = self.folder / f"{label}_{self.stacks}"
        folder.mkdir()
        return folder


def framework_against_floor(
    path: UiPath,
    policy: str,
    expected_rows: int,
    plain_seconds: dict[str, float],
    *,
    repeats: int,
    warmup: int,
    rerun: bool,
) -> dict:
    """The framework's UI-path backfill and the Dagster floor's, alternated; the figures
    of `policy` (the framework's median run's timeline under the keys it always had).

    `plain_seconds`: the best plain script's median (`best`) and the per-hour one's
    (`per_hour`), what the windows are compared with. The unchanged re-run (`rerun`) is
    timed once, after the framework's first kept round."""
    framework_runs: list[dict] = []
    floor_runs: list[dict] = []

    def framework() -> float:
        again = rerun and len(framework_runs) == warmup
        framework_runs.append(framework_backfill(path, policy, expected_rows, rerun=again))
        return framework_runs[-1]["timeline"][WINDOW]

    def floor() -> float:
        floor_runs.append(floor_backfill(path, policy, expected_rows))
        return floor_runs[-1]["timeline"][WINDOW]

    timed = alternated({"framework": framework, "floor": floor}, repeats, warmup)
    framework_runs, floor_runs = framework_runs[warmup:], floor_runs[warmup:]
    partitions = len(path.keys)
    windows = {name: runs.figures(expected_rows) for name, runs in timed.items()}
    median_framework = _median_run(framework_runs)
    median_floor = _median_run(floor_runs)
    window, floor_window = windows["framework"]["seconds"], windows["floor"]["seconds"]
    rerun_figures = next((run["rerun"] for run in framework_runs if run["rerun"]), None)
    return {
        **_timeline(median_framework),
        "ratio": round(window / plain_seconds["best"], 3),
        "ratio_to_per_hour_plain_script": round(window / plain_seconds["per_hour"], 3),
        "framework_seconds_per_partition": round(window / partitions, 5),
        "breakdown": median_framework["breakdown"],
        "rerun_unchanged": rerun_figures,
        "peak_rss_mib": median_framework["peak_rss_mib"],
        "load_average_1m": median_framework["load_average_1m"],
        "run_window": windows["framework"],
        "rows_stored": median_framework["rows_stored"],
        "dagster_floor": {
            **_timeline(median_floor),
            "run_window": windows["floor"],
            "rows_stored": median_floor["rows_stored"],
            "seconds_per_partition": round(floor_window / partitions, 5),
            "ratio_to_best_plain_script": round(floor_window / plain_seconds["best"], 3),
            "ratio_to_per_hour_plain_script": round(floor_window / plain_seconds["per_hour"], 3),
            "breakdown": median_floor["breakdown"],
            "peak_rss_mib": median_floor["peak_rss_mib"],
            "load_average_1m": median_floor["load_average_1m"],
        },
        "framework_to_floor_ratio": median_ratio(timed["framework"], timed["floor"]),
        "per_partition_split": per_partition_split(
            timed["framework"], timed["floor"], median_framework, median_floor, partitions
        ),
    }


def framework_backfill(path: UiPath, policy: str, expected_rows: int, *, rerun: bool) -> dict:
    """The framework's backfill through the UI path on a fresh schema and instance."""
    with (
        fresh_schema(path.database_url, "daemon") as url,
        dagster_storage_yaml(path.database_url, path.dagster_storage) as storage_yaml,
    ):
        # What a deploy does before the first run, outside the timed part.
        warehouse = warehouse_engine(url)
        upgrade_warehouse(warehouse)
        create_user_tables(warehouse, events_table)
        env = {
            "JOBS_PLATFORM_DATABASE_URL": url,
            "JOBS_PLATFORM_LANDING": path.landing,
            POLICY_VARIABLE: policy,
        }
        load_at_launch = _load_average()
        folder = path.stack_folder("daemon")
        with DagsterStack(folder, env, HOURLY_MODULE, storage_yaml) as stack:
            first = timed_ui_backfill(stack, path.keys, path.run_config, HOURLY_ASSETS)
            breakdown = run_breakdown(stack.home, first["backfill_id"])
            again = None
            if rerun:
                engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
                try:
                    snapshot_row_versions(engine, events_table.name, "event_id")
                    again = timed_ui_backfill(stack, path.keys, path.run_config, HOURLY_ASSETS)
                    again["new_row_versions"] = new_row_versions(
                        engine, events_table.name, "event_id"
                    )
                finally:
                    engine.dispose()
        stored = expect_rows(url, expected_rows, "UI-path backfill", events_table)
    return {
        "timeline": first,
        "rows_stored": stored,
        "breakdown": breakdown,
        "rerun": again,
        "peak_rss_mib": stack.rss.peaks_mib(),
        "load_average_1m": {"at_launch": load_at_launch, "after": _load_average()},
    }


def floor_backfill(path: UiPath, policy: str, expected_rows: int) -> dict:
    """The Dagster floor's backfill through the UI path on a fresh schema and instance:
    `hourly_floor_location`, launched as the framework's is (no run config: its asset
    takes none)."""
    from benchmarks.hourly_floor_location import DSN_VARIABLE, LANDING_VARIABLE

    with (
        fresh_schema(path.database_url, "floor") as url,
        dagster_storage_yaml(path.database_url, path.dagster_storage) as storage_yaml,
    ):
        engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
        try:
            events_table.create(engine)  # the plain script's table, before the clock
        finally:
            engine.dispose()
        env = {
            DSN_VARIABLE: libpq_dsn(url),
            LANDING_VARIABLE: path.landing,
            POLICY_VARIABLE: policy,
        }
        load_at_launch = _load_average()
        folder = path.stack_folder("floor")
        with DagsterStack(folder, env, FLOOR_MODULE, storage_yaml) as stack:
            timeline = timed_ui_backfill(stack, path.keys, None, HOURLY_ASSETS)
            breakdown = run_breakdown(stack.home, timeline["backfill_id"])
        stored = expect_rows(url, expected_rows, "Dagster floor backfill", events_table)
    return {
        "timeline": timeline,
        "rows_stored": stored,
        "breakdown": breakdown,
        "peak_rss_mib": stack.rss.peaks_mib(),
        "load_average_1m": {"at_launch": load_at_launch, "after": _load_average()},
    }


def per_partition_split(
    framework: Runs, floor: Runs, framework_run: dict, floor_run: dict, partitions: int
) -> dict:
    """The framework's median run window per partition split into Dagster's own (the
    floor's median) and the framework's (the difference; `framework_own_ms_pairwise`: the
    median of the rounds' differences, which drift between rounds moves less), and the
    same split phase by phase and for Dagster's events, from each side's median run."""
    pairs = zip(framework.seconds, floor.seconds, strict=True)
    own_pairwise = statistics.median(a - b for a, b in pairs)
    window = statistics.median(framework.seconds)
    floor_window = statistics.median(floor.seconds)

    def ms(seconds: float) -> float:
        return round(1000 * seconds / partitions, 2)

    phases = {}
    for phase in _PHASES:
        ours = framework_run["breakdown"]["seconds_summed_over_runs"][phase]
        dagsters = floor_run["breakdown"]["seconds_summed_over_runs"][phase]
        phases[phase] = {
            "framework": ms(ours),
            "dagster_floor": ms(dagsters),
            "framework_own": ms(ours - dagsters),
        }
    events = {
        "framework": _events_per_partition(framework_run["breakdown"]),
        "dagster_floor": _events_per_partition(floor_run["breakdown"]),
    }
    return {
        "window_ms": ms(window),
        "dagster_floor_ms": ms(floor_window),
        "framework_own_ms": ms(window - floor_window),
        "framework_own_ms_pairwise": ms(own_pairwise),
        "dagster_floor_share": round(floor_window / window, 3),
        "phases_ms_summed_over_runs": phases,
        "dagster_events_per_partition": events,
    }


def _events_per_partition(breakdown: dict) -> float:
    return round(sum(breakdown["dagster_events_per_partition"].values()), 2)


def _median_run(runs: list[dict]) -> dict:
    """The run whose window is the median (the lower of the two middle ones when even)."""
    ordered = sorted(runs, key=lambda run: run["timeline"][WINDOW])
    return ordered[(len(ordered) - 1) // 2]


def _timeline(run: dict) -> dict:
    timeline = run["timeline"]
    return {
        **timeline,
        "last_run_ended_to_backfill_complete_seconds": round(
            timeline["end_to_end_seconds"] - timeline["launch_to_last_run_ended_seconds"], 3
        ),
    }


@contextlib.contextmanager
def dagster_storage_yaml(database_url: str, dagster_storage: str) -> Iterator[str]:
    """The instance's storage settings: on PostgreSQL a scratch database of its own on the
    bench's server (dropped afterwards), so that each measurement starts empty."""
    if dagster_storage == "sqlite":
        yield ""
        return
    with scratch_database(database_url) as dagster_db:
        yield postgres_storage_yaml(dagster_db)


def postgres_storage_yaml(url: str) -> str:
    """The instance's `storage: postgres:` block for the database at `url` (psycopg2, as
    deploy/templates/dagster.yaml says why)."""
    address = normalize_url(url).set(drivername="postgresql+psycopg2")
    rendered = address.render_as_string(hide_password=False)
    return f"storage:\n  postgres:\n    postgres_url: {json.dumps(rendered)}\n"


def run_breakdown(dagster_home: Path, backfill_id: str) -> dict:
    """Where the backfill's runs spent their time, from their event logs (seconds summed
    over the runs, and per partition), and how many Dagster events each partition cost."""
    import dagster as dg

    phases: dict[str, float] = dict.fromkeys(_PHASES, 0.0)
    events: Counter[str] = Counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        records = instance.get_run_records(dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
        for record in records:
            created = record.create_timestamp.timestamp()
            first_at: dict[str, float] = {}
            step_starts: list[float] = []
            step_ends: list[float] = []
            materialized_at: list[float] = []
            logged_at: list[float] = []  # the step's log lines
            for entry in instance.all_logs(record.dagster_run.run_id):
                kind = entry.dagster_event.event_type_value if entry.dagster_event else "LOG"
                events[kind] += 1
                first_at.setdefault(kind, entry.timestamp)
                if kind == "STEP_START":
                    step_starts.append(entry.timestamp)
                elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
                    step_ends.append(entry.timestamp)
                elif kind == "ASSET_MATERIALIZATION":
                    materialized_at.append(entry.timestamp)
                elif kind == "LOG":
                    logged_at.append(entry.timestamp)
            if not step_starts or not step_ends or not materialized_at or not logged_at:
                raise BenchRunFailed(f"run {record.dagster_run.run_id} has no step or no output")
            run_start = first_at.get("RUN_START", record.start_time or created)
            dequeued = first_at.get("RUN_DEQUEUED", created)
            phases["queued"] += dequeued - created
            phases["run_worker_start"] += run_start - dequeued
            phases["step_process_start"] += min(step_starts) - run_start
            phases["step_to_first_partition_started"] += min(logged_at) - min(step_starts)
            phases["partitions_attempted"] += max(logged_at) - min(logged_at)
            # A ranged step reports its partitions at its end: Dagster stores each one's
            # materialization (with its asset index and tags) then.
            phases["materializations_stored"] += max(materialized_at) - min(materialized_at)
            phases["step"] += max(step_ends) - min(step_starts)
            phases["run_end"] += (record.end_time or max(step_ends)) - max(step_ends)
    materialized = events["ASSET_MATERIALIZATION"] or 1
    per_partition_events = {
        kind: round(count / materialized, 2) for kind, count in events.most_common() if count
    }
    return {
        "runs": len(records),
        "partitions_materialized": events["ASSET_MATERIALIZATION"],
        "seconds_summed_over_runs": {name: round(value, 3) for name, value in phases.items()},
        "step_seconds_per_partition": round(phases["step"] / materialized, 5),
        "dagster_events_per_partition": per_partition_events,
        "dagster_events_total": sum(events.values()),
    }
