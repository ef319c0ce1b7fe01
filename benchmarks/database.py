"""Where a benchmark runs: a PostgreSQL database, and a fresh schema in it per measurement.

The database is `--database-url` when given, else `JOBS_PLATFORM_DATABASE_URL` when it
is PostgreSQL, else a scratch database created on the local server and dropped after.
Each measurement then gets its own schema (selected through the connection's
`search_path`), so a benchmark pointed at a real warehouse never touches its tables.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.db import normalize_url, redact_url

# The local server the scratch database is created on (the one the test suite uses).
SCRATCH_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
SCRATCH_PREFIX = "jp_bench_"


class BenchDatabaseError(RuntimeError):
    """No PostgreSQL database to benchmark on."""


@dataclass(frozen=True)
class BenchDatabase:
    """The database a benchmark runs in, and how it was chosen (for the report)."""

    url: str
    origin: str  # "--database-url", "JOBS_PLATFORM_DATABASE_URL" or "scratch database"

    @property
    def shown(self) -> str:
        return f"{redact_url(self.url)} ({self.origin})"


@contextmanager
def bench_database(
    database_url: str | None = None, environ: Mapping[str, str] | None = None
) -> Iterator[BenchDatabase]:
    """The PostgreSQL database to benchmark on; a scratch one is dropped on the way out."""
    env = os.environ if environ is None else environ
    if database_url:
        if not _is_postgres(database_url):
            raise BenchDatabaseError(
                f"--database-url must be PostgreSQL, got {redact_url(database_url)}"
            )
        _check_reachable(database_url)
        yield BenchDatabase(_rendered(database_url), "--database-url")
        return
    configured = env.get("JOBS_PLATFORM_DATABASE_URL")
    if configured and _is_postgres(configured):
        _check_reachable(configured)
        yield BenchDatabase(_rendered(configured), "JOBS_PLATFORM_DATABASE_URL")
        return
    with scratch_database() as url:
        yield BenchDatabase(url, "scratch database")


def json_report_main(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    bench: Callable[[str, argparse.Namespace], dict],
) -> int:
    """The `python -m` entry of a bench that prints its report as JSON: adds `--repeats`
    and `--database-url` to `parser`, runs `bench(url, args)` on the bench database, notes
    that database in the report and exits 0 when the report's target was met, else 1."""
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    with bench_database(args.database_url) as database:
        report = bench(database.url, args)
    report["notes"]["database"] = database.shown
    print(json.dumps(report, indent=2))
    return 0 if report["met"] else 1


@contextmanager
def scratch_database(server_url: str = SCRATCH_SERVER_URL) -> Iterator[str]:
    """A new empty database `jp_bench_<random>` on `server_url`, dropped afterwards."""
    name = f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:10]}"
    admin = _admin_engine(server_url)
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        raise BenchDatabaseError(
            "the benchmarks need PostgreSQL: pass --database-url, set "
            "JOBS_PLATFORM_DATABASE_URL to a PostgreSQL URL, or run a server at "
            f"{redact_url(server_url)} (could not connect: {_first_line(exc)})"
        ) from None
    try:
        yield _rendered(sa.make_url(server_url).set(database=name))
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def fresh_schema(database_url: str, label: str) -> Iterator[str]:
    """A new schema in the database; yields a URL whose connections use it, then drops it."""
    name = f"{SCRATCH_PREFIX}{label}_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(normalize_url(database_url), poolclass=sa.NullPool)
    with engine.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{name}"'))
    try:
        yield schema_url(database_url, name)
    finally:
        from jobs_platform.store.db import dispose_engines

        dispose_engines()  # the framework's cached engines hold connections to the schema
        with engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        engine.dispose()


def schema_url(database_url: str, schema: str) -> str:
    """`database_url` with `search_path` set to `schema` for every connection."""
    url = normalize_url(database_url)
    # A query parameter given twice reads as a tuple of its values.
    given = url.query.get("options") or ()
    existing = [given] if isinstance(given, str) else list(given)
    options = " ".join([*existing, f"-csearch_path={schema}"])
    return _rendered(url.update_query_dict({"options": options}))


def server_facts(database_url: str) -> dict[str, str]:
    """The server's version and the settings that bear on write speed."""
    engine = sa.create_engine(normalize_url(database_url), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            facts = {"postgresql": connection.execute(sa.text("SHOW server_version")).scalar_one()}
            for setting in ("synchronous_commit", "shared_buffers", "max_wal_size"):
                facts[setting] = connection.execute(sa.text(f"SHOW {setting}")).scalar_one()
    finally:
        engine.dispose()
    return facts


def _is_postgres(url: str) -> bool:
    try:
        return sa.make_url(url).get_backend_name() == "postgresql"
    except sa.exc.ArgumentError:
        return False


def _check_reachable(url: str) -> None:
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        raise BenchDatabaseError(
            f"cannot connect to PostgreSQL at {redact_url(url)}: {_first_line(exc)}"
        ) from None
    finally:
        engine.dispose()


def _admin_engine(server_url: str) -> sa.Engine:
    return sa.create_engine(
        normalize_url(server_url), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
    )


def _rendered(url: str | sa.URL) -> str:
    return normalize_url(url).render_as_string(hide_password=False)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


SNAPSHOT_TABLE = "bench_row_versions"


def snapshot_row_versions(engine: sa.Engine, table: str, key: str) -> None:
    """Remember every row's xmin: PostgreSQL gives a row a new one exactly when it rewrites it."""
    with engine.begin() as connection:
        quote = connection.dialect.identifier_preparer.quote
        connection.execute(
            sa.text(
                f"CREATE TABLE {quote(SNAPSHOT_TABLE)} AS "
                f"SELECT {quote(key)} AS key, xmin::text AS version FROM {quote(table)}"
            )
        )


def new_row_versions(engine: sa.Engine, table: str, key: str) -> int:
    """Rows rewritten (or added) since `snapshot_row_versions`; forgets the snapshot."""
    # Identifiers come from the benchmark's own code, never from input; quoted anyway.
    with engine.begin() as connection:
        quote = connection.dialect.identifier_preparer.quote
        changed = connection.execute(
            sa.text(
                f"SELECT count(*) FROM {quote(table)} AS t LEFT JOIN {quote(SNAPSHOT_TABLE)} AS v "
                f"ON v.key = t.{quote(key)} WHERE v.version IS DISTINCT FROM t.xmin::text"
            )
        ).scalar_one()
        connection.execute(sa.text(f"DROP TABLE {quote(SNAPSHOT_TABLE)}"))
    return changed


def copy_rows(connection: sa.Connection, table: sa.Table, rows: Iterable[Mapping]) -> int:
    """Stream `rows` (dicts naming the same columns) into `table` with one COPY; returns
    how many. A row at a time through psycopg's COPY writer, nothing held: seeding a large
    warehouse costs a pass over its rows, not a list of them and an INSERT per batch."""
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return 0
    names = list(first)
    quote = connection.dialect.identifier_preparer.quote
    statement = f"COPY {quote(table.name)} ({', '.join(quote(name) for name in names)}) FROM STDIN"
    raw = connection.connection.driver_connection
    assert raw is not None, "a connection in use has its driver's connection"
    count = 0
    with raw.cursor() as cursor, cursor.copy(statement) as copy:
        for row in itertools.chain([first], iterator):
            copy.write_row([row[name] for name in names])
            count += 1
    return count
