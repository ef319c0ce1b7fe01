"""`bench status`: the operator commands on a warehouse of 10,000 partitions per asset.

It builds, in a fresh schema, what a long-lived deployment accumulates: for each backfill
asset of the code location, `partitions` partition rows (mostly done, with durations and
row counts; some failed; a few in flight with a live lease), an attempt history, and
`quarantined` quarantine entries spread over the assets, each with its failing attempts;
plus the dynamic `customers` partitions on a scratch Dagster instance, and the location's
backfill catalog (as `jobs-platform db upgrade` writes it). It then times:

- `jobs-platform status -m M --json` as a user runs it, a new process each (interpreter
  start and imports included): from the catalog, and with `--load-location` (importing
  Dagster and the location for the partition keys), alternated run by run;
- `jobs-platform dead-letter list --json` likewise;
- the same work inside this process (`status_report`, the dead-letter listing): what the
  commands cost beyond starting Python;
- the `platform_health` asset materialized in this process (a Dagster run included).

Each after a warm-up, `repeats` times: the median, min and max (seconds).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import sqlalchemy as sa

from benchmarks import EXAMPLE_MODULE
from benchmarks.database import copy_rows, fresh_schema, server_facts
from benchmarks.timing import alternated_wall_seconds, run_command
from jobs_platform.store.db import dispose_engines, normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import attempts, leases, partitions, quarantine

FIRST_DAY = dt.date(2024, 1, 1)
CUSTOMER_PARTITIONS = "customers"
FAILED_EVERY = 50  # one partition in 50 failed and waiting for a retry
IN_FLIGHT = 3  # partitions per asset with a live lease


def run_status_bench(
    database_url: str,
    partition_count: int,
    quarantined: int,
    repeats: int = 5,
    module: str = EXAMPLE_MODULE,
):
    """Build the warehouse, time the commands; a JSON-ready dict.

    `module`: the code location whose backfills get the partition rows and whose `status`
    is timed.
    """
    if partition_count < 1 or quarantined < 0 or quarantined > partition_count or repeats < 1:
        raise ValueError("need --partitions >= 1, 0 <= --quarantined <= --partitions, repeats >= 1")

    from jobs_platform.location import load_definitions
    from jobs_platform.orchestration.tags import BACKFILL_TAG

    defs = load_definitions(module)

    assets = sorted(
        spec.key.to_user_string()
        for spec in defs.resolve_all_asset_specs()
        if spec.tags.get(BACKFILL_TAG) == "true"
    )
    load_before = round(os.getloadavg()[0], 2)
    with seeded_warehouse(database_url, "status", assets, partition_count, quarantined) as (
        url,
        folder,
        home,
        env,
        build_seconds,
    ):
        write_catalog_as_deployed(url, home, module, defs)
        cli = str(Path(sys.executable).with_name("jobs-platform"))
        status = [cli, "status", "-m", module, "--json"]
        results = alternated_wall_seconds(
            repeats,
            {
                "status_cli_catalog": lambda: answered_from(status, "catalog", env, folder),
                "status_cli_load_location": lambda: answered_from(
                    [*status, "--load-location"], "location", env, folder
                ),
            },
        )
        results["dead_letter_list_cli"] = _timed(
            repeats, lambda: run_command([cli, "dead-letter", "list", "--json"], env, folder)
        )
        results.update(_in_process(url, home, repeats, module))
        listed = run_command([cli, "dead-letter", "list", "--json"], env, folder)
    return {
        "partitions_per_asset": partition_count,
        "quarantine_entries": quarantined,
        "assets": assets,
        "results": results,
        "notes": {
            "repeats": repeats,
            "build_seconds": round(build_seconds, 2),
            "dead_letter_entries_listed": listed.stdout.count('"partition"'),
            "load_average_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "server": server_facts(database_url),
        },
    }


@contextlib.contextmanager
def seeded_warehouse(
    database_url: str, label: str, assets: list[str], partition_count: int, quarantined: int
):
    """A fresh schema holding `partition_count` partition rows per asset (`quarantined` of
    them quarantined) and a Dagster home knowing the dynamic keys: (url, folder, home, the
    environment of a command against them, seconds it took to build)."""
    import dagster as dg

    with (
        tempfile.TemporaryDirectory(prefix=f"jp_bench_{label}_") as folder,
        fresh_schema(database_url, label) as url,
    ):
        home = Path(folder) / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        keys = _partition_keys(partition_count)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_dynamic_partitions(CUSTOMER_PARTITIONS, keys["dynamic"])
        build_seconds = _build_warehouse(url, assets, keys, partition_count, quarantined)
        env = {**os.environ, "JOBS_PLATFORM_DATABASE_URL": url, "DAGSTER_HOME": str(home)}
        env.pop("JOBS_PLATFORM_FAILPOINTS", None)
        yield url, folder, home, env, build_seconds


def write_catalog_as_deployed(url: str, home: Path, module: str, defs) -> None:
    """The location's catalog, as `jobs-platform db upgrade -m MODULE` writes it."""
    import dagster as dg

    from jobs_platform.engine.warehouse import Warehouse
    from jobs_platform.orchestration.catalog import location_assets, write_location_catalog
    from jobs_platform.store.clock import DATABASE_CLOCK

    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            store = Warehouse(engine, DATABASE_CLOCK)
            write_location_catalog(store, module, location_assets(defs), instance)
    finally:
        engine.dispose()


def answered_from(command: list[str], source: str, env: dict, folder: str) -> dict:
    """Run `status --json`; its report, which must have come from `source`."""
    finished = run_command(command, env, folder)
    report = json.loads(finished.stdout)
    if report["source"] != source:
        raise RuntimeError(
            f"{' '.join(command[1:])} answered from the {report['source']}, not {source}"
        )
    return report


def _partition_keys(count: int) -> dict[str, list[str]]:
    days = [(FIRST_DAY + dt.timedelta(days=offset)).isoformat() for offset in range(count)]
    return {"daily": days, "dynamic": [str(1_000_000 + n) for n in range(count)]}


def _build_warehouse(
    url: str, assets: list[str], keys: dict[str, list[str]], count: int, quarantined: int
) -> float:
    began = time.perf_counter()
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        upgrade_warehouse(engine)
        now = dt.datetime.now(dt.UTC)
        with engine.begin() as connection:
            for position, asset in enumerate(assets):
                asset_keys = keys["dynamic" if asset == "customer_order_history" else "daily"]
                share = quarantined // len(assets) + (position < quarantined % len(assets))
                seed_partitions(connection, asset, asset_keys[:count], share, now)
    finally:
        engine.dispose()
    return time.perf_counter() - began


EntryFactory = Callable[[str, str, int, dt.datetime], dict]
"""(asset, partition, its position, when it failed) -> the open quarantine entry's row."""


def seed_partitions(
    connection: sa.Connection,
    asset: str,
    keys: Sequence[str],
    quarantined: int,
    now: dt.datetime,
    entry: EntryFactory | None = None,
) -> None:
    """A long-lived backfill's state, streamed with COPY: a partition row per key (the
    last `quarantined` quarantined, one in `FAILED_EVERY` failed, the rest done, with
    durations and row counts), its attempts, an open quarantine entry per quarantined
    key (`entry` builds it; by default one malformed-JSON cause), and `IN_FLIGHT` live
    leases. Partition n was updated `len(keys) - n` minutes before `now`."""
    first_poisoned = len(keys) - quarantined

    def state(n: int) -> str:
        if n >= first_poisoned:
            return "quarantined"
        return "failed" if n % FAILED_EVERY == 7 else "done"

    def at(n: int) -> dt.datetime:
        return now - dt.timedelta(minutes=len(keys) - n)

    def partition_rows() -> Iterator[dict]:
        for n, key in enumerate(keys):
            yield {
                "asset": asset, "partition": key, "status": state(n), "episode": 1,
                "fingerprint": f"sha256:{n:064x}"[:71], "row_count": 10_000 + n % 1_000,
                "duration_seconds": 0.5 + (n % 100) / 40, "run_id": f"run-{n // 30:08d}",
                "updated_at": at(n),
            }  # fmt: skip

    def attempt_rows() -> Iterator[dict]:
        for n, key in enumerate(keys):
            kind = state(n)
            if kind == "quarantined":
                for number in (1, 2, 3):
                    yield _attempt(asset, key, number, at(n), "terminal")
            else:
                yield _attempt(asset, key, 1, at(n), "retryable" if kind == "failed" else None)

    quarantine_rows = (
        (entry or _malformed_json_entry)(asset, key, n, at(n))
        for n, key in enumerate(keys)
        if n >= first_poisoned
    )
    lease_rows = (
        {
            "asset": asset, "partition": key, "token": 2, "holder": "bench:1",
            "run_id": "run-live", "acquired_at": now, "expires_at": now + dt.timedelta(hours=1),
        }
        for key in keys[:IN_FLIGHT]
    )  # fmt: skip
    copy_rows(connection, partitions, partition_rows())
    copy_rows(connection, attempts, attempt_rows())
    copy_rows(connection, quarantine, quarantine_rows)
    copy_rows(connection, leases, lease_rows)


def _malformed_json_entry(asset: str, key: str, n: int, at: dt.datetime) -> dict:
    return {
        "asset": asset, "partition": key, "episode": 1, "status": "quarantined",
        "attempts": 3, "error_class": "terminal", "error_type": "InputValidationError",
        "last_error": f"line {n % 997 + 1}: malformed JSON in {asset}/{key}",
        "first_failed_at": at, "last_failed_at": at, "quarantined_at": at,
    }  # fmt: skip


def _attempt(asset: str, key: str, number: int, at: dt.datetime, error_class: str | None) -> dict:
    return {
        "asset": asset, "partition": key, "episode": 1, "attempt": number,
        "run_id": f"run-{key}", "step_retry": number - 1, "token": number, "holder": "bench:1",
        "outcome": "failed" if error_class else "succeeded", "error_class": error_class,
        "error_type": "InputValidationError" if error_class else None,
        "message": "malformed JSON" if error_class else None,
        "started_at": at, "ended_at": at,
    }  # fmt: skip


def _in_process(url: str, home: Path, repeats: int, module: str) -> dict[str, dict]:
    import dagster as dg

    from jobs_platform.dead_letter.entries import list_entries
    from jobs_platform.dead_letter.view import entry_summary
    from jobs_platform.location import load_definitions
    from jobs_platform.orchestration.health import status_report
    from jobs_platform.orchestration.resources import JobsPlatformResource
    from jobs_platform.settings import Settings

    defs = load_definitions(module)
    # The asset as the code location declares it (not resolved: that one has the
    # location's resources bound, and this run brings its own).
    platform_health = next(
        asset
        for asset in defs.assets or ()
        if isinstance(asset, dg.AssetsDefinition) and dg.AssetKey("platform_health") in asset.keys
    )
    settings = Settings.from_env({"JOBS_PLATFORM_DATABASE_URL": url})
    engine = warehouse_engine(url)

    def dead_letter_listing() -> int:
        with engine.connect() as connection:
            return len([entry_summary(row) for row in list_entries(connection)])

    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            specs = defs.resolve_all_asset_specs()
            status_report(specs, instance, settings)  # warm: schema checked, engine connected
            figures = {
                "status_in_process": _timed(
                    repeats, lambda: status_report(specs, instance, settings)
                ),
                "dead_letter_list_in_process": _timed(repeats, dead_letter_listing),
            }

            def materialize_health() -> None:
                result = dg.materialize(
                    [platform_health],
                    instance=instance,
                    resources={"jobs_platform": JobsPlatformResource(database_url=url)},
                    run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                    raise_on_error=False,
                )
                if not result.success:
                    raise RuntimeError(f"platform_health run {result.run_id} failed")

            figures["platform_health_materialize_in_process"] = _timed(repeats, materialize_health)
    finally:
        dispose_engines()
    return figures


def _timed(repeats: int, work: Callable[[], object]) -> dict:
    """Wall seconds of each repeat, and CPU seconds (user + system) of this process and
    of the child processes it waited for: on a shared machine, CPU is the steadier figure."""
    seconds, cpu = [], []
    for _ in range(repeats):
        cpu_before = _cpu_seconds()
        began = time.perf_counter()
        work()
        seconds.append(round(time.perf_counter() - began, 4))
        cpu.append(round(_cpu_seconds() - cpu_before, 3))
    return {"best_seconds": min(seconds), "median_seconds": statistics.median(seconds),
            "min_seconds": min(seconds), "max_seconds": max(seconds),
            "seconds": seconds, "cpu_seconds": cpu}  # fmt: skip


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
