"""A warehouse the CLI cannot open is one line naming it (no password) and exit 2.

Each command through the CLI's `main` in this process, and `dead-letter list` as a real
`jobs-platform` process too: its stderr as a shell sees it, with whatever a fresh
interpreter adds (warnings, log lines), is one line as well. (`test_db_cli` runs every
command family's one-line refusals in real processes.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.environments import EXAMPLE_MODULE

JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
SECRET = "s3cr3t-pw"
# Port 1 on the loopback: nothing listens there, so the connection is refused at once.
CLOSED_PORT_URL = f"postgresql+psycopg://backfill:{SECRET}@127.0.0.1:1/warehouse"
# `status` and `requeue` work on a code location, so they name one.
COMMANDS = [
    ["status", "-m", EXAMPLE_MODULE],
    ["dead-letter", "list"],
    ["dead-letter", "show", "orders", "2024-01-03"],
    ["dead-letter", "requeue", "-m", EXAMPLE_MODULE, "orders", "2024-01-03"],
    ["outbox", "list"],
]
# The command also run as a real process (the cheapest: it loads no code location).
IN_A_PROCESS_TOO = ["dead-letter", "list"]


def run_with_warehouse(url: str, command: list[str], tmp_path: Path):
    """The command's result through `main`; for IN_A_PROCESS_TOO, also in a real process,
    whose result must be the same."""
    env = {"JOBS_PLATFORM_DATABASE_URL": url, "DAGSTER_HOME": ""}
    finished = jobs_platform_in_process(command, env, cwd=tmp_path)
    if command == IN_A_PROCESS_TOO:
        process = run_cli([JOBS_PLATFORM, *command], env, cwd=tmp_path, timeout=120)
        assert (process.returncode, process.stdout, process.stderr) == (
            finished.returncode,
            finished.stdout,
            finished.stderr,
        )
    return finished


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unreachable_postgresql_warehouse_is_one_line_without_its_password(command, tmp_path):
    finished = run_with_warehouse(CLOSED_PORT_URL, command, tmp_path)

    assert finished.returncode == 2, finished.stderr[-3000:]
    assert finished.stdout == ""
    [line] = finished.stderr.splitlines()
    assert line.startswith(
        "error: cannot open the warehouse postgresql+psycopg://backfill:***@127.0.0.1:1/warehouse"
    )
    assert "Connection refused" in line
    assert "check that the database is running" in line
    assert SECRET not in finished.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_sqlite_warehouse_in_a_missing_folder_is_one_line_naming_it(command, tmp_path):
    missing = tmp_path / "no-such-folder" / "warehouse.db"

    finished = run_with_warehouse(f"sqlite:///{missing}", command, tmp_path)

    assert finished.returncode == 2, finished.stderr[-3000:]
    [line] = finished.stderr.splitlines()
    assert line.startswith(f"error: cannot open the warehouse sqlite:///{missing}")
    assert f"the folder {missing.parent} does not exist" in line
    assert not missing.parent.exists()  # a read never creates a warehouse somewhere new
