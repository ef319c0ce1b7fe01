"""Versioned upgrades of the framework's tables (Alembic), and the check that runs before work.

A deploy runs `jobs-platform db upgrade`. Steps, sensors, hooks and the CLI's read
commands never run DDL: they check the warehouse's revision once per process and refuse
to work on one that is behind, with one line saying what to run. The embedded default
(SQLite under `.jobs_platform/`) is the exception: it is the zero-set-up path of the demo
and `dagster dev`, so it upgrades itself.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex, CreateTable, ExecutableDDLElement

from jobs_platform.dead_letter.entries import sign_unsigned_entries
from jobs_platform.errors import TerminalError
from jobs_platform.settings import embedded_database_url
from jobs_platform.store.db import normalize_url, redact_url, warehouse_engine
from jobs_platform.store.schema import VERSION_TABLE, create_user_tables, in_creation_order

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported where it is used: a read command's schema check (`check_schema`)
# reads the version table with one query, and importing Alembic (and Mako, Pygments) would
# cost it more than that, on every command.

HEAD_REVISION = "0012_change_gate"
"""The packaged migrations' head, known without reading them (`check_schema`'s one query).
A new migration changes it: a test compares it with Alembic's head."""

# The schema 0.1.0 created with `create_all`, before the framework had migrations.
BASELINE_REVISION = "0001_schema_0_1_0"
BASELINE_TABLES = frozenset(
    {
        "jp_checkpoints",
        "jp_partitions",
        "jp_leases",
        "jp_attempts",
        "jp_quarantine",
        "jp_alert_ledger",
        "jp_outbox",
    }
)
# Any constant works; every process that upgrades must use the same one.
UPGRADE_LOCK_ID = 7_415_902_312
UPGRADE_COMMAND = "jobs-platform db upgrade"


class SchemaNotReady(TerminalError):
    """The warehouse's framework tables are not at this version's revision.

    Terminal: retrying cannot help until someone runs `jobs-platform db upgrade`.
    """


@dataclass(frozen=True)
class SchemaState:
    """Where a warehouse's framework tables stand against this version's migrations."""

    url: str
    """The warehouse URL, password redacted."""
    revision: str | None
    """The applied revision; None for an empty warehouse or 0.1.0's unversioned tables."""
    head: str
    unversioned: bool = False
    """The tables of 0.1.0 are there without a version table (upgrade adopts them)."""

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def known(self) -> bool:
        return self.revision is None or self.revision in _script_revisions()

    def describe_revision(self) -> str:
        if self.revision is not None:
            return self.revision
        return "none (0.1.0 tables, unversioned)" if self.unversioned else "none (empty)"

    def not_ready_message(self, upgrade_command: str = UPGRADE_COMMAND) -> str:
        if not self.known:
            return (
                f"warehouse {self.url} is at revision {self.revision}, which this jobs_platform "
                f"does not know (its head is {self.head}): a newer version upgraded it; "
                "deploy that version"
            )
        return (
            f"warehouse {self.url} is at revision {self.describe_revision()}, this "
            f"jobs_platform needs {self.head}; run: {upgrade_command}"
        )


def alembic_config(url: str | sa.URL | None = None) -> Config:
    """Alembic's configuration of the packaged migrations (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "jobs_platform.store:migrations")
    config.set_main_option("version_table", VERSION_TABLE)
    # New revision files are named after their id, which says what they do (0002_…).
    config.set_main_option("file_template", "%%(rev)s")
    if url is not None:
        # ConfigParser interpolates '%': a percent-encoded password must be doubled.
        rendered = normalize_url(url).render_as_string(hide_password=False)
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


@functools.cache
def _script_revisions() -> frozenset[str]:
    return frozenset(revision.revision for revision in _script().walk_revisions())


def head_revision() -> str:
    """The revision this version of the framework needs."""
    head = _script().get_current_head()
    assert head is not None, "the packaged migrations have no revision"
    return head


def schema_state(engine: sa.Engine) -> SchemaState:
    """Read the warehouse's revision; changes nothing."""
    with engine.connect() as connection:
        return _state(connection)


def _state(connection: sa.Connection) -> SchemaState:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    revision = context.get_current_revision()
    unversioned = revision is None and _has_baseline_tables(connection)
    return SchemaState(redact_url(connection.engine.url), revision, head_revision(), unversioned)


def _has_baseline_tables(connection: sa.Connection) -> bool:
    present = BASELINE_TABLES & set(sa.inspect(connection).get_table_names())
    if present and present != BASELINE_TABLES:
        raise SchemaNotReady(
            f"warehouse {redact_url(connection.engine.url)} has some of the framework's tables "
            f"but no schema revision, and lacks {', '.join(sorted(BASELINE_TABLES - present))}: "
            "it was not created by jobs_platform; restore it or start from an empty database"
        )
    return bool(present)


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade_warehouse` found and left."""

    url: str
    before: str | None
    after: str
    adopted: bool
    """0.1.0's unversioned tables were stamped as the baseline revision first."""


def upgrade_warehouse(engine: sa.Engine) -> Upgrade:
    """Bring the framework's tables to head in one transaction; a no-op when already there.

    Safe from many processes at once: on PostgreSQL a session advisory lock, taken on the
    very connection the migrations run on, serialises upgraders (the second then finds the
    warehouse at head); on SQLite the transaction's BEGIN IMMEDIATE does.
    """
    from alembic import command

    with engine.connect() as connection:
        postgresql = connection.dialect.name == "postgresql"
        if postgresql:
            connection.execute(sa.text("SELECT pg_advisory_lock(:id)"), {"id": UPGRADE_LOCK_ID})
            connection.commit()  # a session lock: it outlives this transaction
        try:
            with connection.begin():
                state = _state(connection)
                if not state.known:
                    raise SchemaNotReady(state.not_ready_message())
                config = alembic_config()
                # Alembic runs inside the transaction begun above and leaves the commit to it.
                config.attributes["connection"] = connection
                if state.unversioned:
                    command.stamp(config, BASELINE_REVISION)
                if not state.at_head:
                    command.upgrade(config, "head")
                # What a printed script (`--sql`) could not do: sign older entries.
                sign_unsigned_entries(connection)
                after = _state(connection).revision
        finally:
            if postgresql:
                connection.execute(
                    sa.text("SELECT pg_advisory_unlock(:id)"), {"id": UPGRADE_LOCK_ID}
                )
                connection.commit()
    return Upgrade(state.url, state.revision, after or "", state.unversioned)


def write_upgrade_sql(engine: sa.Engine, out: TextIO) -> SchemaState:
    """Write the SQL that would bring this warehouse to head; changes nothing.

    The starting point is read from the warehouse, so the script holds only what it lacks.
    """
    from alembic import command

    state = schema_state(engine)
    if not state.known:
        raise SchemaNotReady(state.not_ready_message())
    if state.at_head:
        return state
    config = alembic_config(engine.url)
    config.output_buffer = out
    if state.unversioned:
        command.stamp(config, BASELINE_REVISION, sql=True)
    start = state.revision or (BASELINE_REVISION if state.unversioned else None)
    command.upgrade(config, f"{start}:head" if start else "head", sql=True)
    return state


@dataclass(frozen=True)
class Deploy:
    """What `deploy_warehouse` did."""

    upgrade: Upgrade
    created: tuple[sa.Table, ...]
    """The backfill tables it created (the others were there)."""


def deploy_warehouse(engine: sa.Engine, backfill_tables: Iterable[sa.Table]) -> Deploy:
    """The deploy step (`jobs-platform db upgrade`, `bin/stack up`): the framework's tables
    to head, then the code location's backfill tables that are missing.

    Each in its own transaction, the framework's first: when its migration fails, nothing
    of the location is created. A table that exists is left as it is (the user's own
    migrations change it), so a second deploy, or one racing this one, creates nothing.
    """
    upgrade = upgrade_warehouse(engine)
    return Deploy(upgrade, tuple(create_user_tables(engine, *backfill_tables)))


def missing_user_tables(engine: sa.Engine, tables: Iterable[sa.Table]) -> list[sa.Table]:
    """Those of a code location's backfill tables the warehouse lacks; changes nothing.

    Only their existence is checked: a backfill's table is the user's, created once and
    never altered by the framework (`create_user_tables`), so its columns are not compared.
    """
    with engine.connect() as connection:
        inspector = sa.inspect(connection)
        return [
            table
            for table in in_creation_order(tables)
            if not inspector.has_table(table.name, schema=table.schema)
        ]


def write_user_tables_sql(
    engine: sa.Engine, tables: Iterable[sa.Table], out: TextIO
) -> list[sa.Table]:
    """Write the DDL `create_user_tables` would run for the missing tables; changes nothing.

    Returns the missing tables. The statements are compiled for the warehouse's dialect,
    in the order they must run (a referenced table first), each table with its indexes.
    """
    missing = missing_user_tables(engine, tables)
    for table in missing:
        statements: list[ExecutableDDLElement] = [
            CreateTable(table),
            *(CreateIndex(index) for index in table.indexes),
        ]
        for statement in statements:
            out.write(f"{str(statement.compile(dialect=engine.dialect)).strip()};\n\n")
    return missing


_checked: set[str] = set()
_embedded_ready: set[tuple[str, str]] = set()
_ready_lock = threading.Lock()


def check_schema(engine: sa.Engine) -> None:
    """Raise `SchemaNotReady` unless the framework's tables are at head; never any DDL.

    Checked once per process and warehouse (a success is cached; a failure is not, so a
    long-lived daemon recovers once someone upgrades).
    """
    key = engine.url.render_as_string(hide_password=False)
    if key in _checked:
        return
    if _version_table_at_head(engine):
        with _ready_lock:
            _checked.add(key)
        return
    state = schema_state(engine)  # Alembic's reading, for the message (or a surprise)
    if not state.at_head:
        raise SchemaNotReady(state.not_ready_message())
    with _ready_lock:
        _checked.add(key)


def _version_table_at_head(engine: sa.Engine) -> bool:
    """Whether the version table holds exactly `HEAD_REVISION`: one plain query, no
    Alembic. False when it cannot tell (no version table, another revision, several)."""
    version = sa.table(VERSION_TABLE, sa.column("version_num"))
    try:
        with engine.connect() as connection:
            revisions = connection.execute(sa.select(version.c.version_num)).scalars().all()
    except sa.exc.ProgrammingError:  # no version table: an empty or 0.1.0 warehouse
        return False
    except sa.exc.OperationalError as error:
        if engine.dialect.name == "sqlite" and "no such table" in str(error.orig):
            return False
        raise
    return revisions == [HEAD_REVISION]


def ensure_embedded_schema(engine: sa.Engine, tables: Iterable[sa.Table] = ()) -> bool:
    """On the embedded default only: upgrade it and create the missing `tables`.

    The zero-set-up SQLite warehouse of the working directory has no deploy step, so the
    demo and `dagster dev` make it ready themselves, once per process and table. Any other
    warehouse is left alone (its deploy runs `jobs-platform db upgrade`); returns whether
    `engine` is the embedded default.
    """
    if not is_embedded_default(engine.url):
        return False
    key = engine.url.render_as_string(hide_password=False)
    if key not in _checked:
        upgrade_warehouse(engine)
    missing = [table for table in tables if (key, table.name) not in _embedded_ready]
    if missing:
        create_user_tables(engine, *missing)
    with _ready_lock:
        _checked.add(key)
        _embedded_ready.update((key, table.name) for table in missing)
    return True


def ready_warehouse(database_url: str | sa.URL) -> sa.Engine:
    """The warehouse at `database_url`, its schema current (the embedded default made so)."""
    engine = warehouse_engine(database_url)
    ensure_embedded_schema(engine)
    check_schema(engine)
    return engine


def is_embedded_default(url: str | sa.URL) -> bool:
    """Whether `url` is the zero-set-up SQLite warehouse of the working directory."""
    return normalize_url(url) == normalize_url(embedded_database_url())
