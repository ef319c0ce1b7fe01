"""`bin/stack up` starts the PostgreSQL-backed instance's daemon, webserver and Celery
workers, each with a pid and a log; `bin/stack down` stops exactly those processes."""

from __future__ import annotations

import os
import socket
import subprocess

import httpx

from jobs_platform.deploy.stack import StackLayout, group_has_live_member
from jobs_platform_tests.conftest import PG_ADMIN_URL
from jobs_platform_tests.distributed.cluster import postgres_database, process_group_of
from jobs_platform_tests.support import REPO_ROOT

STACK_SECONDS = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def bin_stack(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO_ROOT / "bin" / "stack"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=STACK_SECONDS,
        check=False,
    )


def test_stack_up_starts_daemon_webserver_and_two_workers_and_down_stops_them(
    pg_url, rabbitmq_url, tmp_path
):
    folder = tmp_path / "stack"
    port = free_port()
    env = {
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "JOBS_PLATFORM_CELERY_BROKER": rabbitmq_url,
        "JOBS_PLATFORM_LANDING": str(tmp_path / "landing"),
    }
    with postgres_database(PG_ADMIN_URL, "jp_stack_instance") as instance_url:
        up = bin_stack(
            "--folder", str(folder), "up", "--workers", "2", "--port", str(port),
            "--instance-db", instance_url, env=env,
        )  # fmt: skip
        layout = StackLayout(folder)
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            assert layout.running() == ["daemon", "w1", "w2", "webserver"]
            groups = {name: int(layout.pid_file(name).read_text()) for name in layout.running()}
            assert all(process_group_of(pid) == pid for pid in groups.values())
            assert (
                "scheme: postgresql+psycopg2" in (layout.dagster_home / "dagster.yaml").read_text()
            )
            assert "task_acks_late" in layout.worker_config.read_text()
            served = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=10)
            assert served.status_code == 200
            assert " ready." in layout.log_file("w2").read_text()
        finally:
            down = bin_stack("--folder", str(folder), "down", env=env)

    assert down.returncode == 0, down.stdout + down.stderr
    assert layout.running() == []
    assert all(process_group_of(pid) is None for pid in groups.values())
    assert not any(group_has_live_member(pgid) for pgid in groups.values()), "a child outlived"
