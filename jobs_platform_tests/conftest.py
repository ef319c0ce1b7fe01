"""Fixtures shared by the whole suite: a fresh database per test, real services only.

PostgreSQL is required. A test that needs it and cannot reach it fails with a clear
message; it never skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

# The admin URL of the PostgreSQL server the tests create their databases on.
PG_ADMIN_URL = os.environ.get(
    "JOBS_PLATFORM_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _admin_engine() -> sa.Engine:
    engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is required for this test and is not reachable at "
            f"{sa.make_url(PG_ADMIN_URL).render_as_string(hide_password=True)}: {exc}. "
            "Start it with: pg_ctlcluster --skip-systemctl-redirect "
            "$(ls /etc/postgresql) main start",
            pytrace=False,
        )
    return engine


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database, dropped after the test."""
    name = f"jp_test_{uuid.uuid4().hex[:16]}"
    admin = _admin_engine()
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(PG_ADMIN_URL).set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """The URL of a fresh SQLite database file in the test's own folder."""
    return f"sqlite:///{tmp_path / 'warehouse.db'}"


@pytest.fixture(params=["postgresql", "sqlite"])
def warehouse_url(request) -> str:
    """A fresh, empty warehouse on each backend (`prepare_warehouse` upgrades it)."""
    fixture_name = "pg_url" if request.param == "postgresql" else "sqlite_url"
    return request.getfixturevalue(fixture_name)


@pytest.fixture
def platform_env(warehouse_url, tmp_path, monkeypatch) -> dict[str, str]:
    """Environment of a framework run: fresh warehouse, landing zone and Dagster home.

    The warehouse is upgraded and holds the backfills' tables, as after a deploy. Set in
    this process (for in-process runs) and returned (for subprocesses).
    """
    from jobs_platform_tests.databases import prepare_warehouse
    from jobs_platform_tests.environments import enter_environment, platform_environment

    prepare_warehouse(warehouse_url)
    return enter_environment(platform_environment(warehouse_url, tmp_path), monkeypatch, tmp_path)


@pytest.fixture
def pg_platform_env(pg_url, tmp_path, monkeypatch) -> dict[str, str]:
    """Like `platform_env`, PostgreSQL only (for what only PostgreSQL can show)."""
    from jobs_platform_tests.databases import prepare_warehouse
    from jobs_platform_tests.environments import enter_environment, platform_environment

    prepare_warehouse(pg_url)
    return enter_environment(platform_environment(pg_url, tmp_path), monkeypatch, tmp_path)


@pytest.fixture
def connection(warehouse_url) -> Iterator[sa.Connection]:
    """One transaction on a fresh warehouse that has the framework's tables."""
    from jobs_platform_tests.databases import upgraded_warehouse

    engine = upgraded_warehouse(warehouse_url)
    with engine.connect() as connection, connection.begin() as transaction:
        yield connection
        transaction.rollback()
    engine.dispose()  # no connection left open for the database's drop to break


@pytest.fixture(autouse=True)
def _no_disposed_instance_left_current():
    """Each test starts with no Dagster instance's state storage current: a test that
    interrupts a run with a real signal may leave a disposed one behind (see
    `_compat.without_current_defs_state_storage`), which would fail every later test
    of the worker that loads a `Definitions`."""
    from jobs_platform.orchestration._compat import without_current_defs_state_storage

    with without_current_defs_state_storage():
        yield


@pytest.fixture(autouse=True)
def _dispose_engines():
    yield
    from jobs_platform.store.db import dispose_engines

    dispose_engines()
