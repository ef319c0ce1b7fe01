"""`bench rerun`: a corrected day re-run as a user meets it, against the expert's script.

One day of `--rows` orders (1,200,000 by default) is loaded once by each side (off the
clock). Then, round by round, the day's landing file is corrected — `--changed` of its
rows (10 % by default, spread evenly) get a new amount, the rest stay byte for byte —
and each side loads the corrected file again, alternated, after a warm-up round:

- framework: `dagster asset materialize -m MODULE --select orders --partition DAY`, a
  new process as a user or CI starts it (Dagster's start-up, the location's import, the
  run, its step process, the fingerprint of the new input, reading and validating every
  line, the chunks' upserts and checkpoints, the sweep, the event log: all timed);
- plain_script_<variant>: the script an expert writes for this, in this process (no
  interpreter start-up): read the file line by line with `json.loads`, per `--chunk-rows`
  rows stage by binary COPY and merge with the variant (`bench.baselines`), commit.
  Off the clock, each variant's merge of the file's first chunk is EXPLAINed against the
  loaded table (`plans`).

Both tables end equal to the corrected file. The framework's seconds are split by where
they went: process start to run start, run start to step start, the step, the step's
end to process exit; and inside the step, the attempt as the framework records it. With
`--profile FILE`, one more corrected round of the framework runs under py-spy (off the
figures) and its attempt's seconds are split by phase (`bench.stacks`): reading and
validating, the stage COPY, the merge, the seen keys, the sweep, the lifecycle log lines.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa

from benchmarks import baselines
from benchmarks.database import fresh_schema, server_facts
from benchmarks.run_config import chunk_rows_config
from benchmarks.stacks import attempt_phases
from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import DEFAULT_REPEATS, libpq_dsn
from jobs_platform.location import load_definitions
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables
from orders_example.orders.landing import landing_file
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import orders_table

DAY = dt.date(2024, 3, 1)
DEFAULT_ROWS = 1_200_000
DEFAULT_CHANGED = 0.1
DEFAULT_CHUNK_ROWS = 10_000  # the backfill's default chunk, for both sides
PROFILE_RATE = 100  # py-spy samples a second, per thread, for --profile
COLUMNS = ("order_id", "customer_id", "amount_cents", "currency", "status", "ordered_at")
COPY_TYPES = ("int8", "int8", "int8", "text", "text", "timestamptz")
_AMOUNT = re.compile(rb'"amount_cents":(\d+)')


def run_rerun_bench(
    database_url: str,
    rows: int = DEFAULT_ROWS,
    changed: float = DEFAULT_CHANGED,
    repeats: int = DEFAULT_REPEATS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    module: str = "orders_example.definitions",
    warmup: int = 1,
    profile: Path | None = None,
) -> dict:
    if rows < 1 or chunk_rows < 1 or not 0 < changed <= 1:
        raise ValueError("--rows and --chunk-rows must be >= 1 and --changed in (0, 1]")
    load_before = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="jp_bench_rerun_") as folder:
        landing = str(Path(folder) / "landing")
        seed_orders(landing, DAY, DAY, orders_per_day=rows)
        day = Corrections(Path(landing_file(landing, DAY.isoformat())), changed)
        variants = baselines.PLAIN_VARIANTS
        with contextlib.ExitStack() as schemas:
            framework_url = schemas.enter_context(fresh_schema(database_url, "rerun_framework"))
            plain_urls = {
                variant: schemas.enter_context(fresh_schema(database_url, f"rerun_{variant}"))
                for variant in variants
            }
            framework = Materialize(framework_url, landing, Path(folder), chunk_rows, module)
            framework.run()  # the day's first load, off the clock
            for variant, url in plain_urls.items():
                create_user_tables(warehouse_engine(url), orders_table)
                plain_rerun(url, day.path, chunk_rows, variant)
            plans = first_chunk_plans(plain_urls[variants[0]], day.path, chunk_rows, rows)
            methods = {"correct_the_input": day.correct, "framework": framework.run}
            for variant, url in plain_urls.items():
                methods[f"plain_script_{variant}"] = _plain(url, day.path, chunk_rows, variant)
            runs = alternated(methods, repeats, warmup)
            expected = day.amounts_sum()
            for name, url in {"framework": framework_url, **plain_urls}.items():
                _expect_sum(url, rows, expected, name)
            if profile is not None:  # one more round, the framework's only, off the figures
                day.correct()
                step_profile = framework.profiled(profile)
    figures = {name: kept.figures(rows) for name, kept in runs.items()}
    best = min(variants, key=lambda v: figures[f"plain_script_{v}"]["seconds"])
    best_runs = runs[f"plain_script_{best}"]
    kept_splits = framework.splits[-repeats:]
    split = {
        part: round(float(np.median([s[part] for s in kept_splits])), 3) for part in kept_splits[0]
    }
    return {
        "rows": rows,
        "changed_fraction": changed,
        "changed_rows": day.changed_rows,
        "framework_seconds": figures["framework"]["seconds"],
        "best_plain_script": best,
        "best_plain_script_seconds": figures[f"plain_script_{best}"]["seconds"],
        # The framework's seconds over the best variant's, run by run.
        "ratio": median_ratio(runs["framework"], best_runs),
        "methods": figures,
        "plans": plans,
        "framework_seconds_split_median": split,
        **({"attempt_profile": step_profile} if profile is not None else {}),
        "notes": {
            "repeats": repeats,
            "chunk_rows": chunk_rows,
            "command": framework.shown_command,
            "load_average_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "server": server_facts(database_url),
        },
    }


class Corrections:
    """The day's landing file, corrected again each round (a new amount on the same rows)."""

    def __init__(self, path: Path, changed: float):
        self.path = path
        self.lines = path.read_bytes().splitlines(keepends=True)
        count = round(len(self.lines) * changed)
        self.picked = np.linspace(0, len(self.lines) - 1, num=count, dtype=np.int64).tolist()
        self.changed_rows = len(self.picked)
        self.version = 0

    def correct(self) -> None:
        """Write the next version of the file (off the clock: returns no seconds)."""
        self.version += 1
        lines = list(self.lines)
        for index in self.picked:
            lines[index] = _AMOUNT.sub(self._bumped, lines[index], count=1)
        temporary = self.path.with_suffix(".writing")
        temporary.write_bytes(b"".join(lines))
        temporary.replace(self.path)

    def _bumped(self, match: re.Match[bytes]) -> bytes:
        return b'"amount_cents":%d' % (int(match.group(1)) + self.version)

    def amounts_sum(self) -> int:
        return sum(
            int(m.group(1)) for m in map(_AMOUNT.search, self.path.read_bytes().splitlines()) if m
        )


class Materialize:
    """`dagster asset materialize` of the day, a new process each time, as a user runs it."""

    def __init__(self, url: str, landing: str, folder: Path, chunk_rows: int, module: str):
        import dagster as dg

        self.home = folder / "dagster_home"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(str(self.home)):
            pass  # the instance's storage, created once, off the clock
        warehouse = warehouse_engine(url)
        upgrade_warehouse(warehouse)  # what a deploy does before the first run
        create_user_tables(warehouse, orders_table)
        self.folder = folder
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "JOBS_PLATFORM_FAILPOINTS"},
            "JOBS_PLATFORM_DATABASE_URL": url,
            "JOBS_PLATFORM_LANDING": landing,
            "DAGSTER_HOME": str(self.home),
        }
        config = chunk_rows_config(module, ["orders"], chunk_rows)
        # The step computing `orders` (in the bundled location, its chain's op).
        self.step = load_definitions(module).get_assets_def("orders").op.name
        self.command = [
            str(Path(sys.executable).with_name("dagster")), "asset", "materialize",
            "-m", module, "--select", "orders", "--partition", DAY.isoformat(),
            "--config-json", json.dumps(config),
        ]  # fmt: skip
        self.shown_command = " ".join(self.command[1:])
        self.splits: list[dict[str, float]] = []

    def run(self) -> float:
        began_wall, began = time.time(), time.perf_counter()
        finished = subprocess.run(
            self.command, env=self.env, cwd=self.folder, capture_output=True, text=True
        )
        seconds = time.perf_counter() - began
        ended_wall = time.time()
        if finished.returncode != 0:
            raise RuntimeError(
                f"dagster asset materialize exited {finished.returncode}: "
                f"{finished.stderr.strip()[-1500:]}"
            )
        self.splits.append(self._split(began_wall, ended_wall))
        return seconds

    def profiled(self, raw: Path) -> dict:
        """One more run under py-spy (every process, waits included): where its attempt's
        seconds went (`bench.stacks`), beside the run's own split."""
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            raise RuntimeError("--profile needs py-spy (pip install py-spy; bin/setup installs it)")
        recorder = [spy, "record", "--subprocesses", "--idle", "--rate", str(PROFILE_RATE)]
        began = time.time()
        finished = subprocess.run(
            [*recorder, "--format", "raw", "--output", str(raw), "--", *self.command],
            env=self.env,
            cwd=self.folder,
            capture_output=True,
            text=True,
        )
        if finished.returncode != 0:
            raise RuntimeError(f"py-spy exited {finished.returncode}: {finished.stderr[-1500:]}")
        return {
            "command": f"py-spy record --subprocesses --idle --rate {PROFILE_RATE} "
            f"--format raw --output {raw} -- {self.shown_command}",
            "seconds_split": self._split(began, time.time()),
            "attempt_seconds_by_phase": attempt_phases(raw, PROFILE_RATE),
        }

    def _split(self, began: float, ended: float) -> dict[str, float]:
        """Where the process's seconds went, from the run's own records."""
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            (record,) = instance.get_run_records(limit=1)
            steps = instance.get_run_step_stats(record.dagster_run.run_id)
            (materialized,) = instance.fetch_materializations(
                dg.AssetKey("orders"), limit=1
            ).records
        run_start, run_end = record.start_time or began, record.end_time or ended
        (step,) = [stats for stats in steps if stats.step_key == self.step]
        step_start, step_end = step.start_time or run_start, step.end_time or run_end
        # Its asset check (`orders_no_quarantined_partitions`) runs as a step of its own.
        last_end = max((stats.end_time or step_end) for stats in steps)
        metadata = (
            materialized.asset_materialization.metadata
            if materialized.asset_materialization
            else {}
        )
        attempt = metadata.get("duration_seconds")
        attempt_seconds = attempt.value if attempt is not None else 0.0
        return {
            "process_start_to_run_start": run_start - began,
            "run_start_to_step_start": step_start - run_start,
            "step": step_end - step_start,
            "attempt_recorded_by_the_framework": float(typing.cast(float, attempt_seconds)),
            "step_end_to_last_step_end (asset check)": last_end - step_end,
            "last_step_end_to_run_end": run_end - last_end,
            "run_end_to_process_exit": ended - run_end,
        }


def _plain(url: str, path: Path, chunk_rows: int, variant: str):
    return lambda: plain_rerun(url, path, chunk_rows, variant)


def plain_rerun(url: str, path: Path, chunk_rows: int, variant: str) -> float:
    """The expert's script: the file read with json.loads, staged and merged per chunk."""
    statements = baselines.merge_statements(orders_table.name, ["order_id"], COLUMNS, variant)
    with psycopg.connect(libpq_dsn(url)) as connection:
        began = time.perf_counter()
        for rows in order_rows(path, chunk_rows):
            baselines.merge_rows(connection, statements, [0], COPY_TYPES, rows)
        return time.perf_counter() - began


def order_rows(path: Path, chunk_rows: int) -> Iterator[list[tuple]]:
    """The landing file's orders as tuples of Python values, `chunk_rows` at a time."""
    rows: list[tuple] = []
    with open(path, "rb") as stream:
        for line in stream:
            if line.isspace():
                continue
            order = json.loads(line)
            rows.append(
                (
                    order["order_id"],
                    order["customer_id"],
                    order["amount_cents"],
                    order["currency"],
                    order["status"],
                    dt.datetime.fromisoformat(order["ordered_at"]),
                )
            )
            if len(rows) == chunk_rows:
                yield rows
                rows = []
    if rows:
        yield rows


def first_chunk_plans(url: str, path: Path, chunk_rows: int, rows: int) -> dict:
    """Each variant's plan of merging the file's first chunk into the loaded table."""
    chunk = pd.DataFrame(next(order_rows(path, chunk_rows)), columns=list(COLUMNS))
    label = f"chunk_rows={len(chunk)},table_rows={rows}"
    variants = baselines.every_variant(orders_table.name, ["order_id"], COLUMNS)
    return baselines.merge_plans(libpq_dsn(url), variants, ["order_id"], chunk, label)


def _expect_sum(url: str, rows: int, amounts: int, who: str) -> None:
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            count, total = connection.execute(
                sa.text("SELECT count(*), sum(amount_cents) FROM orders")
            ).one()
    finally:
        engine.dispose()
    if (count, total) != (rows, amounts):
        raise RuntimeError(
            f"{who}: orders holds {count} rows summing to {total}, expected {rows} and {amounts}"
        )
