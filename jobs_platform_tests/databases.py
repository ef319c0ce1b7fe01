"""The tests' warehouses: upgraded as `jobs-platform db upgrade` does, prepared as a deploy
leaves them."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables


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
    import jobs_platform.definitions  # noqa: F401 - the examples' backfills
    from jobs_platform.orchestration.specs import backfill_specs

    modules = [
        module
        for name, module in list(sys.modules.items())
        if name.split(".")[0] in ("jobs_platform", "jobs_platform_tests") and module is not None
    ]
    return backfill_specs(value for module in modules for value in list(vars(module).values()))


@contextlib.contextmanager
def sibling_database(url: str, folder: Path) -> Iterator[str]:
    """A second fresh database on the same backend as `url`, prepared as a deploy leaves it.

    Upgraded, with the backfills' tables (`prepare_warehouse`), and dropped afterwards.
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        sibling = f"sqlite:///{folder / f'sibling_{uuid.uuid4().hex[:8]}.db'}"
        prepare_warehouse(sibling)
        yield sibling
        return
    name = f"{parsed.database}_sib_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(
        parsed.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
    )
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        sibling = parsed.set(database=name).render_as_string(hide_password=False)
        prepare_warehouse(sibling)
        yield sibling
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
