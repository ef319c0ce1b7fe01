"""The Dagster instance on PostgreSQL (dagster-postgres through psycopg2, as the stack's
template writes it): runs, event logs, schedules and sensors all live there."""

from __future__ import annotations

import dagster as dg
from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType

from deploy import stack
from jobs_platform_tests.commands import REPO_ROOT, run_cli
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.databases import prepare_warehouse
from jobs_platform_tests.distributed.cluster import seed, stop_now
from jobs_platform_tests.environments import platform_environment
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.waiting import wait_for
from orders_example.definitions import defs
from orders_example.orders.assets import daily_revenue, orders

DAY = "2024-01-04"
DAEMON_SECONDS = 180


def test_the_instance_template_uses_psycopg2_not_a_bare_postgresql_scheme(instance_home):
    config = (instance_home / "dagster.yaml").read_text()

    assert "scheme: postgresql+psycopg2" in config
    with dg.DagsterInstance.from_config(str(instance_home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"


def test_a_run_and_its_event_log_are_stored_in_postgres(
    pg_url, instance_home, tmp_path, monkeypatch
):
    prepare_warehouse(pg_url)
    env = platform_environment(pg_url, tmp_path, DAGSTER_HOME=str(instance_home))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seed(env, DAY, DAY)

    with dg.DagsterInstance.from_config(str(instance_home)) as instance:
        result = materialize([orders, daily_revenue], DAY, instance=instance)

        run = instance.get_run_by_id(result.run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        events = {entry.dagster_event_type for entry in instance.all_logs(result.run_id)}
        assert {dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.STEP_SUCCESS} <= events
        stored = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("orders"), asset_partitions=[DAY]),
            limit=1,
        ).records
        assert len(stored) == 1


def test_the_daemon_ticks_sensors_and_a_started_schedule_on_a_postgres_instance(
    pg_url, instance_home, tmp_path
):
    prepare_warehouse(pg_url)
    env = platform_environment(pg_url, tmp_path, DAGSTER_HOME=str(instance_home))
    workspace = str(REPO_ROOT / "workspace.yaml")
    started = run_cli(
        [str(stack.BIN / "dagster"), "schedule", "start", "orders_daily_schedule",
         "-w", workspace],
        env,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    layout = stack.StackLayout(tmp_path / "stack")
    stack.start_process(
        layout,
        "daemon",
        [str(stack.BIN / "dagster-daemon"), "run", "-w", workspace],
        stack.process_environment(fast_daemon_loops(env)),  # its loops every second
        cwd=tmp_path,
    )
    try:
        with dg.DagsterInstance.from_config(str(instance_home)) as instance:
            schedules = instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE)
            assert [s.instigator_name for s in schedules] == ["orders_daily_schedule"]
            assert schedules[0].status == InstigatorStatus.RUNNING
            ticked = wait_for(
                lambda: _sensors_with_ticks(instance),
                timeout=DAEMON_SECONDS,
                interval=1,
                what="a sensor tick stored by the daemon",
            )
    finally:
        stop_now(layout, "daemon")
    assert ticked <= {sensor.name for sensor in defs.sensors}


def _sensors_with_ticks(instance: dg.DagsterInstance) -> set[str]:
    return {
        state.instigator_name
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
    }
