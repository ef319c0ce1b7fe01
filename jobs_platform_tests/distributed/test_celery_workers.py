"""Backfills on Celery workers: spread over workers, a worker killed mid-chunk, a worker
that does not know the warehouse. Real brokers, real worker processes, a PostgreSQL
Dagster instance and a PostgreSQL warehouse."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.orchestration.executors import platform_executor
from jobs_platform.orchestration.step_bounds import STOP_GRACE_SECONDS
from jobs_platform.settings import Settings
from jobs_platform_tests.commands import ORDERS_BACKFILL_STEP, start_run
from jobs_platform_tests.distributed.cluster import (
    celery_step_hosts,
    distributed_environment,
    process_group_of,
    runs_in_status,
    seed,
    step_failure_messages,
    step_start_pids,
)
from jobs_platform_tests.distributed.short_grace_location import (
    SHORT_STOP_GRACE_SECONDS,
    short_grace_celery_executor,
)
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materializations_metadata
from jobs_platform_tests.waiting import wait_for

SHORT_GRACE_LOCATION = "jobs_platform_tests.distributed.short_grace_location"
DAYS = [f"2024-01-0{day}" for day in range(1, 7)]
RUN_SECONDS = 240  # a run of two steps on a busy two-core machine, queue wait included
LEASE_SECONDS = 10  # TEST_ENV_DEFAULTS
STALL_SECONDS = 20  # the failpoint's pause that holds a partition mid-chunk
# How long after the SIGKILL the run must have finished: one lease TTL, plus the pause
# again (before failpoints counted warehouse attempts a redelivery re-armed it), plus
# redelivery, a new pool process, imports and the remaining chunks.
RECOVERY_BOUND_SECONDS = LEASE_SECONDS + STALL_SECONDS + 60
COMMITTED_CHUNKS = sa.text(
    "SELECT count(*) FROM jp_checkpoints WHERE asset = 'orders' AND partition = :day"
)


def assert_tables_equal_reference(env: dict[str, str], days: list[str]) -> None:
    engine = engine_from(env)
    expected_orders, expected_revenue = [], []
    for day in days:
        orders_rows, revenue_rows = expected_tables_from_landing(env["JOBS_PLATFORM_LANDING"], day)
        expected_orders += orders_rows
        expected_revenue += revenue_rows
    assert table_snapshot(engine, "orders") == sorted(expected_orders)
    assert table_snapshot(engine, "daily_revenue") == sorted(expected_revenue)


def finish(process: subprocess.Popen, timeout: float = RUN_SECONDS) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"run process {process.pid} still running after {timeout}s") from None


def only_run_for(instance: dg.DagsterInstance, partition: str) -> dg.DagsterRun:
    runs = [r for r in instance.get_runs() if r.tags.get("dagster/partition") == partition]
    assert len(runs) == 1, [r.run_id for r in runs]
    return runs[0]


@pytest.mark.slow
def test_six_partitions_run_in_both_workers_and_match_the_reference(
    pg_url, instance_home, broker, workers, tmp_path
):
    broker_url, backend_url = broker
    env = distributed_environment(pg_url, instance_home, tmp_path, broker_url, backend_url)
    started = workers.launch(2, env, cwd=tmp_path)
    seed(env, DAYS[0], DAYS[-1])
    workers.wait_until_ready(started)

    runs = [start_run(env, day, log_path=tmp_path / f"run-{day}.log") for day in DAYS]
    codes = [finish(run) for run in runs]

    assert codes == [0] * len(DAYS), [
        (tmp_path / f"run-{day}.log").read_text()[-3000:]
        for day, c in zip(DAYS, codes, strict=False)
        if c
    ]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        hosts = set()
        for day in DAYS:
            run = only_run_for(instance, day)
            assert run.status == dg.DagsterRunStatus.SUCCESS
            for step_hosts in celery_step_hosts(instance, run.run_id).values():
                hosts.update(host.split("@")[0] for host in step_hosts)
        assert hosts == {"w1", "w2"}
        assert runs_in_status(instance, dg.DagsterRunStatus.STARTED) == []
    assert_tables_equal_reference(env, DAYS)
    with engine_from(env).connect() as connection:
        duplicates = connection.execute(
            sa.text("SELECT count(*) - count(DISTINCT order_id) FROM orders")
        ).scalar_one()
    assert duplicates == 0


def test_sigkill_of_the_pool_process_mid_chunk_finishes_the_partition_once_in_the_same_run(
    pg_url, instance_home, rabbitmq_url, workers, tmp_path
):
    day = "2024-01-02"
    env = distributed_environment(
        pg_url,
        instance_home,
        tmp_path,
        rabbitmq_url,
        "rpc://",
        JOBS_PLATFORM_FAILPOINTS=f"after_commit@orders/{day}#1=sleep:{STALL_SECONDS}*1",
    )
    started = workers.launch(2, env, cwd=tmp_path)
    seed(env, day, day, orders_per_day=500)
    workers.wait_until_ready(started)
    engine = engine_from(env)

    run_process = start_run(env, day, chunk_rows=100, log_path=tmp_path / "run.log")
    wait_for(
        lambda: _committed_chunks(engine, day) >= 2,
        timeout=RUN_SECONDS,
        what="chunks 0 and 1 committed (the attempt is then stalled after chunk 1)",
    )
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        run = only_run_for(instance, day)
        (pool_pid,) = step_start_pids(instance, run.run_id, ORDERS_BACKFILL_STEP)
    assert process_group_of(pool_pid) in workers.process_groups(), "not one of our workers"
    os.kill(pool_pid, signal.SIGKILL)

    # The bound is the deadline of the wait: a run still going past it fails the test.
    code = finish(run_process, timeout=RECOVERY_BOUND_SECONDS)

    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS
        pids = step_start_pids(instance, run.run_id, ORDERS_BACKFILL_STEP)
        assert len(pids) == 2 and pids[0] == pool_pid and pids[1] != pool_pid
        (materialized,) = materializations_metadata(instance, "orders", day)
        assert runs_in_status(instance, dg.DagsterRunStatus.STARTED) == []
    # The two chunks committed before the kill were not applied again.
    assert materialized["chunks_resumed"] == 2
    assert materialized["chunks_written"] == 3
    assert_tables_equal_reference(env, [day])
    with engine.connect() as connection:
        leases = connection.execute(
            sa.text("SELECT count(*) FROM jp_leases WHERE holder IS NOT NULL")
        ).scalar_one()
        crashes = connection.execute(
            sa.text("SELECT count(*) FROM jp_attempts WHERE error_class = 'crash'")
        ).scalar_one()
    assert leases == 0
    assert crashes == 1


def test_worker_without_a_warehouse_url_fails_the_step_naming_the_variable_and_writes_nothing(
    pg_url, instance_home, rabbitmq_url, workers, tmp_path
):
    day = "2024-01-03"
    env = distributed_environment(pg_url, instance_home, tmp_path, rabbitmq_url, "rpc://")
    worker_folder = tmp_path / "worker_cwd"
    worker_folder.mkdir()
    started = workers.launch(1, env, cwd=worker_folder, unset=("JOBS_PLATFORM_DATABASE_URL",))
    seed(env, day, day)
    workers.wait_until_ready(started)

    code = finish(start_run(env, day, log_path=tmp_path / "run.log"))

    assert code != 0
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        run = only_run_for(instance, day)
        assert run.status == dg.DagsterRunStatus.FAILURE
        (message,) = step_failure_messages(instance, run.run_id)
        assert "JOBS_PLATFORM_DATABASE_URL" in message
        assert "WarehouseNotShared" in message
        # Terminal: failed once, no step retry.
        assert len(step_start_pids(instance, run.run_id, ORDERS_BACKFILL_STEP)) == 1
    with engine_from(env).connect() as connection:
        for table in ("orders", "daily_revenue", "jp_checkpoints", "jp_attempts", "jp_quarantine"):
            rows = sa.select(sa.func.count()).select_from(sa.table(table))
            assert connection.execute(rows).scalar_one() == 0, table
    assert list(worker_folder.rglob("*.db")) == []


def _committed_chunks(engine: sa.Engine, day: str) -> int:
    try:
        with engine.connect() as connection:
            return connection.execute(COMMITTED_CHUNKS, {"day": day}).scalar_one()
    except sa.exc.ProgrammingError:
        return 0  # the tables do not exist yet


def test_a_terminated_run_stops_waiting_for_a_step_no_worker_picked_up(
    pg_url, instance_home, rabbitmq_url, tmp_path
):
    # The run's location is the bundled one with a shorter stop grace and nothing else
    # changed; the bundled location itself waits STOP_GRACE_SECONDS.
    bundled, short_grace = platform_executor(celery_settings()), short_grace_celery_executor()
    assert short_grace.executor_creation_fn is bundled.executor_creation_fn
    assert executor_config(bundled) == {
        **executor_config(short_grace),
        "stop_grace_seconds": STOP_GRACE_SECONDS,
    }
    day = "2024-01-05"
    env = distributed_environment(pg_url, instance_home, tmp_path, rabbitmq_url, "rpc://")
    seed(env, day, day)
    log = tmp_path / "run.log"
    run_process = start_run(env, day, log_path=log, module=SHORT_GRACE_LOCATION)  # no worker
    wait_for(
        lambda: "Submitting celery task" in log.read_text(),
        timeout=RUN_SECONDS,
        what="the step submitted to the broker",
    )

    os.killpg(run_process.pid, signal.SIGTERM)
    terminated_at = time.monotonic()
    # Stopping takes the grace plus shutting down; a run that waited on for ever fails here.
    code = finish(run_process, timeout=SHORT_STOP_GRACE_SECONDS + 60)
    stopped_after = time.monotonic() - terminated_at

    assert code != 0
    output = log.read_text()
    assert "revoking active tasks" in output
    # It gave a worker the grace to report the revoked step, then stopped waiting for it:
    # timed here and on the run's own log (whole seconds, and a whole-second grace).
    assert stopped_after >= SHORT_STOP_GRACE_SECONDS
    waited = logged_at(output, "was revoked.") - logged_at(output, "revoking active tasks")
    assert waited.total_seconds() >= SHORT_STOP_GRACE_SECONDS
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert only_run_for(instance, day).status == dg.DagsterRunStatus.FAILURE
        assert runs_in_status(instance, dg.DagsterRunStatus.STARTED) == []


def logged_at(output: str, text: str) -> dt.datetime:
    """When the run logged the first line holding `text`, to the second."""
    line = next(line for line in output.splitlines() if text in line)
    return dt.datetime.strptime(line[: len("2024-01-01 00:00:00 +0000")], "%Y-%m-%d %H:%M:%S %z")


def celery_settings() -> Settings:
    return Settings.from_env({**os.environ, "JOBS_PLATFORM_EXECUTOR": "celery"})


def executor_config(executor: dg.ExecutorDefinition) -> dict:
    """The config a run of a location on `executor` gets when its run config sets none."""
    resolved = executor.config_schema.resolve_config({})
    assert resolved.success, resolved.errors
    return resolved.value["config"]
