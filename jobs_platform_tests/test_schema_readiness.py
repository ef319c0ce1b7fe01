"""No DDL at run time: steps, sensors, hooks and CLI reads check the schema revision only.

A warehouse behind this version's migrations stops work with one line naming the database,
its revision and `jobs-platform db upgrade`, before any attempt exists; after the upgrade
the same work runs. The embedded default upgrades itself.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

import jobs_platform
from jobs_platform.cli.main import main
from jobs_platform.dead_letter.asset import dead_letter_sensor
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.orchestration.recovery import abandoned_run_sensor
from jobs_platform.outbox.sensor import backfill_request_sensor
from jobs_platform.settings import embedded_database_url
from jobs_platform.store.db import normalize_url, redact_url, warehouse_engine
from jobs_platform.store.migrate import (
    HEAD_REVISION,
    SchemaNotReady,
    alembic_config,
    check_schema,
    head_revision,
    schema_state,
    upgrade_warehouse,
)
from jobs_platform.store.schema import attempts
from jobs_platform_tests.databases import prepare_warehouse
from jobs_platform_tests.environments import engine_from, enter_environment, platform_environment
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.store.schema_0_1_0 import build_0_1_0_warehouse, metadata_0_1_0
from orders_example.definitions import defs
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 1, 3)
PARTITION = DAY.isoformat()
UPGRADE_LINE = "run: jobs-platform db upgrade"
# Schema changes. The upsert's staging table is TEMPORARY (private to the transaction's
# session, dropped after the chunk): data plumbing, not a change to the warehouse.
SCHEMA_CHANGE = re.compile(r"^\s*(CREATE|ALTER|DROP)\b(?!\s+TEMPORARY)(?!\s+TABLE\s+jp_stage_)")


@pytest.fixture
def unprepared_env(warehouse_url, tmp_path, monkeypatch) -> dict[str, str]:
    """A run's environment whose warehouse nobody has run `jobs-platform db upgrade` on."""
    return enter_environment(platform_environment(warehouse_url, tmp_path), monkeypatch, tmp_path)


@pytest.fixture
def daemon_instance(platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.get() as instance:
        yield instance


def step_events(result: dg.ExecuteInProcessResult, event_type: dg.DagsterEventType) -> list:
    return [event for event in result.all_events if event.event_type == event_type]


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    [failure] = step_events(result, dg.DagsterEventType.STEP_FAILURE)
    return failure.step_failure_data.error.message


def attempt_count(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(attempts)).scalar_one()


def tick(instance: dg.DagsterInstance, sensor: dg.SensorDefinition) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        definitions=defs,
        resources=dict(defs.resources),
    )
    return sensor.evaluate_tick(context)


def chain(error: BaseException) -> str:
    """The messages of an exception and of every exception it was raised from."""
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(messages)


@contextmanager
def create_all_calls(url: str) -> Iterator[list[str]]:
    """Every `MetaData.create_all` on the warehouse at `url`, even one with nothing to do.

    (`create_all(checkfirst=True)` on a complete schema sends no CREATE, so the statements
    alone would not show it; its metadata-level event fires all the same.)
    """
    calls: list[str] = []
    warehouse = normalize_url(url)

    def record(metadata, connection, **_kw):
        if connection.engine.url == warehouse:
            calls.append(", ".join(sorted(metadata.tables)))

    sa.event.listen(sa.MetaData, "before_create", record)
    try:
        yield calls
    finally:
        sa.event.remove(sa.MetaData, "before_create", record)


@contextmanager
def statements_run(url: str) -> Iterator[list[str]]:
    """Every SQL statement sent to the warehouse at `url` by any engine of this process.

    Any engine: the framework's cached ones, and whichever a step or sensor might create.
    (Dagster's own instance storage, also SQLAlchemy, is another database.)
    """
    seen: list[str] = []
    warehouse = normalize_url(url)

    def record(connection, _cursor, statement, _params, _context, _many):
        if connection.engine.url == warehouse:
            seen.append(" ".join(statement.split()))

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", record)


def test_a_step_on_an_empty_warehouse_fails_with_one_clear_line_and_counts_no_attempt(
    unprepared_env,
):
    url = unprepared_env["JOBS_PLATFORM_DATABASE_URL"]
    seed_orders(unprepared_env["JOBS_PLATFORM_LANDING"], DAY, DAY)

    result = materialize([orders], PARTITION)

    assert not result.success
    assert step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == []
    message = failure_message(result)
    assert f"warehouse {redact_url(warehouse_engine(url).url)}" in message
    assert "revision none (empty)" in message
    assert UPGRADE_LINE in message
    engine = prepare_warehouse(url)  # the deploy step
    assert attempts_of(engine, "orders", PARTITION) == []

    rerun = materialize([orders], PARTITION)

    assert rerun.success
    history = attempts_of(engine, "orders", PARTITION)
    assert [(row.attempt, row.outcome) for row in history] == [(1, "succeeded")]


def test_a_step_on_a_0_1_0_warehouse_fails_until_it_is_upgraded_and_counts_no_attempt(
    unprepared_env,
):
    url = unprepared_env["JOBS_PLATFORM_DATABASE_URL"]
    engine = build_0_1_0_warehouse(url)
    seed_orders(unprepared_env["JOBS_PLATFORM_LANDING"], DAY, DAY)
    attempts_before = attempt_count(engine)

    result = materialize([orders], PARTITION)

    assert not result.success
    assert step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == []
    assert "revision none (0.1.0 tables, unversioned)" in failure_message(result)
    assert UPGRADE_LINE in failure_message(result)
    assert attempt_count(engine) == attempts_before
    old_quarantine = metadata_0_1_0.tables["jp_quarantine"]
    with engine.connect() as connection:  # read through the 0.1.0 tables it still has
        quarantined = connection.execute(
            sa.select(sa.func.count())
            .select_from(old_quarantine)
            .where(
                old_quarantine.c.asset == "orders",
                old_quarantine.c.partition == PARTITION,
                old_quarantine.c.status == "quarantined",
            )
        ).scalar_one()
    assert quarantined == 0
    prepare_warehouse(url)

    assert materialize([orders], PARTITION).success


def test_the_framework_runs_on_an_upgraded_0_1_0_warehouse_and_keeps_its_history(
    unprepared_env,
):
    engine = build_0_1_0_warehouse(unprepared_env["JOBS_PLATFORM_DATABASE_URL"])
    landing = unprepared_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, dt.date(2024, 1, 4))
    prepare_warehouse(unprepared_env["JOBS_PLATFORM_DATABASE_URL"])  # `db upgrade` adopts it

    ran = materialize([orders, daily_revenue], PARTITION)
    gated = materialize([orders], "2024-01-04")  # quarantined under 0.1.0

    assert ran.success
    assert [row.outcome for row in attempts_of(engine, "orders", PARTITION)] == ["succeeded"]
    assert not gated.success
    assert [row.error_class for row in attempts_of(engine, "orders", "2024-01-04")] == [
        "terminal"  # the 0.1.0 attempt, and no new one: the gate refused the partition
    ]


def test_a_sensor_tick_on_an_empty_warehouse_fails_with_the_upgrade_line(unprepared_env):
    with dg.DagsterInstance.get() as instance, pytest.raises(Exception) as raised:
        tick(instance, dead_letter_sensor)

    assert UPGRADE_LINE in chain(raised.value)
    assert "revision none (empty)" in chain(raised.value)


def test_the_failure_hook_on_an_empty_warehouse_quarantines_nothing_and_says_why(
    unprepared_env,
):
    seed_orders(unprepared_env["JOBS_PLATFORM_LANDING"], DAY, DAY)

    with dg.DagsterInstance.get() as instance:
        result = materialize([orders], PARTITION, instance=instance)
        logs = instance.all_logs(result.run_id)

    assert step_events(result, dg.DagsterEventType.HOOK_ERRORED) == []
    assert step_events(result, dg.DagsterEventType.HOOK_COMPLETED)
    hook_lines = [log.user_message for log in logs if not log.is_dagster_event]
    assert any(UPGRADE_LINE in line for line in hook_lines), hook_lines
    assert not sa.inspect(engine_from(unprepared_env)).has_table("jp_quarantine")


def test_no_step_sensor_hook_or_cli_read_changes_the_schema(platform_env, daemon_instance):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, dt.date(2024, 1, 4), poison_days=[dt.date(2024, 1, 4)])

    url = platform_env["JOBS_PLATFORM_DATABASE_URL"]
    with create_all_calls(url) as create_alls, statements_run(url) as statements:
        assert materialize([orders, daily_revenue], PARTITION).success
        assert not materialize([orders], "2024-01-04").success  # terminal: the hook runs
        for sensor in (
            dead_letter_sensor,
            requeue_sensor,
            backfill_request_sensor,
            abandoned_run_sensor,
        ):
            tick(daemon_instance, sensor)
        for command in (["dead-letter", "list"], ["outbox", "list"], ["status"]):
            assert main(command) == 0

    assert [s for s in statements if SCHEMA_CHANGE.match(s)] == []
    assert create_alls == []
    # The listener saw the work itself, the steps' writes included.
    assert any(s.startswith("INSERT INTO jp_attempts") for s in statements)
    # The checks did run (this process had not checked this warehouse before).
    assert any("jp_alembic_version" in statement for statement in statements)


def test_a_step_leaves_creating_the_users_table_to_the_user(unprepared_env):
    url = unprepared_env["JOBS_PLATFORM_DATABASE_URL"]
    upgrade_warehouse(warehouse_engine(url))  # the framework's tables only
    seed_orders(unprepared_env["JOBS_PLATFORM_LANDING"], DAY, DAY)

    result = materialize([orders], PARTITION)

    assert not result.success
    assert not sa.inspect(warehouse_engine(url)).has_table("orders")


def test_the_embedded_default_upgrades_itself_and_creates_the_backfill_tables(
    tmp_path, monkeypatch
):
    env = platform_environment("unused", tmp_path)
    del env["JOBS_PLATFORM_DATABASE_URL"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("JOBS_PLATFORM_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    seed_orders(env["JOBS_PLATFORM_LANDING"], DAY, DAY)

    result = materialize([orders, daily_revenue], PARTITION)

    assert result.success
    engine = warehouse_engine(embedded_database_url())
    assert schema_state(engine).revision == head_revision()
    assert {"orders", "daily_revenue"} <= set(sa.inspect(engine).get_table_names())


def test_no_module_of_the_package_calls_create_all():
    """A supplement to the runs above: they cover the paths they take, this every module."""
    package = Path(jobs_platform.__file__).parent
    callers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "create_all(" in path.read_text(encoding="utf-8")
    ]

    assert callers == []


def test_the_head_the_schema_check_knows_is_the_packaged_migrations_head():
    """`check_schema` compares the version table with HEAD_REVISION (no Alembic): a new
    migration must move it."""
    assert head_revision() == HEAD_REVISION


def test_the_schema_check_refuses_a_warehouse_one_revision_behind(warehouse_url):
    from alembic import command

    engine = sa.create_engine(normalize_url(warehouse_url), poolclass=sa.pool.NullPool)
    upgrade_warehouse(engine)
    command.downgrade(alembic_config(warehouse_url), "0006_backfill_catalog")

    with pytest.raises(SchemaNotReady, match="0006_backfill_catalog"):
        check_schema(engine)
    upgrade_warehouse(engine)
    check_schema(engine)  # at head again: passes


def test_the_schema_check_refuses_an_empty_warehouse(warehouse_url):
    engine = sa.create_engine(normalize_url(warehouse_url), poolclass=sa.pool.NullPool)

    with pytest.raises(SchemaNotReady, match="db upgrade"):
        check_schema(engine)
