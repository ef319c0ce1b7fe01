"""Fixtures shared by the whole suite: a fresh database per test, real services only.

PostgreSQL is required. A test that needs it and cannot reach it fails with a clear
message; it never skips.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.databases import (
    drop_templates,
    pg_database,
    prepare_warehouse,
    upgraded_pg_database,
    upgraded_warehouse,
)
from jobs_platform_tests.environments import enter_environment, platform_environment

BACKENDS = ["postgresql", "sqlite"]

# A tmpfs every Linux machine mounts; the suite's scratch goes there when TMPDIR is unset.
MEMORY_FILESYSTEM = Path("/dev/shm")


def _scratch_in_memory() -> None:
    """The suite's scratch in memory (/dev/shm) where the machine has a tmpfs and TMPDIR is
    unset (set TMPDIR to choose the folder).

    Scratch is each test's folder (Dagster instances on SQLite, landing files, SQLite
    warehouses) and what the test's processes put in the temporary directory (they inherit
    TMPDIR). On a disk every SQLite commit waits for its fsync: the suite's in-process runs
    write each Dagster event so. The crashes the suite makes are of processes (signals), which
    a tmpfs survives as a disk's page cache does; PostgreSQL keeps its data where its cluster
    does. docs/BENCHMARKS.md, "Scratch in memory".
    """
    if os.environ.get("TMPDIR") or not os.access(MEMORY_FILESYSTEM, os.W_OK):
        return
    folder = MEMORY_FILESYSTEM / f"jobs_platform_tests-{os.getuid()}"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:  # a file or a dangling link in its place: the default stays
        return
    if folder.is_symlink() or folder.stat().st_uid != os.getuid():
        return  # another user's folder (the tmpfs is shared): the default stays
    # Others may pass through, as through /tmp: a server-side COPY of the benchmarks reads
    # files the server's own user is given; each folder in it is private (mkdtemp's 0700).
    folder.chmod(0o755)
    os.environ["TMPDIR"] = str(folder)  # before pytest makes its base folder, or a worker starts
    tempfile.tempdir = None


_scratch_in_memory()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `slow` tests first, the rest in their order.

    Each `slow` test is a story of real processes taking 15 s or more. Collected where its
    file falls (`ui/` is last), one would start when the other worker has only seconds of
    tests left, and that core would idle while it runs. Sent first, they leave short tests
    for the end. A stable sort, so every xdist worker collects the same order.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def _template_databases() -> Iterator[None]:
    """The templates this test process built (`databases.template_database`), dropped at its end."""
    yield
    drop_templates()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database, dropped after the test."""
    with pg_database() as url:
        yield url


@pytest.fixture
def upgraded_pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database at head, as `jobs-platform db upgrade` leaves an empty one
    (a copy of the template built by it)."""
    with upgraded_pg_database() as url:
        yield url


@pytest.fixture
def deployed_pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database as a deploy leaves it: at head, with the backfills' tables
    (a copy of the template built by `prepare_warehouse`)."""
    with upgraded_pg_database(deployed=True) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """The URL of a fresh SQLite database file in the test's own folder."""
    return f"sqlite:///{tmp_path / 'warehouse.db'}"


@pytest.fixture(params=BACKENDS)
def warehouse_url(request) -> str:
    """A fresh, empty warehouse on each backend (`prepare_warehouse` upgrades it)."""
    fixture_name = "pg_url" if request.param == "postgresql" else "sqlite_url"
    return request.getfixturevalue(fixture_name)


@pytest.fixture(params=BACKENDS)
def upgraded_url(request) -> str:
    """A fresh warehouse at head on each backend, as `jobs-platform db upgrade` leaves it."""
    if request.param == "postgresql":
        return request.getfixturevalue("upgraded_pg_url")
    url = request.getfixturevalue("sqlite_url")
    upgraded_warehouse(url)
    return url


@pytest.fixture(params=BACKENDS)
def deployed_url(request) -> str:
    """A fresh warehouse on each backend as a deploy leaves it: at head, with the backfills'
    tables."""
    if request.param == "postgresql":
        return request.getfixturevalue("deployed_pg_url")
    url = request.getfixturevalue("sqlite_url")
    prepare_warehouse(url)
    return url


@pytest.fixture
def platform_env(deployed_url, tmp_path, monkeypatch) -> dict[str, str]:
    """Environment of a framework run: fresh warehouse, landing zone and Dagster home.

    The warehouse is upgraded and holds the backfills' tables, as after a deploy. Set in
    this process (for in-process runs) and returned (for subprocesses).
    """
    return enter_environment(platform_environment(deployed_url, tmp_path), monkeypatch, tmp_path)


@pytest.fixture
def pg_platform_env(deployed_pg_url, tmp_path, monkeypatch) -> dict[str, str]:
    """Like `platform_env`, PostgreSQL only (for what only PostgreSQL can show)."""
    env = platform_environment(deployed_pg_url, tmp_path)
    return enter_environment(env, monkeypatch, tmp_path)


@pytest.fixture
def connection(upgraded_url) -> Iterator[sa.Connection]:
    """One transaction on a fresh warehouse that has the framework's tables."""
    engine = warehouse_engine(upgraded_url)
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
