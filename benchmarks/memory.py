"""`bench memory`: peak RSS of one large partition, run as a user runs it.

One day of `rows` orders is seeded, then materialized with
`dagster asset materialize -m orders_example.definitions --select orders --partition D`
(or `-m` another code location serving `orders`; the step in its own process, under the
multiprocess executor) with `chunk_rows`, under `/usr/bin/time -f %M`: the kernel's peak
RSS over that command and the processes it waited for (the step process is the largest),
as `/usr/bin/time -v` reports it. Seeding runs in a process of its own: a child started
from a large parent would inherit the parent's peak in its `ru_maxrss` (vfork + exec
records the parent's high-water mark). The step process's own VmHWM, sampled from /proc,
is reported beside it. Run it at two or more sizes and read the slope: a worker bounded
by the chunk does not grow with the partition.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from benchmarks.daemon import RssSampler
from benchmarks.database import fresh_schema, server_facts
from benchmarks.run_config import chunk_rows_config
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import create_user_tables
from orders_example.orders.tables import orders_table

DAY = dt.date(2024, 3, 1)
TIME = "/usr/bin/time"  # GNU time (Debian's `time` package)


def run_memory_bench(
    database_url: str, rows: int, chunk_rows: int, module: str = "orders_example.definitions"
) -> dict:
    if rows < 1 or chunk_rows < 1:
        raise ValueError("--rows and --chunk-rows must be >= 1")
    import dagster as dg

    load_before = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="jp_bench_memory_") as folder:
        landing = str(Path(folder) / "landing")
        bin_dir = Path(sys.executable).parent
        subprocess.run(
            [str(bin_dir / "orders-example"), "seed", "--start", DAY.isoformat(),
             "--end", DAY.isoformat(), "--orders-per-day", str(rows)],
            env={**os.environ, "JOBS_PLATFORM_LANDING": landing},
            check=True, capture_output=True,
        )  # fmt: skip
        home = Path(folder) / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(str(home)):
            pass
        with fresh_schema(database_url, "memory") as url:
            warehouse = warehouse_engine(url)
            upgrade_warehouse(warehouse)  # what a deploy does before the first run
            create_user_tables(warehouse, orders_table)
            env = {
                **os.environ,
                "JOBS_PLATFORM_DATABASE_URL": url,
                "JOBS_PLATFORM_LANDING": landing,
                "DAGSTER_HOME": str(home),
            }
            env.pop("JOBS_PLATFORM_FAILPOINTS", None)
            config = chunk_rows_config(module, ["orders"], chunk_rows)
            peak_file = Path(folder) / "peak_rss_kb"
            command = [
                TIME, "-f", "%M", "-o", str(peak_file),
                str(bin_dir / "dagster"), "asset", "materialize",
                "-m", module, "--select", "orders",
                "--partition", DAY.isoformat(),
                "--config-json", json.dumps(config),
            ]  # fmt: skip
            began = time.perf_counter()
            with open(Path(folder) / "materialize.log", "w") as log:
                process = subprocess.Popen(
                    command, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT
                )
                sampler = RssSampler([process])
                sampler.start()
                process.wait()
                sampler.stop()
            seconds = time.perf_counter() - began
            if process.returncode != 0:
                tail = (Path(folder) / "materialize.log").read_text()[-1500:]
                raise RuntimeError(
                    f"dagster asset materialize exited {process.returncode}:\n{tail}"
                )
            stored = _count(url)
            peak_kb = int(peak_file.read_text().split()[-1])
        with dg.DagsterInstance.from_config(str(home)) as instance:
            (record,) = instance.fetch_materializations(dg.AssetKey("orders"), limit=1).records
            materialization = record.asset_materialization
            if materialization is None:
                raise RuntimeError("the orders run recorded no materialization")
            metadata = materialization.metadata
    if stored != rows:
        raise RuntimeError(f"orders holds {stored} rows, expected {rows}")
    return {
        "rows": rows,
        "chunk_rows": chunk_rows,
        "peak_rss_mib": round(peak_kb / 1024, 1),
        "step_process_peak_rss_mib": sampler.peaks_mib().get("step"),
        "seconds": round(seconds, 3),
        "attempt_duration_seconds": metadata["duration_seconds"].value,
        "notes": {
            "command": " ".join(command[5:]),
            "load_average_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "server": server_facts(database_url),
        },
    }


def _count(url: str) -> int:
    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text("SELECT count(*) FROM orders")).scalar_one()
    finally:
        engine.dispose()
