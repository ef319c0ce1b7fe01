"""What a warehouse's error says beyond its SQLSTATE: the deploy step a missing table,
column or privilege calls for, recorded in place of the database's error (real
PostgreSQL and SQLite errors). The rejected values: test_rejected_values.py."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobs_platform.errors import Classification, DeploymentError, classify
from jobs_platform.store.database_errors import Rejection, deploy_step, recorded_error

TERMINAL = Classification.TERMINAL


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.NullPool)


def _create_accounts(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE accounts (id int PRIMARY KEY, balance int)"))
        connection.execute(sa.text("INSERT INTO accounts VALUES (1, 0), (2, 0)"))


def _pg_error(url: str, *statements: str) -> sa.exc.DBAPIError:
    """The error the last of `statements` raises (the others set the scene)."""
    engine = _engine(url)
    with pytest.raises(sa.exc.DBAPIError) as caught, engine.connect() as connection:
        for statement in statements:
            connection.execute(sa.text(statement))
    engine.dispose()
    return caught.value


@pytest.fixture
def pg_role(pg_url) -> Iterator[str]:
    """A role with no privileges in the test database, dropped afterwards."""
    role = f"jp_test_role_{uuid.uuid4().hex[:12]}"
    admin = _engine(pg_url).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f"CREATE ROLE {role} NOLOGIN"))
    yield role
    with admin.connect() as connection:
        connection.execute(sa.text(f"DROP ROLE IF EXISTS {role}"))
    admin.dispose()


def test_undefined_backfill_table_is_terminal_and_names_the_table_and_how_to_create_it(pg_url):
    error = _pg_error(pg_url, "SELECT * FROM orders")

    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42P01" in verdict.reason
    remedy = deploy_step(error, verdict)
    assert remedy.startswith('table "orders" does not exist in the warehouse: create it')
    assert 'relation "orders" does not exist' in remedy  # the database's own words


def test_the_fix_for_a_missing_table_names_the_public_api_not_an_internal_path(pg_url):
    error = _pg_error(pg_url, "SELECT * FROM orders")

    remedy = deploy_step(error, classify(error))

    assert "jobs_platform.create_user_tables(engine, table)" in remedy
    assert "jobs_platform.store" not in remedy


def test_a_deploy_step_is_found_through_the_cause_that_was_classified(pg_url):
    error = _pg_error(pg_url, "SELECT * FROM orders")
    try:
        raise RuntimeError("the reader failed") from error
    except RuntimeError as wrapper:
        wrapped = wrapper

    recorded = recorded_error(wrapped, classify(wrapped))

    assert isinstance(recorded, DeploymentError)
    assert str(recorded) == deploy_step(error, classify(error))
    assert recorded.__cause__ is wrapped


def test_undefined_framework_table_is_terminal_and_says_run_db_upgrade(pg_url):
    error = _pg_error(pg_url, "SELECT * FROM jp_checkpoints")
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert deploy_step(error, verdict).startswith(
        'table "jp_checkpoints" does not exist in the warehouse: run: jobs-platform db upgrade'
    )


def test_a_missing_stage_table_is_terminal_and_blames_the_lost_session(pg_url):
    error = _pg_error(pg_url, "ANALYZE jp_stage_seen_keys")
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "pool_mode = session" in deploy_step(error, verdict)


@pytest.mark.parametrize(
    ("statements", "named"),
    [
        (
            ["CREATE TABLE orders (id int)", "INSERT INTO orders (id, note) VALUES (1, 'x')"],
            'column "note" of table "orders" does not exist',
        ),
        (
            ["CREATE TABLE orders (id int)", "SELECT orders.note FROM orders"],
            'column "note" of table "orders" does not exist',
        ),
        (
            ["CREATE TABLE orders (id int)", "SELECT note FROM orders"],
            'column "note" does not exist',
        ),
    ],
)
def test_undefined_column_is_terminal_and_says_to_add_it(pg_url, statements, named):
    error = _pg_error(pg_url, *statements)
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42703" in verdict.reason
    assert deploy_step(error, verdict).startswith(
        f"{named} in the warehouse: add it at deploy time"
    )


def test_undefined_column_of_a_framework_table_says_run_db_upgrade(pg_url):
    error = _pg_error(
        pg_url, "CREATE TABLE jp_leases (id int)", "SELECT jp_leases.token FROM jp_leases"
    )

    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert deploy_step(error, verdict).startswith(
        'column "token" of table "jp_leases" does not exist in the warehouse: '
        "run: jobs-platform db upgrade"
    )


def test_insufficient_privilege_on_a_table_is_terminal_and_says_to_grant_it(pg_url, pg_role):
    error = _pg_error(
        pg_url, "CREATE TABLE orders (id int)", f"SET ROLE {pg_role}", "SELECT * FROM orders"
    )

    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42501" in verdict.reason
    assert deploy_step(error, verdict).startswith(
        'the warehouse user lacks a privilege on table "orders": grant it at deploy time'
    )


def test_no_privilege_to_stage_a_chunk_is_terminal_and_names_the_grant(pg_url, pg_role):
    database = sa.make_url(pg_url).database
    error = _pg_error(
        pg_url,
        f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC',
        f"SET ROLE {pg_role}",
        "CREATE TEMPORARY TABLE jp_stage_orders (id int)",
    )

    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42501" in verdict.reason
    assert f"GRANT TEMPORARY ON DATABASE {database}" in deploy_step(error, verdict)


def test_syntax_error_is_terminal_as_a_bug_in_code_with_no_deploy_step(pg_url):
    error = _pg_error(pg_url, "SELEC 1")
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42601" in verdict.reason
    assert deploy_step(error, verdict) is None


def test_other_class_42_errors_are_terminal_without_a_deploy_step(pg_url):
    error = _pg_error(pg_url, "SELECT no_such_function(1)")  # 42883
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert "42883" in verdict.reason
    assert deploy_step(error, verdict) is None


def test_a_deployment_error_is_recorded_as_one_naming_the_fix_with_the_database_error_as_cause(
    pg_url,
):
    error = _pg_error(pg_url, "SELECT * FROM orders")

    recorded = recorded_error(error, classify(error))

    assert isinstance(recorded, DeploymentError)
    assert str(recorded) == deploy_step(error, classify(error))
    assert recorded.__cause__ is error
    assert classify(recorded).classification is TERMINAL


def test_other_errors_are_recorded_as_they_are():
    error = TimeoutError("slow")

    assert recorded_error(error, classify(error)) is error


@pytest.mark.parametrize(
    ("statement", "remedy"),
    [
        ("SELECT * FROM orders", 'table "orders" does not exist in the warehouse: create it'),
        ("SELECT * FROM jp_attempts", 'table "jp_attempts" does not exist in the warehouse: run:'),
        (
            "INSERT INTO accounts (id, note) VALUES (3, 'x')",
            'column "note" of table "accounts" does not exist in the warehouse: add it',
        ),
        ("SELECT note FROM accounts", 'column "note" does not exist in the warehouse: add it'),
    ],
)
def test_sqlite_missing_table_or_column_is_terminal_like_postgres(sqlite_url, statement, remedy):
    engine = _engine(sqlite_url)
    _create_accounts(engine)
    with pytest.raises(sa.exc.OperationalError) as caught, engine.connect() as connection:
        connection.execute(sa.text(statement))
    engine.dispose()

    error = caught.value
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert deploy_step(error, verdict).startswith(remedy)


def test_sqlite_read_only_warehouse_is_terminal_and_says_to_make_it_writable(tmp_path):
    path = tmp_path / "warehouse.db"
    sqlite3.connect(path).execute("CREATE TABLE t (id int)").connection.close()
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as caught:
        read_only.execute("INSERT INTO t VALUES (1)")
    read_only.close()

    error = caught.value
    verdict = classify(error)

    assert verdict.classification is TERMINAL
    assert deploy_step(error, verdict).startswith(
        "the SQLite warehouse is read-only to this worker"
    )


# What a merge's DETAIL names (PostgreSQL's words, as it spells them)


def test_a_check_violations_detail_reads_as_the_failing_rows_fields():
    rejection = Rejection("23514", "violates check", detail="Failing row contains (7, 1, -5, USD).")

    assert rejection.failing_row() == ["7", "1", "-5", "USD"]
    assert rejection.missing_key() is None


def test_a_foreign_key_violations_detail_reads_as_the_missing_key():
    rejection = Rejection(
        "23503",
        "violates foreign key constraint",
        detail='Key (customer_id)=(99) is not present in table "customers".',
    )

    assert rejection.missing_key() == ("customer_id", "99")


def test_a_detail_in_other_words_names_nothing():
    rejection = Rejection("23514", "violates check", detail="Die fehlerhafte Zeile enthält (7).")

    assert (rejection.failing_row(), rejection.missing_key()) == (None, None)
    assert Rejection("23503", "violates foreign key constraint").missing_key() is None
