"""`python -m benchmarks.redrive`: what one redrive sensor tick costs at scale.

A fresh schema holds `--entries` open quarantine entries spread over `--assets` backfills
of a code location built here with `platform_definitions` (each with a `code_version` and
a `fingerprint=` that hashes a small landing file through a resource, as the orders
example's does). `dead_letter_redrive_sensor` is then ticked in this process as the daemon
ticks it (`build_sensor_context` + `evaluate_tick`), in two warehouses:

- `steady`: nothing to redrive (each entry's code and input are current, no cool-down has
  passed): the tick every minute of a large dead letter costs this;
- `busy`: everything is due (one asset's code changed, one's inputs changed, one's
  outage cool-downs passed): the tick releases what its per-tick limits allow.

Prints JSON; seconds of each tick, the median, min and max.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from benchmarks.database import fresh_schema, json_report_main, server_facts
from benchmarks.timing import wall_seconds
from jobs_platform import JobsPlatformResource, PartitionInput, backfill_asset
from jobs_platform.dead_letter.redrive import Redrives
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.platform import platform_definitions
from jobs_platform.store.clock import DATABASE_CLOCK

TICK_TARGET_SECONDS = 1.0
FIRST_DAY = dt.date(2000, 1, 1)
CURRENT_VERSION = "2"


class BenchLanding(dg.ConfigurableResource):
    """Where the benchmark's landing files are: the resource each fingerprint takes."""

    root: str


def _file_fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bench_location(
    asset_count: int,
    landing: str,
    database_url: str | None,
    *,
    partitions_def: dg.PartitionsDefinition | None = None,
    names: list[str] | None = None,
) -> dg.Definitions:
    """A code location of `asset_count` backfills, as a team would build it: each with a
    `code_version` and a `fingerprint=` hashing its partition's landing file (daily from
    `FIRST_DAY` unless `partitions_def`; named `names`, else `bench_redrive_<n>`). Its
    warehouse is `database_url`, else the environment's."""
    metadata = sa.MetaData()
    backfills = []
    for name in names or [f"bench_redrive_{n}" for n in range(asset_count)]:
        table = sa.Table(
            name,
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("partition", sa.String(32), nullable=False),
        )

        def fingerprint(source: PartitionInput, bench_landing: BenchLanding) -> str:
            path = Path(bench_landing.root) / source.asset / f"{source.partition_key}.txt"
            return _file_fingerprint(path)

        @backfill_asset(
            table=table,
            partitions_def=partitions_def
            or dg.DailyPartitionsDefinition(start_date=FIRST_DAY.isoformat()),
            partition_scope=lambda t, p: t.c.partition == p,
            code_version=CURRENT_VERSION,
            fingerprint=fingerprint,
            name=name,
        )
        def read(source: PartitionInput, bench_landing: BenchLanding) -> Iterator[pd.DataFrame]:
            yield pd.DataFrame()  # never run: the benchmark only ticks the sensor

        backfills.append(read)
    return dg.Definitions.merge(
        platform_definitions(
            backfills,
            jobs_platform=JobsPlatformResource(database_url=database_url) if database_url else None,
        ),
        dg.Definitions(resources={"bench_landing": BenchLanding(root=landing)}),
    )


def landing_file(landing: Path, asset: str, partition: str) -> str:
    """Write the partition's landing file; its fingerprint as an entry that read it keeps
    it (the hash and the code version)."""
    path = landing / asset / f"{partition}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{asset} {partition} input\n" * 20)
    return f"{_file_fingerprint(path)}@{CURRENT_VERSION}"


def seed(url: str, landing: Path, assets: list[str], entries: int, *, busy: bool) -> float:
    """Landing files and open entries; every entry current (`steady`) or due (`busy`)."""
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.store.migrate import upgrade_warehouse
    from jobs_platform.store.schema import quarantine

    began = time.perf_counter()
    engine = warehouse_engine(url)
    upgrade_warehouse(engine)
    now = dt.datetime.now(dt.UTC)
    rows = []
    for position, asset in enumerate(assets):
        share = entries // len(assets) + (position < entries % len(assets))
        for day in range(share):
            partition = (FIRST_DAY + dt.timedelta(days=day)).isoformat()
            fingerprint = landing_file(landing, asset, partition)
            version, error_class, at = CURRENT_VERSION, "terminal", now
            if busy and position % 3 == 0:
                version = "1"  # code_changed
            elif busy and position % 3 == 1:
                error_class, at = "retryable", now - dt.timedelta(days=1)  # cooldown
            elif busy:
                fingerprint = "an input since replaced"  # input_changed
            elif day % 2:
                error_class = "retryable"  # not due: quarantined just now
            rows.append(
                {
                    "asset": asset,
                    "partition": partition,
                    "episode": 1,
                    "status": "quarantined",
                    "attempts": 1 if error_class == "terminal" else 5,
                    "error_class": error_class,
                    "error_type": "InputValidationError",
                    "last_error": "line 3: not valid JSON",
                    "first_failed_at": at,
                    "last_failed_at": at,
                    "quarantined_at": at,
                    "signature": "0123456789ab",
                    "code_version": version,
                    "fingerprint": fingerprint,
                }
            )
    with engine.begin() as connection:
        for start in range(0, len(rows), 2000):
            connection.execute(sa.insert(quarantine), rows[start : start + 2000])
        connection.execute(sa.text("ANALYZE jp_quarantine"))
    return time.perf_counter() - began


def run_redrive_bench(database_url: str, entries: int, asset_count: int, repeats: int) -> dict:
    from jobs_platform.dead_letter.redrive_sensor import (
        FINGERPRINTS_PER_TICK,
        REDRIVES_PER_TICK,
    )

    assets = [f"bench_redrive_{n}" for n in range(asset_count)]
    results: dict[str, dict] = {}
    notes: dict[str, object] = {}
    for kind in ("steady", "busy"):
        with (
            tempfile.TemporaryDirectory(prefix="jp_bench_redrive_") as folder,
            fresh_schema(database_url, f"redrive_{kind}") as url,
        ):
            landing = Path(folder) / "landing"
            notes[f"{kind}_seed_seconds"] = round(
                seed(url, landing, assets, entries, busy=kind == "busy"), 2
            )
            location = bench_location(asset_count, str(landing), url)
            with dg.DagsterInstance.ephemeral() as instance:
                results[kind] = _ticks(location, instance, repeats)
                notes[f"{kind}_phases"] = _phases(location, url, instance)
    worst = max(results[kind]["max_seconds"] for kind in results)
    return {
        "entries": entries,
        "assets": asset_count,
        "results": results,
        "target": f"one tick < {TICK_TARGET_SECONDS:g} s",
        "met": worst < TICK_TARGET_SECONDS,
        "notes": {
            **notes,
            "repeats": repeats,
            "fingerprints_per_tick": FINGERPRINTS_PER_TICK,
            "redrives_per_tick_per_reason": REDRIVES_PER_TICK,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "server": server_facts(database_url),
        },
    }


def _ticks(location: dg.Definitions, instance: dg.DagsterInstance, repeats: int) -> dict:
    figures = wall_seconds(repeats, sensor_tick(location, instance))
    figures["ticks_said"] = figures.pop("results")
    return figures


def sensor_tick(location: dg.Definitions, instance: dg.DagsterInstance) -> Callable[[], str | None]:
    """One tick of the location's redrive sensor as the daemon ticks it, the cursor kept
    from tick to tick; returns what the tick said when it skipped."""
    from jobs_platform.dead_letter.redrive_sensor import dead_letter_redrive_sensor

    sensor = location.get_sensor_def(dead_letter_redrive_sensor.name)
    cursor: list[str | None] = [None]

    def tick() -> str | None:
        context = dg.build_sensor_context(
            instance=instance,
            cursor=cursor[0],
            definitions=location,
            resources=dict(location.resources or {}),
        )
        result = sensor.evaluate_tick(context)
        cursor[0] = result.cursor
        return result.skip_message

    return tick


def _phases(location: dg.Definitions, url: str, instance: dg.DagsterInstance) -> dict[str, float]:
    """Where a tick's time goes: each question on its own (after the timed ticks)."""
    from jobs_platform.dead_letter import redrive as redrive_rules
    from jobs_platform.dead_letter.redrive_sensor import (
        FINGERPRINTS_PER_TICK,
        REDRIVES_PER_TICK,
        RedriveCursor,
        bound_fingerprints,
        find_redrives,
        redriven_backfills,
    )
    from jobs_platform.settings import Settings
    from jobs_platform.store.db import warehouse_engine

    repository = location.get_repository_def()
    specs = redriven_backfills(repository)
    engine = warehouse_engine(url)
    settings = Settings.from_env({"JOBS_PLATFORM_DATABASE_URL": url})
    assets = [spec.asset for spec in specs]
    phases: dict[str, float] = {}

    def timed(name: str, work: Callable[[], object]) -> None:
        began = time.perf_counter()
        work()
        phases[name] = round(time.perf_counter() - began, 4)

    def candidate_queries() -> None:
        with engine.connect() as connection:
            for spec in specs:
                redrive_rules.code_changed_entries(
                    connection, spec.asset, spec.version, max_redrives=3, limit=REDRIVES_PER_TICK
                )
            redrive_rules.fingerprinted_entries(
                connection, assets, after_id=0, max_redrives=3, limit=FINGERPRINTS_PER_TICK
            )
            Redrives(DATABASE_CLOCK).cooldown_due_entries(
                connection,
                assets,
                first_cooldown_seconds=900,
                max_redrives=3,
                limit=REDRIVES_PER_TICK,
            )
            redrive_rules.exhausted_entries_to_alert(
                connection, assets, max_redrives=3, sinks=["log"], limit=20
            )

    timed("candidate_queries", candidate_queries)
    with contextlib.ExitStack() as stack:
        began = time.perf_counter()
        fingerprints = stack.enter_context(
            bound_fingerprints(specs, repository, _quiet(), instance)
        )
        phases["resources_built"] = round(time.perf_counter() - began, 4)
        timed(
            "find_redrives_with_fingerprints",
            lambda: find_redrives(
                Warehouse(engine, DATABASE_CLOCK), specs, settings, RedriveCursor(), fingerprints
            ),
        )
    return phases


def _quiet():
    import logging

    return logging.getLogger("benchmarks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redrive",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--entries", type=int, default=10_000, metavar="N")
    parser.add_argument("--assets", type=int, default=3, metavar="A")
    return json_report_main(
        parser,
        argv,
        lambda url, args: run_redrive_bench(url, args.entries, args.assets, args.repeats),
    )


if __name__ == "__main__":
    sys.exit(main())
