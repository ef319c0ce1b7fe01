"""`jobs-platform metrics serve` as an operator starts it."""

from __future__ import annotations

import sys
from pathlib import Path

from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.environments import EXAMPLE_MODULE

JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))


def test_serve_on_an_unreachable_warehouse_says_so_in_one_line_and_exits_2(tmp_path):
    env = {"JOBS_PLATFORM_DATABASE_URL": "postgresql://etl:secret@127.0.0.1:1/warehouse"}

    serve = [JOBS_PLATFORM, "metrics", "serve", "-m", EXAMPLE_MODULE, "--port", "0"]
    finished = run_cli(serve, env, cwd=tmp_path)

    assert finished.returncode == 2
    assert finished.stderr.startswith("error: cannot open the warehouse postgresql")
    assert "secret" not in finished.stderr and finished.stdout == ""


def test_serve_refuses_a_negative_cache_age(pg_platform_env, tmp_path):
    finished = run_cli(
        [JOBS_PLATFORM, "metrics", "serve", "--cache-seconds", "-1"], pg_platform_env
    )

    assert finished.returncode == 2
    assert "--cache-seconds must be 0 or more" in finished.stderr
