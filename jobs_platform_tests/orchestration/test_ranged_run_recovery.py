"""A ranged run (many partitions, the default backfill policy) whose worker dies is failed.

Ranged runs carry range tags instead of `dagster/partition`; the abandoned-run sensor and
the failure hook must recognise them. Real `dagster job execute` process, real SIGKILL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess

import dagster as dg
import sqlalchemy as sa

from jobs_platform.orchestration.recovery import abandoned_run_sensor
from jobs_platform.store.schema import attempts, checkpoints
from jobs_platform_tests.commands import DAGSTER, ORDERS_BACKFILL_ASSETS, _config_file
from jobs_platform_tests.databases import upgraded_warehouse
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.runs import chunk_rows_config
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.seed import seed_orders

FIRST, LAST = dt.date(2024, 9, 1), dt.date(2024, 9, 2)
CHUNK_ROWS = 50


def start_ranged_run(env: dict[str, str]) -> subprocess.Popen:
    config = {
        **chunk_rows_config(ORDERS_BACKFILL_ASSETS, CHUNK_ROWS),
        "execution": {"config": {"in_process": {}}},
    }
    tags = {
        "dagster/asset_partition_range_start": FIRST.isoformat(),
        "dagster/asset_partition_range_end": LAST.isoformat(),
    }
    command = [
        DAGSTER, "job", "execute", "-m", "orders_example.definitions", "-j", "orders_backfill",
        "--tags", json.dumps(tags), "--config", _config_file(config),
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def rows_of(env, table, **where) -> list[sa.Row]:
    with engine_from(env).connect() as connection:
        query = sa.select(table).where(*[table.c[k] == v for k, v in where.items()])
        return list(connection.execute(query.order_by(*table.primary_key.columns)))


def test_a_ranged_run_whose_worker_was_killed_is_failed_and_its_attempt_is_a_crash(
    pg_platform_env, monkeypatch
):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=200)
    upgraded_warehouse(pg_platform_env["JOBS_PLATFORM_DATABASE_URL"])
    monkeypatch.setenv("JOBS_PLATFORM_LEASE_SECONDS", "2")  # the sensor runs in this process
    env = {
        **pg_platform_env,
        "JOBS_PLATFORM_LEASE_SECONDS": "2",
        "JOBS_PLATFORM_FAILPOINTS": f"after_commit@orders/{FIRST.isoformat()}#1=sleep:30",
    }
    victim = start_ranged_run(env)
    wait_for(
        lambda: len(rows_of(env, checkpoints, partition=FIRST.isoformat())) >= 2,
        timeout=120,
        what="chunks 0 and 1 of the first day",
    )
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()

    from orders_example.definitions import defs

    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        assert "dagster/partition" not in run.tags  # a ranged run
        assert run.status == dg.DagsterRunStatus.STARTED

        def run_failed() -> bool:
            context = dg.build_sensor_context(
                instance=instance, definitions=defs, resources=dict(defs.resources)
            )
            abandoned_run_sensor.evaluate_tick(context)
            return instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE

        wait_for(run_failed, timeout=30, interval=0.5, what="the dead ranged run to be failed")

    history = rows_of(env, attempts, asset="orders")
    assert [(row.partition, row.error_class) for row in history] == [(FIRST.isoformat(), "crash")]
