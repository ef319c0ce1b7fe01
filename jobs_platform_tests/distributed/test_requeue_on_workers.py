"""`jobs-platform dead-letter requeue` under Celery: the entry is released, the daemon's
requeue sensor launches its run, as every requeue's, and its steps run on the workers."""

from __future__ import annotations

import dagster as dg
import pytest

from deploy import stack
from jobs_platform_tests.commands import ORDERS_BACKFILL_STEP, REPO_ROOT, run_cli, start_run
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.distributed.cluster import (
    celery_step_hosts,
    distributed_environment,
    seed,
    stop_now,
)
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.waiting import wait_for

DAY = "2024-01-06"
# Daemon start-up, the sensor's 15 s interval, the run's process start and two steps.
REQUEUED_RUN_SECONDS = 240


@pytest.mark.slow
def test_a_requeue_from_the_cli_runs_on_the_celery_workers(
    pg_url, instance_home, rabbitmq_url, workers, tmp_path
):
    env = distributed_environment(pg_url, instance_home, tmp_path, rabbitmq_url, "rpc://")
    # The CLI requeues it, not the daemon's redrive sensor (which would release the entry
    # itself once the fixed input is seen, before or while the CLI does).
    env["JOBS_PLATFORM_MAX_REDRIVES"] = "0"
    started = workers.launch(1, env, cwd=tmp_path)
    run_cli([str(stack.BIN / "orders-example"), "seed", "--start", DAY, "--end", DAY,
             "--poison", DAY], env)  # fmt: skip
    workers.wait_until_ready(started)
    assert start_run(env, DAY, log_path=tmp_path / "poisoned.log").wait(timeout=240) != 0
    seed(env, DAY, DAY)  # the input is fixed

    layout = stack.StackLayout(tmp_path / "stack")
    stack.start_process(
        layout,
        "daemon",
        [str(stack.BIN / "dagster-daemon"), "run", "-w", str(REPO_ROOT / "workspace.yaml")],
        stack.process_environment(fast_daemon_loops(env)),  # its loops every second
        cwd=tmp_path,
    )
    try:
        requeued = run_cli(
            [str(stack.BIN / "jobs-platform"), "dead-letter", "requeue", "orders", DAY], env
        )
        assert requeued.returncode == 0, requeued.stdout + requeued.stderr
        assert "the code location's requeue sensor launches its run" in requeued.stdout, (
            requeued.stdout[-3000:]
        )
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            run = wait_for(
                lambda: _finished_requeue_run(instance),
                timeout=REQUEUED_RUN_SECONDS,
                interval=1,
                what="the requeue's run to finish",
            )
            assert run.status == dg.DagsterRunStatus.SUCCESS
            hosts = celery_step_hosts(instance, run.run_id)
    finally:
        stop_now(layout, "daemon")
    assert [host.split("@")[0] for host in hosts[ORDERS_BACKFILL_STEP]] == ["w1"]
    orders_rows, revenue_rows = expected_tables_from_landing(env["JOBS_PLATFORM_LANDING"], DAY)
    assert table_snapshot(engine_from(env), "orders") == orders_rows
    assert table_snapshot(engine_from(env), "daily_revenue") == revenue_rows


def _finished_requeue_run(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    for run in instance.get_runs():
        if run.tags.get("dagster/run_key", "").startswith("requeue-") and run.is_finished:
            return run
    return None
