"""`jobs-platform dead-letter requeue` beside a real `dagster-daemon` over a workspace.

The workspace names the code location itself (`location_name: shopco`), as a team's
deployment does: the command releases the entry and the location's requeue sensor, which
the daemon evaluates inside that location, launches its run there. The command never
names a location: whatever the workspace calls it, the run is launched in it.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from jobs_platform.orchestration.tags import RUN_KEY_TAG, requeue_run_key
from jobs_platform_tests.commands import JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.requeued_runs import (
    RUN_SECONDS,
    daemon_running,
    queueing_for_a_daemon,
)
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

MODULE = "orders_example.definitions"
LOCATION = "shopco"
DAY = dt.date(2024, 3, 2)
PARTITION = DAY.isoformat()
ORDERS_PER_DAY = 20


@pytest.fixture
def env(pg_platform_env) -> dict[str, str]:
    """The platform's environment: its instance queues runs for a daemon, and the redrive
    leaves a fixed input to the person requeuing it (it would release the entry itself)."""
    queueing_for_a_daemon(pg_platform_env["DAGSTER_HOME"])
    return {**pg_platform_env, "JOBS_PLATFORM_MAX_REDRIVES": "0"}


def dead_letter(env: dict[str, str], *args: str):
    return run_cli([JOBS_PLATFORM, "dead-letter", *args, "-m", MODULE], env)


def shown(env: dict[str, str]) -> dict:
    finished = dead_letter(env, "show", "orders", PARTITION, "--json")
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout)


def quarantined_then_fixed(env: dict[str, str]) -> int:
    """Quarantine the day for a malformed line, then fix its file; the entry's id."""
    landing = env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=ORDERS_PER_DAY, poison_days=[DAY])
    assert not materialize([orders, daily_revenue], PARTITION).success
    seed_orders(landing, DAY, DAY, orders_per_day=ORDERS_PER_DAY)
    return shown(env)["entry"]["id"]


def ended_run(instance: dg.DagsterInstance, run_key: str) -> dg.DagsterRun | None:
    runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: run_key}))
    return runs[0] if runs and runs[0].is_finished else None


@pytest.mark.slow
def test_a_requeue_runs_in_the_location_the_workspace_names_and_the_partition_is_done(
    env, tmp_path
):
    entry_id = quarantined_then_fixed(env)

    with (
        daemon_running(
            env, tmp_path / "daemon", MODULE, location_name=LOCATION,
            sensor_seconds={"requeue_sensor": 1},
        ),
        dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance,
    ):  # fmt: skip
        requeued = dead_letter(env, "requeue", "orders", PARTITION)
        assert requeued.returncode == 0, requeued.stdout + requeued.stderr
        assert "the code location's requeue sensor launches its run" in requeued.stdout
        assert "warning" not in requeued.stderr  # a daemon serves the instance
        run = wait_for(
            lambda: ended_run(instance, requeue_run_key(entry_id)),
            timeout=RUN_SECONDS,
            interval=0.5,
            what="the requeue's run to end",
        )

    assert run.status == dg.DagsterRunStatus.SUCCESS, run.tags
    assert run.remote_job_origin is not None
    assert run.remote_job_origin.location_name == LOCATION
    after = shown(env)
    assert (after["status"], after["entry"]["status"]) == ("done", "resolved")
    assert len(table_snapshot(engine_from(env), "orders")) == ORDERS_PER_DAY


def holding_runs_of_key(dagster_home: str, run_key: str) -> None:
    """The instance's run queue keeps the runs of `run_key` queued (a limit of 0)."""
    config = Path(dagster_home, "dagster.yaml")
    held = f"""      - key: dagster/run_key
        value: "{run_key}"
        limit: 0
"""
    text = config.read_text()
    marker = "    tag_concurrency_limits:\n"
    assert marker in text, text
    config.write_text(text.replace(marker, marker + held))


def requeue_records(env: dict[str, str]) -> list[tuple[str, str]]:
    return [(r["by"], r["reason"]) for r in shown(env)["history"] if r["kind"] == "requeue"]


@pytest.mark.slow
def test_an_entry_whose_requeue_run_was_canceled_is_requeued_again_and_waited_for(env, tmp_path):
    entry_id = quarantined_then_fixed(env)
    first_key = requeue_run_key(entry_id)
    holding_runs_of_key(env["DAGSTER_HOME"], first_key)  # the first run waits in the queue

    with (
        daemon_running(
            env, tmp_path / "daemon", MODULE, location_name=LOCATION,
            sensor_seconds={"requeue_sensor": 1},
        ),
        dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance,
    ):  # fmt: skip
        assert dead_letter(env, "requeue", "orders", PARTITION).returncode == 0
        queued = wait_for(
            lambda: next(
                iter(instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: first_key}))), None
            ),
            timeout=RUN_SECONDS,
            interval=0.5,
            what="the sensor's run of the requeue",
        )
        # While its run may still start, a second requeue is refused.
        refused = dead_letter(env, "requeue", "orders", PARTITION)
        assert refused.returncode == 2
        assert f"is already requeued: its run {queued.run_id} is queued" in refused.stderr
        instance.run_coordinator.cancel_run(queued.run_id)  # canceled before any attempt

        again = dead_letter(env, "requeue", "orders", PARTITION, "--wait")

    assert again.returncode == 0, again.stdout + again.stderr
    second_key = requeue_run_key(entry_id, 2)
    assert f"released orders/{PARTITION} (entry {entry_id}) again" in again.stdout
    assert "waiting for the requeue sensor's runs" in again.stdout
    assert f"{second_key}: succeeded" in again.stdout
    assert "1 run succeeded" in again.stdout
    after = shown(env)
    assert (after["status"], after["entry"]["status"]) == ("done", "resolved")
    # Both requeues are in the history; the canceled run made no attempt.
    assert requeue_records(env) == [
        ("cli", "requested"),
        ("cli", f"requested again: run {queued.run_id[:8]} canceled"),
    ]
    assert [a["episode"] for a in after["history"] if a["kind"] == "attempt"] == [1, 2]
