"""`jobs-platform db upgrade [-m MODULE] [--sql] | current | check`, and read commands on a
warehouse behind.

What a deploy script, a CI job or a DBA sees: exit codes and output. Where the process
is what is checked — the exit code a shell gets, a stderr of one line, two upgraders at
once, the embedded default — a real `jobs-platform` process (`jobs_platform_process`);
elsewhere the CLI's `main` in this process (`jobs_platform`), which runs the same code
without starting Python and importing the location again.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import (
    BASELINE_REVISION,
    UPGRADE_LOCK_ID,
    alembic_config,
    head_revision,
    upgrade_warehouse,
)
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import ACME, JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import EXAMPLE_MODULE
from jobs_platform_tests.store.schema_0_1_0 import metadata_0_1_0
from jobs_platform_tests.waiting import wait_for

UPGRADE_LINE = "run: jobs-platform db upgrade"
PASSWORD = "hunter2"  # the test server trusts local connections: any password is accepted
EXAMPLE_TABLES = {"orders", "daily_revenue", "customer_order_history"}


@pytest.fixture
def url(warehouse_url) -> str:
    """The empty warehouse; on PostgreSQL with a password, which no output may show."""
    parsed = sa.make_url(warehouse_url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(password=PASSWORD)
    return parsed.render_as_string(hide_password=False)


def jobs_platform(url: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`jobs-platform ARGS…` against `url`, through the CLI's `main` in this process."""
    finished = jobs_platform_in_process(args, {"JOBS_PLATFORM_DATABASE_URL": url, **env})
    assert PASSWORD not in finished.stdout + finished.stderr
    return finished


def jobs_platform_process(url: str, *args: str) -> subprocess.CompletedProcess:
    """`jobs-platform ARGS…` against `url` in a real process, as a shell runs it."""
    finished = run_cli([JOBS_PLATFORM, *args], {"JOBS_PLATFORM_DATABASE_URL": url})
    assert PASSWORD not in finished.stdout + finished.stderr
    return finished


def table_names(url: str) -> set[str]:
    return set(sa.inspect(warehouse_engine(url)).get_table_names())


def upgrade_to(url: str, revision: str) -> None:
    with warehouse_engine(url).connect() as connection, connection.begin():
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def test_db_check_exits_1_on_an_empty_warehouse_and_0_after_db_upgrade(url):
    behind = jobs_platform(url, "db", "check")
    upgraded = jobs_platform(url, "db", "upgrade", "-m", EXAMPLE_MODULE)
    at_head = jobs_platform(url, "db", "check")

    assert behind.returncode == 1
    assert "revision none (empty)" in behind.stdout and UPGRADE_LINE in behind.stdout
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded from an empty schema to {head_revision()}" in upgraded.stdout
    assert at_head.returncode == 0
    assert f"is at head {head_revision()}" in at_head.stdout
    assert table_names(url) >= EXAMPLE_TABLES  # the tables of the location -m names


def test_db_check_exits_1_on_a_warehouse_one_revision_behind(url):
    upgrade_to(url, BASELINE_REVISION)

    behind = jobs_platform_process(url, "db", "check")  # exit 1 as a deploy script sees it

    assert behind.returncode == 1
    assert f"revision {BASELINE_REVISION}" in behind.stdout and UPGRADE_LINE in behind.stdout


def test_db_current_prints_the_applied_revision(url):
    empty = jobs_platform(url, "db", "current")
    upgrade_warehouse(warehouse_engine(url))
    current = jobs_platform(url, "db", "current")

    assert empty.returncode == 0
    assert "none (empty)" in empty.stdout
    assert current.returncode == 0
    assert f"revision:  {head_revision()} (head)" in current.stdout
    assert "***" in current.stdout or sa.make_url(url).password is None


def test_db_upgrade_sql_prints_the_ddl_and_changes_nothing(url):
    printed = jobs_platform(url, "db", "upgrade", "--sql")

    assert printed.returncode == 0, printed.stderr
    assert "CREATE TABLE jp_checkpoints" in printed.stdout
    assert "CREATE INDEX IF NOT EXISTS ix_jp_quarantine_status" in printed.stdout
    assert "CREATE TABLE jp_alembic_version" in printed.stdout
    assert "nothing was changed" in printed.stderr
    assert table_names(url) == set()


def test_db_upgrade_sql_holds_only_what_the_warehouse_lacks(url):
    upgrade_to(url, BASELINE_REVISION)

    printed = jobs_platform(url, "db", "upgrade", "--sql")

    assert printed.returncode == 0, printed.stderr
    assert "CREATE INDEX IF NOT EXISTS ix_jp_quarantine_status" in printed.stdout
    # Tables of later revisions only: none the baseline already made.
    created = set(re.findall(r"CREATE TABLE (jp_\w+)", printed.stdout))
    assert created and not created & set(metadata_0_1_0.tables)
    index_names = {
        i["name"] for i in sa.inspect(warehouse_engine(url)).get_indexes("jp_quarantine")
    }
    assert "ix_jp_quarantine_status" not in index_names


def test_two_db_upgrades_at_once_on_postgresql_make_one_upgrade_and_both_succeed(pg_url):
    env = {**os.environ, "JOBS_PLATFORM_DATABASE_URL": pg_url}
    engine = warehouse_engine(pg_url)
    with engine.connect() as holder:
        # Hold the upgrade lock so that both processes are provably inside at once,
        # both waiting on it, before either may look at the warehouse.
        holder.execute(sa.text("SELECT pg_advisory_lock(:id)"), {"id": UPGRADE_LOCK_ID})
        holder.commit()
        upgraders = [
            subprocess.Popen(
                [JOBS_PLATFORM, "db", "upgrade", "-m", EXAMPLE_MODULE],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        wait_for(lambda: waiting_on_the_lock(engine) == 2, timeout=60, what="both upgraders")
        holder.execute(sa.text("SELECT pg_advisory_unlock(:id)"), {"id": UPGRADE_LOCK_ID})
        holder.commit()
        outputs = [upgrader.communicate(timeout=120) for upgrader in upgraders]

    assert [upgrader.returncode for upgrader in upgraders] == [0, 0], outputs
    said = sorted(stdout.splitlines()[2] for stdout, _ in outputs)
    assert said == [
        f"already at head {head_revision()}",
        f"upgraded from an empty schema to {head_revision()}",
    ]
    created = [line for stdout, _ in outputs for line in stdout.splitlines() if "created" in line]
    assert sorted(created) == sorted(
        f"created table {name} (backfill {name})" for name in EXAMPLE_TABLES
    )  # each backfill table by one of them
    with engine.connect() as connection:
        versions = connection.execute(sa.text("SELECT version_num FROM jp_alembic_version"))
        assert list(versions.scalars()) == [head_revision()]


def waiting_on_the_lock(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        ).scalar_one()


@pytest.mark.parametrize(
    "read", [["dead-letter", "list"], ["outbox", "list"], ["status", "-m", EXAMPLE_MODULE]]
)
def test_a_read_command_on_an_empty_warehouse_prints_one_line_and_exits_2(pg_url, read):
    """PostgreSQL only: the check is the same on SQLite, and here the URL has a password."""
    url = sa.make_url(pg_url).set(password=PASSWORD).render_as_string(hide_password=False)

    finished = jobs_platform_process(url, *read)

    assert finished.returncode == 2
    [line] = finished.stderr.strip().splitlines()
    assert "revision none (empty)" in line and UPGRADE_LINE in line
    assert ":***@" in line
    assert table_names(url) == set()  # and it created nothing


def test_the_demo_needs_no_set_up_on_the_embedded_default(tmp_path):
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("JOBS_PLATFORM_") and name != "DAGSTER_HOME"
    }

    finished = subprocess.run(
        [str(Path(JOBS_PLATFORM).with_name("orders-example")), "demo", "--orders-per-day", "40"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "succeeded:   6 of 7 days" in finished.stdout
    current = subprocess.run(
        [JOBS_PLATFORM, "db", "current"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert f"{head_revision()} (head)" in current.stdout


def test_db_check_with_a_module_exits_1_naming_its_missing_table_and_0_after_db_upgrade(pg_url):
    upgrade_warehouse(warehouse_engine(pg_url))  # the framework's tables, no backfill's
    lacking = jobs_platform(pg_url, "db", "check", "-m", ACME)
    upgraded = jobs_platform(pg_url, "db", "upgrade", "-m", ACME)
    at_head = jobs_platform(pg_url, "db", "check", "-m", ACME)

    assert lacking.returncode == 1
    assert f"lacks the table acme_events of backfill acme_events (code location {ACME})" in (
        lacking.stdout
    )
    assert f"run: jobs-platform db upgrade -m {ACME}" in lacking.stdout
    assert upgraded.returncode == 0, upgraded.stderr
    assert "created table acme_events (backfill acme_events)" in upgraded.stdout
    assert at_head.returncode == 0, at_head.stdout
    assert "acme_events" in table_names(pg_url)
    assert "customer_order_history" not in table_names(pg_url)  # only the locations' tables


def test_db_upgrade_sql_with_a_module_prints_its_create_table_and_changes_nothing(url):
    printed = jobs_platform(url, "db", "upgrade", "-m", ACME, "--sql")

    assert printed.returncode == 0, printed.stderr
    script = printed.stdout
    assert "CREATE TABLE acme_events" in script
    assert "PRIMARY KEY (day, source, event_id)" in script
    assert script.index("CREATE TABLE jp_alembic_version") < script.index("CREATE TABLE acme")
    assert "CREATE TABLE orders" not in script
    assert "missing backfill table(s)" in printed.stderr and "nothing was changed" in printed.stderr
    assert table_names(url) == set()


def test_db_upgrade_with_a_module_leaves_an_existing_backfill_table_as_it_is(pg_url):
    with warehouse_engine(pg_url).begin() as connection:
        connection.execute(sa.text("CREATE TABLE acme_events (day date, note text)"))

    upgraded = jobs_platform(pg_url, "db", "upgrade", "-m", ACME)

    assert upgraded.returncode == 0, upgraded.stderr
    assert "backfill tables already there, left as they are: acme_events" in upgraded.stdout
    columns = sa.inspect(warehouse_engine(pg_url)).get_columns("acme_events")
    assert [column["name"] for column in columns] == ["day", "note"]


def test_jobs_platform_module_is_the_code_location_when_m_is_not_given(pg_url):
    upgraded = jobs_platform(pg_url, "db", "upgrade", JOBS_PLATFORM_MODULE=ACME)

    assert upgraded.returncode == 0, upgraded.stderr
    assert f"code location: {ACME}" in upgraded.stdout
    assert "acme_events" in table_names(pg_url)
    assert not EXAMPLE_TABLES & table_names(pg_url)


@pytest.mark.parametrize(
    "command",
    [
        ["db", "upgrade"],
        ["db", "check"],
        ["status"],
        ["dead-letter", "list"],
        ["dead-letter", "requeue", "acme_events", "2024-01-03"],
        ["outbox", "list"],
    ],
)
def test_a_module_that_does_not_exist_gives_one_line_and_exit_2(pg_url, command):
    upgrade_warehouse(warehouse_engine(pg_url))

    finished = jobs_platform_process(pg_url, *command, "-m", "acme_typo.defs")

    assert finished.returncode == 2
    [line] = finished.stderr.strip().splitlines()
    assert line.startswith("error: cannot import code location 'acme_typo.defs'")
    assert "pass -m MODULE" in line
