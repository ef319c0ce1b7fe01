"""Operating it: graceful shutdown, the daily schedule, structured log lines."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal

import dagster as dg
import sqlalchemy as sa

from jobs_platform.orchestration.tags import CORRELATION_TAG
from jobs_platform.store.schema import attempts, leases, quarantine
from jobs_platform_tests.commands import ORDERS_BACKFILL_ASSETS, dagster_job_execute, start_run
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import chunk_rows_config, materialize
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 5, 9)
PARTITION = DAY.isoformat()
LIFECYCLE_FIELDS = {"event", "run_id", "asset", "partition", "attempt", "error_class"}


def test_sigterm_mid_partition_releases_the_lease_and_a_rerun_finishes_once(
    pg_platform_env, tmp_path
):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=200)
    engine = engine_from(pg_platform_env)
    env = {**pg_platform_env, "JOBS_PLATFORM_FAILPOINTS": "after_commit@orders#1=sleep:30"}
    run = start_run(env, PARTITION, chunk_rows=50, in_process=True, log_path=tmp_path / "a.log")

    def chunks_committed():
        with engine.connect() as connection:
            return connection.execute(
                sa.text("SELECT count(*) FROM jp_checkpoints WHERE asset = 'orders'")
            ).scalar_one()

    wait_for(lambda: chunks_committed() == 2, timeout=60, what="two committed chunks")
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(timeout=60) != 0  # the operator asked it to stop: the run fails

    with engine.connect() as connection:
        (attempt,) = connection.execute(sa.select(attempts)).all()
        lease = connection.execute(sa.select(leases)).one()
        assert connection.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar() == 0
    assert (attempt.outcome, attempt.error_class) == ("failed", "interrupted")
    assert lease.holder is None  # released, so a re-run starts at once
    assert len(table_snapshot(engine, "orders")) == 100  # chunks 0 and 1, nothing half-applied

    rerun = dagster_job_execute(
        pg_platform_env, PARTITION, config=chunk_rows_config(ORDERS_BACKFILL_ASSETS, 50)
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert len(table_snapshot(engine, "orders")) == 200
    with dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(dg.AssetKey("orders"), limit=5).records
    (metadata,) = [r.asset_materialization.metadata for r in records]
    assert (metadata["chunks_resumed"].value, metadata["chunks_written"].value) == (2, 2)


def test_daily_schedule_runs_yesterdays_partition():
    from orders_example.definitions import defs

    schedule = defs.resolve_schedule_def("orders_daily_schedule")
    tick = dt.datetime(2024, 5, 10, 0, 30, tzinfo=dt.UTC)

    result = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=tick))

    (request,) = result.run_requests
    assert request.partition_key == PARTITION
    assert schedule.job_name == "orders_backfill"


def test_dagster_job_execute_runs_the_schedules_partition(platform_env):
    from orders_example.definitions import defs

    schedule = defs.resolve_schedule_def("orders_daily_schedule")
    tick = dt.datetime(2024, 5, 10, 0, 30, tzinfo=dt.UTC)
    (request,) = schedule.evaluate_tick(
        dg.build_schedule_context(scheduled_execution_time=tick)
    ).run_requests
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=40)

    finished = dagster_job_execute(platform_env, request.partition_key)

    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert len(table_snapshot(engine_from(platform_env), "orders")) == 40


def test_json_log_lines_carry_the_lifecycle_fields(platform_env, monkeypatch):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=20)
    other_day = DAY + dt.timedelta(days=1)
    seed_orders(
        platform_env["JOBS_PLATFORM_LANDING"], other_day, other_day, poison_days=[other_day]
    )
    monkeypatch.setenv("JOBS_PLATFORM_LOG_FORMAT", "json")
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", f"read@orders/{PARTITION}=transient*1")
    tags = {CORRELATION_TAG: "req-42"}

    with dg.DagsterInstance.get() as instance:
        retried = materialize([orders, daily_revenue], PARTITION, instance=instance, tags=tags)
        poisoned = materialize([orders], other_day.isoformat(), instance=instance, tags=tags)
        records = [
            json.loads(entry.user_message)
            for run in (retried, poisoned)
            for entry in instance.all_logs(run.run_id)
            if entry.user_message.startswith("{")
        ]

    assert retried.success and not poisoned.success
    events = [record["event"] for record in records]
    # A partition of one chunk keeps no `chunk_committed` line; the retry keeps its `started`.
    for expected in (
        "started",
        "failed",
        "retrying",
        "succeeded",
        "quarantined",
    ):
        assert expected in events
    for record in records:
        assert set(record) >= LIFECYCLE_FIELDS
        assert record["correlation_id"] == "req-42"
        assert record["run_id"] in (retried.run_id, poisoned.run_id)
    retrying = next(record for record in records if record["event"] == "retrying")
    assert retrying["error_class"] == "retryable" and retrying["delay_seconds"] >= 0
    quarantined = next(record for record in records if record["event"] == "quarantined")
    assert (quarantined["error_class"], quarantined["partition"]) == (
        "terminal",
        other_day.isoformat(),
    )
