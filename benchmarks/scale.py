"""`bin/bench scale`: the operator's commands on an hourly backfill of 100,000
partitions (11.4 years) with a dead letter of 10,000 open entries.

It builds, in a fresh schema, streamed with COPY (`bench.status.seed_partitions`): the
`events` backfill of `bench.scale_location`, hourly and exactly `--partitions` keys long
as of now, each partition with its state (mostly done, one in 50 failed, a few in flight)
and attempts; its last `--entries` partitions quarantined, each entry from the dead
letter's mix of causes (`bench.triage.CauseMix`), with its landing file, fingerprint and
code version current (the redrive sensor's steady state: nothing to release, the
fingerprint walk still done); and the location's catalog, as `jobs-platform db upgrade`
writes it. It then times, alternated round by round after a warm-up
(`bench.timing.alternated`):

- `jobs-platform status -m bench.scale_location --json`, a new process each (interpreter
  start and imports included), as a person runs it;
- a cold scrape of a real `jobs-platform metrics serve --cache-seconds 0` (`bench.metrics`),
  and that server's peak resident memory once every scrape is done (`notes`);
- `jobs-platform dead-letter groups --json`, a new process each;
- one tick of the location's redrive sensor in this process, as the daemon ticks it
  (`bench.redrive.sensor_tick`).

Each against a 1 s target; the seeding's seconds are reported apart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from benchmarks import scale_location
from benchmarks.database import fresh_schema, server_facts
from benchmarks.metrics import metrics_server, scrape
from benchmarks.redrive import CURRENT_VERSION, landing_file, sensor_tick
from benchmarks.status import answered_from, seed_partitions, write_catalog_as_deployed
from benchmarks.timing import alternated, run_command, seconds_of
from benchmarks.triage import CauseMix
from jobs_platform.store.db import normalize_url
from jobs_platform.store.migrate import upgrade_warehouse

TARGET_SECONDS = 1.0
MODULE = scale_location.__name__
TIMED = ("status_cli", "metrics_scrape_cold", "dead_letter_groups_cli", "redrive_tick")


@dataclass(frozen=True)
class ScaleWarehouse:
    """The seeded warehouse, and how a command reaches it."""

    url: str
    folder: str
    home: Path
    landing: Path
    env: dict[str, str]
    start: dt.datetime
    seed_seconds: dict[str, float]


def run_scale_bench(database_url: str, partition_count: int, entries: int, repeats: int = 5,
                    warmup: int = 1) -> dict:  # fmt: skip
    """Seed the warehouse, time the four; a JSON-ready dict."""
    if partition_count < 1 or not 0 <= entries <= partition_count or repeats < 1:
        raise ValueError("need --partitions >= 1, 0 <= --entries <= --partitions, --repeats >= 1")
    import dagster as dg

    load_before = round(os.getloadavg()[0], 2)
    with seeded_scale_warehouse(database_url, partition_count, entries) as warehouse:
        cli = str(Path(sys.executable).with_name("jobs-platform"))
        status = [cli, "status", "-m", MODULE, "--json"]
        groups = [cli, "dead-letter", "groups", "--json"]
        location = scale_location.scale_definitions(
            warehouse.start, str(warehouse.landing), warehouse.url
        )
        with (
            metrics_server(warehouse.env, warehouse.folder, MODULE) as server,
            dg.DagsterInstance.ephemeral() as instance,
        ):
            tick = sensor_tick(location, instance)
            said: list[str | None] = []
            runs = alternated(
                {
                    "status_cli": seconds_of(
                        lambda: answered_from(status, "catalog", warehouse.env, warehouse.folder)
                    ),
                    "metrics_scrape_cold": seconds_of(lambda: scrape(server.address)),
                    "dead_letter_groups_cli": seconds_of(
                        lambda: run_command(groups, warehouse.env, warehouse.folder)
                    ),
                    "redrive_tick": seconds_of(lambda: said.append(tick())),
                },
                repeats,
                warmup,
            )
            report = answered_from(status, "catalog", warehouse.env, warehouse.folder)
            exposition = scrape(server.address)
            serve_peak_mib = server.peak_rss_mib()
    results = {name: runs[name].figures(partition_count) for name in TIMED}
    for name in ("dead_letter_groups_cli", "redrive_tick"):
        results[name] |= {"rows": entries, "rows_per_s": round(entries / results[name]["seconds"])}
    return {
        "partitions": partition_count,
        "entries": entries,
        "asset": scale_location.ASSET,
        "first_partition": warehouse.start.strftime(scale_location.KEY_FORMAT),
        "target_seconds": TARGET_SECONDS,
        "results": results,
        "met": {name: results[name]["seconds"] < TARGET_SECONDS for name in TIMED},
        "notes": {
            "repeats": repeats,
            "warmup": warmup,
            "seed_seconds": warehouse.seed_seconds,
            "status_figures": report["assets"][scale_location.ASSET],
            "exposition_bytes": len(exposition),
            "metrics_serve_peak_rss_mib": serve_peak_mib,
            "redrive_ticks_said": sorted({str(text) for text in said}),
            "load_average_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "server": server_facts(database_url),
        },
    }


@contextlib.contextmanager
def seeded_scale_warehouse(
    database_url: str, partition_count: int, entries: int
) -> Iterator[ScaleWarehouse]:
    """A fresh schema holding the backfill's state and its dead letter, the location's
    catalog written; a Dagster home and landing folder beside it."""
    with (
        tempfile.TemporaryDirectory(prefix="jp_bench_scale_") as folder,
        fresh_schema(database_url, "scale") as url,
    ):
        home = Path(folder) / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        landing = Path(folder) / "landing"
        hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
        # The last partition is the hour before the current one: `partition_count` keys.
        start = hour - dt.timedelta(hours=partition_count)
        env = {
            **os.environ,
            "JOBS_PLATFORM_DATABASE_URL": url,
            "DAGSTER_HOME": str(home),
            scale_location.START_VARIABLE: start.isoformat(),
            scale_location.LANDING_VARIABLE: str(landing),
        }
        for name in ("JOBS_PLATFORM_MODULE", "JOBS_PLATFORM_FAILPOINTS"):
            env.pop(name, None)
        seconds = _seed(url, start, partition_count, entries, landing)
        began = time.perf_counter()
        location = scale_location.scale_definitions(start, str(landing), url)
        write_catalog_as_deployed(url, home, MODULE, location)
        seconds["catalog"] = round(time.perf_counter() - began, 2)
        yield ScaleWarehouse(url, folder, home, landing, env, start, seconds)


def _seed(
    url: str, start: dt.datetime, partition_count: int, entries: int, landing: Path
) -> dict[str, float]:
    began = time.perf_counter()
    keys = [
        (start + dt.timedelta(hours=n)).strftime(scale_location.KEY_FORMAT)
        for n in range(partition_count)
    ]
    now = dt.datetime.now(dt.UTC)
    causes = CauseMix()

    def entry(asset: str, key: str, n: int, at: dt.datetime) -> dict:
        # Failed just now, on this code and this input: the redrive's steady state.
        return causes.entry(asset, key, now) | {
            "code_version": CURRENT_VERSION,
            "fingerprint": landing_file(landing, asset, key),
        }

    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        upgrade_warehouse(engine)
        with engine.begin() as connection:
            seed_partitions(connection, scale_location.ASSET, keys, entries, now, entry)
        seeded = time.perf_counter()
        with engine.begin() as connection:  # as autovacuum would soon: the planner's figures
            connection.execute(
                sa.text("ANALYZE jp_partitions, jp_attempts, jp_quarantine, jp_leases")
            )
    finally:
        engine.dispose()
    return {
        "copy": round(seeded - began, 2),
        "analyze": round(time.perf_counter() - seeded, 2),
    }
