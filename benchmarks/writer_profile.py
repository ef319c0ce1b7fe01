"""Where the writer's time goes against the COPY floors: wall, client CPU and server CPU.

    python -m benchmarks.writer_profile [--rows N] [--repeats K] [--json]

The same rows and table shape as `bench upsert` (50,000-row chunks, one transaction each),
three methods alternated round by round after a warm-up round, each into a fresh table
after a CHECKPOINT: the framework's writer (`framework_upsert`), the server-side COPY of
text files written beforehand (`copy_floor_server`) and the client COPY of prepared text
(`copy_floor`). Per run: wall seconds, this process's CPU seconds, the CPU seconds of the
server process serving the method's one connection (read from /proc: the server must be
on this host, else null) and the WAL the cluster wrote meanwhile (the whole cluster's:
other databases' writes count too). Each figure is the median of the runs with the
1-minute load average at each. What the split says: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import sqlalchemy as sa

from benchmarks import floors
from benchmarks.database import bench_database, fresh_schema
from benchmarks.timing import process_cpu_seconds
from benchmarks.upsert import (
    CHUNK_ROWS,
    checkpoint,
    framework_upsert,
    libpq_dsn,
    orders_frame,
    orders_shaped,
)
from jobs_platform.store.db import normalize_url


def _wal_position(engine: sa.Engine) -> str:
    with engine.connect() as connection:
        return str(connection.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar_one())


def _wal_megabytes(engine: sa.Engine, since: str) -> float:
    with engine.connect() as connection:
        written = connection.execute(
            sa.text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), CAST(:since AS pg_lsn))"),
            {"since": since},
        ).scalar_one()
    return round(float(written) / 1e6, 1)


def profile_writer(database_url: str, rows: int, repeats: int) -> dict:
    """Each method's runs and medians (see the module's docstring)."""
    frame = orders_frame(rows)
    columns = list(frame.columns)
    texts = floors.prepared_copy_text(frame, CHUNK_ROWS)
    runs: dict[str, list[dict]] = {}
    with fresh_schema(database_url, "profile") as url, tempfile.TemporaryDirectory() as folder:
        Path(folder).chmod(0o755)  # the server's own user reads the floor's files
        files = floors.write_copy_files(texts, Path(folder) / "floor")
        # One pooled connection, so that one server process serves the whole writer.
        engine = sa.create_engine(normalize_url(url), poolclass=sa.StaticPool)
        watched = psycopg.connect(libpq_dsn(url))
        try:
            with engine.connect() as connection:
                writer_pid = connection.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            methods: dict[str, tuple[int, Callable[[sa.Table], object]]] = {
                "framework_upsert": (writer_pid, lambda t: framework_upsert(engine, t, frame)),
                "copy_floor_server": (
                    watched.info.backend_pid,
                    lambda t: floors.server_copy_floor_on(watched, t.name, columns, files),
                ),
                "copy_floor": (
                    watched.info.backend_pid,
                    lambda t: floors.copy_floor_on(watched, t.name, columns, texts),
                ),
            }
            for round_number in range(repeats + 1):
                for name, (pid, work) in methods.items():
                    table = orders_shaped(engine, f"profile_{name}_{round_number}")
                    checkpoint(engine)
                    run = _measured(engine, pid, functools.partial(work, table))
                    table.drop(engine)
                    if round_number:  # the first round warms up
                        runs.setdefault(name, []).append(run)
        finally:
            watched.close()
            engine.dispose()
    medians = {
        name: {
            field: statistics.median(v for run in kept if (v := run[field]) is not None)
            if any(run[field] is not None for run in kept)
            else None
            for field in kept[0]
        }
        for name, kept in runs.items()
    }
    return {"rows": rows, "chunk_rows": CHUNK_ROWS, "medians": medians, "runs": runs}


def _measured(engine: sa.Engine, pid: int, work: Callable[[], object]) -> dict:
    load, wal, server = os.getloadavg()[0], _wal_position(engine), process_cpu_seconds(pid)
    client, began = time.process_time(), time.perf_counter()
    work()
    wall, client = time.perf_counter() - began, time.process_time() - client
    server_after = process_cpu_seconds(pid)
    return {
        "wall_s": round(wall, 3),
        "client_cpu_s": round(client, 3),
        "server_cpu_s": (
            round(server_after - server, 3)
            if server is not None and server_after is not None
            else None
        ),
        "wal_mb": _wal_megabytes(engine, wal),
        "load_1m": round(load, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.writer_profile")
    parser.add_argument("--rows", type=int, default=1_000_000, metavar="N")
    parser.add_argument("--repeats", type=int, default=5, metavar="K")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeats < 1:
        parser.error("--rows and --repeats must be at least 1")
    with bench_database(args.database_url) as database:
        result = profile_writer(database.url, args.rows, args.repeats)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, figures in result["medians"].items():
        print(f"{name:18} " + "  ".join(f"{field} {value}" for field, value in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
