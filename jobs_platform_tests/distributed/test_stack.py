"""`bin/stack up` creates the PostgreSQL-backed instance's storage before it starts the
daemon, webserver and Celery workers, and fails in one line when it cannot.

That `up` starts every process, each with a pid, a process group and a log, and that
`down` stops exactly those processes, is checked on the fresh stacks of
`test_stack_fresh_instances.py` (and `up` on `test_stack_module.py`'s): one place, not a
third fresh stack for the same proof."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
import sqlalchemy as sa

from deploy import stack
from deploy.stack import StackLayout
from jobs_platform_tests.commands import REPO_ROOT
from jobs_platform_tests.databases import pg_database

STACK_SECONDS = 300
# A few of the tables every process of the stack opens: runs, events, the instance's id, the
# schedules and sensors, the migrations done.
INSTANCE_TABLES = {"runs", "event_logs", "instance_info", "jobs", "alembic_version"}


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


def test_up_creates_the_instance_storage_before_it_starts_any_process(
    pg_url, rabbitmq_url, tmp_path, monkeypatch
):
    class FirstStart(Exception):
        pass

    tables_at_first_start = {}

    def first_start(layout, name, args, env, **kwargs):
        tables_at_first_start[name] = tables_of(instance_url)
        raise FirstStart  # stop `up` here: no process of the stack is started

    monkeypatch.setattr(stack, "start_process", first_start)
    monkeypatch.setenv("JOBS_PLATFORM_DATABASE_URL", pg_url)
    monkeypatch.setenv("JOBS_PLATFORM_CELERY_BROKER", rabbitmq_url)
    monkeypatch.setenv("JOBS_PLATFORM_LANDING", str(tmp_path / "landing"))
    with pg_database("jp_stack_instance") as instance_url:
        assert INSTANCE_TABLES.isdisjoint(tables_of(instance_url))
        with pytest.raises(FirstStart):
            stack.main(["--folder", str(tmp_path / "stack"), "up", "--instance-db", instance_url])

    assert list(tables_at_first_start) == ["daemon"]
    assert INSTANCE_TABLES.issubset(tables_at_first_start["daemon"])


def test_up_fails_in_one_line_without_the_password_when_the_instance_storage_fails(
    pg_url, rabbitmq_url, tmp_path
):
    folder = tmp_path / "stack"
    env = {
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "JOBS_PLATFORM_CELERY_BROKER": rabbitmq_url,
        "JOBS_PLATFORM_LANDING": str(tmp_path / "landing"),
    }
    with pg_database("jp_stack_instance") as instance_url:
        # A `runs` table of someone else's: Dagster keeps it and its migration fails on it.
        engine = sa.create_engine(instance_url, poolclass=sa.NullPool)
        with engine.begin() as connection:
            connection.execute(sa.text("CREATE TABLE runs (x integer)"))
        engine.dispose()
        with_password = sa.make_url(instance_url).set(password="s3cret-pw")
        up = bin_stack(
            "--folder", str(folder), "up", "--workers", "1",
            "--instance-db", with_password.render_as_string(hide_password=False), env=env,
        )  # fmt: skip

    assert up.returncode == 1
    assert len(up.stderr.splitlines()) == 1, up.stderr
    assert "`dagster instance migrate` failed on postgresql" in up.stderr
    assert ":***@" in up.stderr and "s3cret-pw" not in up.stdout + up.stderr
    assert "runs" in up.stderr  # the reason, from the migrate's output
    assert StackLayout(folder).running() == []


def tables_of(url: str) -> set[str]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
