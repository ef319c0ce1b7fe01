"""Warehouse engines: one per URL and process, configured for safe concurrent writers."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import ConnectionPoolEntry

_engines: dict[tuple[str, int], sa.Engine] = {}
_engines_lock = threading.Lock()

# How long a SQLite writer waits for another writer before giving up. SQLite
# serialises writers; a chunk transaction is short, so waiting is the right answer.
SQLITE_BUSY_TIMEOUT_SECONDS = 60


def normalize_url(url: str | sa.URL) -> sa.URL:
    """Parse a warehouse URL; a bare `postgresql://` means the psycopg 3 driver we ship."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def redact_url(url: str | sa.URL) -> str:
    """The URL as it may appear in logs and errors: never with its password."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable database URL>"


def warehouse_engine(url: str | sa.URL) -> sa.Engine:
    """The process's engine for this URL; a forked child gets its own."""
    parsed = normalize_url(url)
    cache_key = (parsed.render_as_string(hide_password=False), os.getpid())
    with _engines_lock:
        engine = _engines.get(cache_key)
        if engine is None:
            engine = _create_engine(parsed)
            _engines[cache_key] = engine
        return engine


def dispose_engines() -> None:
    """Close every cached engine (tests and CLI commands call this on exit)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


# A server that does not answer must not hang a worker (or its heartbeat) forever.
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10


def _create_engine(url: sa.URL) -> sa.Engine:
    if url.get_backend_name() == "sqlite":
        return _create_sqlite_engine(url)
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_SECONDS},
    )


def _create_sqlite_engine(url: sa.URL) -> sa.Engine:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin, so that
        # every transaction can take the write lock up front (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_SECONDS * 1000}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # BEGIN IMMEDIATE takes the write lock at the start: two writers never
        # both read then both try to upgrade, which SQLite answers with "locked".
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
