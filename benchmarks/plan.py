"""`bench plan`: `jobs-platform plan` over a year of hourly partitions (8,760).

It seeds, in a fresh schema, the state a year-long hourly backfill has half way: the
hours' landing files (`hourly_events.seed_events`), and for `benchmarks.hourly_location`'s
`hourly_events` most hours done from the input on disk, some done from an older input,
some failed, some quarantined (an outage's, cooling down), a few in flight, the rest
missing. It then times the plan of the whole year:

- `plan_backfill` in this process (the keys, the warehouse read once per table, every done
  hour's input fingerprinted again, the rows and the estimate): what the command costs
  beyond starting Python and importing Dagster and the location;
- the same with `ready=` declared (`benchmarks.plan_ready_location`: ready once the hour's
  file has landed), so `ready` is asked about every hour the plan would run;
- `jobs-platform plan -m benchmarks.hourly_location hourly_events --from … --to … --json`
  as a user runs it, a new process each.

Each after a warm-up, `repeats` times: the median, min and max (seconds).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import sqlalchemy as sa

from benchmarks.database import fresh_schema
from benchmarks.hourly_events import file_fingerprint, hour_file, hour_keys, seed_events
from benchmarks.timing import run_command
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import attempts, leases, partitions, quarantine

MODULE = "benchmarks.hourly_location"
READY_MODULE = "benchmarks.plan_ready_location"
ASSET = "hourly_events"
PLAN_TARGET_SECONDS = 2.0  # the bound for 8,760 partitions, in this process
# Of every 100 hours: 5 done from an older input, 2 failed, 1 quarantined; 1 in 1,000 in
# flight; the last quarter of the year missing (the backfill is three quarters through).
CHANGED, FAILED, QUARANTINED, IN_FLIGHT_EVERY = 5, 2, 1, 1000


def run_plan_bench(database_url: str, hours: int = 8_760, repeats: int = 5) -> dict:
    """Seed the year, time its plan; a JSON-ready dict."""
    if hours < 1 or repeats < 1:
        raise ValueError("need --hours >= 1 and --repeats >= 1")
    keys = hour_keys(hours)
    with fresh_schema(database_url, "plan") as url, tempfile.TemporaryDirectory() as landing:
        seed_events(landing, hours, rows_per_partition=10)
        engine = warehouse_engine(url)
        upgrade_warehouse(engine)
        seeded = _seed_states(engine, landing, keys)
        env = {
            **os.environ,
            "JOBS_PLATFORM_DATABASE_URL": url,
            "JOBS_PLATFORM_LANDING": landing,
            "JOBS_PLATFORM_MODULE": MODULE,
        }
        env.pop("DAGSTER_HOME", None)  # an ephemeral instance: the plan writes nothing there
        in_process = _timed(repeats, lambda: _plan_here(url, landing, keys))
        asking_ready = _timed(repeats, lambda: _plan_here(url, landing, keys, READY_MODULE))
        command = [sys.executable, "-m", "jobs_platform.cli.main", "plan", "-m", MODULE, ASSET]
        command += ["--from", keys[0], "--to", keys[-1], "--json"]
        cli = _timed(repeats, lambda: run_command(command, env, os.getcwd()))
        totals = _plan_here(url, landing, keys)
        totals_asking_ready = _plan_here(url, landing, keys, READY_MODULE)
    return {
        "hours": hours,
        "repeats": repeats,
        "seeded": seeded,
        "totals": totals,
        "totals_asking_ready": totals_asking_ready,
        "results": {
            "plan_in_process": in_process,
            "plan_in_process_asking_ready": asking_ready,
            "plan_cli_process": cli,
        },
        "target": {
            "plan_in_process_seconds": PLAN_TARGET_SECONDS,
            "met": in_process["median_seconds"] < PLAN_TARGET_SECONDS,
            "met_asking_ready": asking_ready["median_seconds"] < PLAN_TARGET_SECONDS,
        },
        "notes": {"load_average_1m": round(os.getloadavg()[0], 2)},
    }


def _plan_here(url: str, landing: str, keys: list[str], module: str = MODULE) -> dict:
    from jobs_platform.engine.warehouse import ready_store
    from jobs_platform.location import load_definitions
    from jobs_platform.settings import Settings
    from jobs_platform.steering.plan_location import plan_backfill, plan_keys

    os.environ["JOBS_PLATFORM_LANDING"] = landing
    definitions = load_definitions(module)
    settings = Settings.from_env({**os.environ, "JOBS_PLATFORM_DATABASE_URL": url})
    chosen = plan_keys(definitions, ASSET, first=keys[0], last=keys[-1])
    plan = plan_backfill(definitions, ready_store(url), settings, ASSET, chosen)
    return plan.totals


def _timed(repeats: int, work: Callable[[], object]) -> dict:
    work()  # warm-up: imports, the location loaded, the database's caches
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return {
        "median_seconds": round(statistics.median(seconds), 3),
        "min_seconds": round(min(seconds), 3),
        "max_seconds": round(max(seconds), 3),
        "seconds": [round(s, 3) for s in seconds],
    }


def _seed_states(engine: sa.Engine, landing: str, keys: list[str]) -> dict[str, int]:
    """The year three quarters through: rows written in bulk, as runs would have left them."""
    now = dt.datetime.now(dt.UTC)
    through = len(keys) * 3 // 4
    states, entries, history, held = [], [], [], []
    for index, key in enumerate(keys[:through]):
        kind = index % 100
        status = "done"
        fingerprint = file_fingerprint(hour_file(landing, key))
        if kind < CHANGED:
            fingerprint = "an older input"
        elif kind < CHANGED + FAILED:
            status = "failed"
        elif kind < CHANGED + FAILED + QUARANTINED:
            status = "failed"
            entries.append(_entry(key, now))
        states.append(
            {
                "asset": ASSET,
                "partition": key,
                "status": status,
                "episode": 1,
                "fingerprint": fingerprint if status == "done" else None,
                "row_count": 10,
                "duration_seconds": 0.05 + (index % 7) / 100,
                "updated_at": now,
            }
        )
        history.append(_attempt(key, now, "succeeded" if status == "done" else "failed"))
        if index % IN_FLIGHT_EVERY == 999:
            held.append(
                {
                    "asset": ASSET,
                    "partition": key,
                    "token": 1,
                    "holder": "another-host:1",
                    "run_id": "a-run",
                    "acquired_at": now,
                    "expires_at": now + dt.timedelta(hours=1),
                }
            )
    with engine.begin() as connection:
        connection.execute(partitions.insert(), states)
        connection.execute(attempts.insert(), history)
        if entries:
            connection.execute(quarantine.insert(), entries)
        if held:
            connection.execute(leases.insert(), held)
    return {"partitions": len(states), "entries": len(entries), "leases": len(held)}


def _entry(key: str, now: dt.datetime) -> dict:
    return {
        "asset": ASSET,
        "partition": key,
        "episode": 1,
        "status": "quarantined",
        "attempts": 3,
        "error_class": "retryable",
        "error_type": "ConnectionError",
        "last_error": "the source is down",
        "quarantined_at": now,
    }


def _attempt(key: str, now: dt.datetime, outcome: str) -> dict:
    return {
        "asset": ASSET,
        "partition": key,
        "episode": 1,
        "attempt": 1,
        "outcome": outcome,
        "started_at": now,
        "ended_at": now,
    }
