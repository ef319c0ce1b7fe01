"""`bin/stack up -m MODULE`: the stack deploys and serves a user's own code location.

The warehouse gets that location's backfill table (as `jobs-platform db upgrade -m`), the
daemon and the webserver load it, and a run launched as the UI launches one (GraphQL
`launchRun`, queued, dequeued by the daemon) runs its step on a Celery worker.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from deploy.stack import StackLayout
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.databases import pg_database
from jobs_platform_tests.distributed.cluster import stop_now
from jobs_platform_tests.distributed.test_stack import bin_stack, free_port
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.waiting import wait_for

# A user's code location with one backfill, `acme_events`, over its own table.
ACME = "jobs_platform_tests.locations.acme"
DAY = "2024-01-05"
RUN_SECONDS = 240

LAUNCH_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
RUN_STATUS = """
query Status($runId: ID!) { runOrError(runId: $runId) { ... on Run { status } } }
"""


def graphql(port: int, query: str, **variables) -> dict:
    response = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables},
        timeout=60,
    )
    response.raise_for_status()
    payload = response.json()
    assert not payload.get("errors"), payload["errors"]
    return payload["data"]


def launch_acme_day(port: int) -> str:
    """What the UI's Materialize on one partition of `acme_events` sends."""
    params = {
        "selector": {
            "repositoryLocationName": ACME,
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": ["acme_events"]}],
        },
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": DAY}]},
    }
    launched = graphql(port, LAUNCH_RUN, params=params)["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


@pytest.mark.slow
def test_stack_up_with_a_module_deploys_serves_and_runs_that_location(
    pg_url, rabbitmq_url, tmp_path
):
    folder = tmp_path / "stack"
    port = free_port()
    landing = tmp_path / "landing"
    (landing / "acme_events").mkdir(parents=True)
    (landing / "acme_events" / f"{DAY}.csv").write_text(
        "source,event_id,amount_cents\nweb,1,100\napp,1,7\n"
    )
    env = {
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "JOBS_PLATFORM_CELERY_BROKER": rabbitmq_url,
        "JOBS_PLATFORM_LANDING": str(landing),
    }
    with pg_database("jp_stack_instance") as instance_url:
        up = bin_stack(
            "--folder", str(folder), "up", "-m", ACME, "--workers", "1", "--port", str(port),
            "--instance-db", instance_url, env=env,
        )  # fmt: skip
        layout = StackLayout(folder)
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            tables = set(sa.inspect(warehouse_engine(pg_url)).get_table_names())
            daemon_pid = int(layout.pid_file("daemon").read_text())
            daemon_command = Path(f"/proc/{daemon_pid}/cmdline").read_bytes().split(b"\0")
            run_id = launch_acme_day(port)
            status = wait_for(
                lambda: _finished(port, run_id),
                timeout=RUN_SECONDS,
                interval=1,
                what=f"run {run_id} of acme_events to finish",
            )
            env_file = layout.env_file.read_text()
        finally:
            # Killed, not `down` (which test_stack_fresh_instances.py checks): nothing
            # here is about stopping, and a warm shutdown of each process takes seconds.
            for name in layout.running():
                stop_now(layout, name)

    assert f"code location {ACME}; tables created: acme_events" in up.stdout
    assert "acme_events" in tables and "orders" not in tables
    assert ACME.encode() in daemon_command and b"-m" in daemon_command
    assert f"JOBS_PLATFORM_MODULE='{ACME}'" in env_file
    assert status == "SUCCESS"  # its step ran on the worker: the stack's executor is celery
    day = dt.date.fromisoformat(DAY)
    assert table_snapshot(warehouse_engine(pg_url), "acme_events") == [
        (day, "app", 1, 7),
        (day, "web", 1, 100),
    ]


def _finished(port: int, run_id: str) -> str | None:
    status = graphql(port, RUN_STATUS, runId=run_id)["runOrError"]["status"]
    return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None
