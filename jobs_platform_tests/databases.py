"""The tests' warehouses: fresh PostgreSQL databases, upgraded as `jobs-platform db upgrade`
does, prepared as a deploy leaves them, or copied from a template that was.

A test that needs an upgraded (or deployed) PostgreSQL warehouse gets a copy of a template
database (`CREATE DATABASE … TEMPLATE`) that this test process upgraded once with the
project's own upgrade: the same tables as an upgrade of its own, without paying for the
migrations in every test. Tests about the migrations themselves take an empty database.

A test's database is dropped behind it, on a thread of this process's own: PostgreSQL's
`DROP DATABASE` waits for a checkpoint (measured here: 0.1 to 2.3 s a drop while other
tests write, against 0.07 to 0.3 s for the copy), which no test needs to wait for. The
session's end waits for every drop and fails naming any that did not happen.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables

# The admin URL of the PostgreSQL server the tests create their databases on.
PG_ADMIN_URL = os.environ.get(
    "JOBS_PLATFORM_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TEMPLATE_PREFIX = "jp_template"
# A template is this process's own and dropped when its session ends; one older than this
# was left by a test process that died, and the next template build drops it.
STALE_TEMPLATE_SECONDS = 24 * 3600


def admin_engine() -> sa.Engine:
    """An engine on the server's admin database; fails the test when PostgreSQL is not there."""
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


@contextlib.contextmanager
def pg_database(prefix: str = "jp_test", *, template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database, empty or a copy of `template`, dropped afterwards; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = admin_engine()
    _create_database(admin, name, template)
    admin.dispose()
    try:
        yield sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _dropper.drop_later(name)


@contextlib.contextmanager
def upgraded_pg_database(*, deployed: bool = False) -> Iterator[str]:
    """A new PostgreSQL database at head (`upgraded_warehouse`), with the backfills' tables
    when `deployed` (`prepare_warehouse`): a copy of this process's template of that state."""
    with pg_database(template=template_database(deployed=deployed)) as url:
        yield url


# (deployed, the backfills' tables) → this process's template database with them.
_templates: dict[tuple[bool, tuple[int, ...]], str] = {}


def template_database(*, deployed: bool) -> str:
    """This process's template of an upgraded (or deployed) warehouse, built on first use.

    Built by the project's own upgrade (whatever migrations the code has) and, when
    `deployed`, `create_user_tables` of every backfill loaded so far; a backfill loaded
    later gets a template of its own. No connection stays open to it: PostgreSQL copies
    a database only while no one is connected to it.
    """
    tables = tuple(spec.table for spec in loaded_backfills().values()) if deployed else ()
    key = (deployed, tuple(id(table) for table in tables))
    name = _templates.get(key)
    if name is None:
        name = f"{TEMPLATE_PREFIX}_{int(time.time())}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = admin_engine()
        try:
            _drop_stale_templates(admin)
            _create_database(admin, name, None)
            url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(False)
            engine = upgraded_warehouse(url)
            create_user_tables(engine, *tables)
            engine.dispose()
        except BaseException:
            _drop_database(admin, name)
            raise
        finally:
            admin.dispose()
        _templates[key] = name
    return name


class _Dropper:
    """Drops databases one after another on a daemon thread; `wait` blocks until all are."""

    def __init__(self) -> None:
        self._names: queue.Queue[str] = queue.Queue()
        self._failures: list[str] = []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def drop_later(self, name: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="drop-test-databases", daemon=True
                )
                self._thread.start()
        self._names.put(name)

    def wait(self) -> None:
        """Every database handed over is dropped; fails naming those that could not be."""
        self._names.join()
        failures, self._failures = self._failures, []
        if failures:
            raise RuntimeError("test databases left behind: " + "; ".join(failures))

    def _run(self) -> None:
        while True:
            name = self._names.get()
            try:
                admin = sa.create_engine(
                    PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
                )
                try:
                    _drop_database(admin, name)
                finally:
                    admin.dispose()
            except Exception as exc:  # reported by wait(), at the session's end
                self._failures.append(f"{name}: {exc}")
            finally:
                self._names.task_done()


_dropper = _Dropper()


def wait_for_drops() -> None:
    """Every test database handed to the dropper is dropped; fails naming any left behind."""
    _dropper.wait()


def drop_templates() -> None:
    """Drop this process's test databases and templates (at the end of its test session)."""
    wait_for_drops()
    admin = admin_engine()
    try:
        for name in _templates.values():
            _drop_database(admin, name)
        _templates.clear()
    finally:
        admin.dispose()


def _drop_stale_templates(admin: sa.Engine) -> None:
    with admin.connect() as connection:
        names = connection.execute(
            sa.text("SELECT datname FROM pg_database WHERE datname LIKE :pattern"),
            {"pattern": f"{TEMPLATE_PREFIX}\\_%"},
        ).scalars()
        stale = [
            name
            for name in names
            if name.split("_")[2].isdigit()
            and time.time() - int(name.split("_")[2]) > STALE_TEMPLATE_SECONDS
        ]
    for name in stale:
        _drop_database(admin, name)


def _create_database(admin: sa.Engine, name: str, template: str | None) -> None:
    statement = f'CREATE DATABASE "{name}"'
    if template is not None:
        statement += f' TEMPLATE "{template}"'
    with admin.connect() as connection:
        connection.execute(sa.text(statement))


def _drop_database(admin: sa.Engine, name: str) -> None:
    with admin.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def upgraded_warehouse(url: str) -> sa.Engine:
    """`jobs-platform db upgrade` of a fresh test warehouse: the framework's tables at head.

    The real migrations, not a faster `create_all` + stamp: measured on this machine an
    upgrade of an empty database takes ~0.09 s on PostgreSQL and ~0.02 s on SQLite, only
    ~0.02 s / ~0.003 s more than `create_all` + stamp, so the suite runs what users run.
    """
    engine = warehouse_engine(url)
    upgrade_warehouse(engine)
    return engine


def prepare_warehouse(url: str) -> sa.Engine:
    """A fresh warehouse as a deploy leaves it: upgraded, with the backfills' tables.

    The target tables are those of every backfill loaded so far (the examples' and the
    tests' own), created as a user's deploy step would (`create_user_tables`).
    """
    engine = upgraded_warehouse(url)
    create_user_tables(engine, *(spec.table for spec in loaded_backfills().values()))
    return engine


def loaded_backfills() -> dict[str, BackfillSpec]:
    """Every backfill a module of the package or of the suite loaded so far holds at its
    top level, by asset key: the examples' and the tests' own."""
    import orders_example.definitions  # noqa: F401 - the examples' backfills
    from jobs_platform.orchestration.specs import backfill_specs

    modules = [
        module
        for name, module in list(sys.modules.items())
        if name.split(".")[0] in ("jobs_platform", "jobs_platform_tests", "orders_example")
        and module is not None
    ]
    return backfill_specs(value for module in modules for value in list(vars(module).values()))


@contextlib.contextmanager
def sibling_database(url: str, folder: Path) -> Iterator[str]:
    """A second fresh database on the same backend as `url`, prepared as a deploy leaves it.

    Upgraded, with the backfills' tables (`prepare_warehouse`, or a copy of the template
    built by it), and dropped afterwards.
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        sibling = f"sqlite:///{folder / f'sibling_{uuid.uuid4().hex[:8]}.db'}"
        prepare_warehouse(sibling)
        yield sibling
        return
    with upgraded_pg_database(deployed=True) as sibling:
        yield sibling
