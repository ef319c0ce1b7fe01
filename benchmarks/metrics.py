"""`python -m benchmarks.metrics`: what a scrape of `/metrics` costs at scale.

The warehouse is `bench status`'s (its seeding, reused): for each backfill asset of the
code location, `--partitions` partition rows with their attempt history, a few leases in
flight and `--quarantined` quarantine entries, plus as many dynamic `customers` keys on a
scratch Dagster instance. `jobs-platform metrics serve --cache-seconds 0` then runs in a
subprocess, as an operator runs it, and each timed scrape is a cold HTTP GET of /metrics:
the code location's partition keys, every query and the rendering (the cache, which makes
a repeated scrape free, is off). The reading alone (`read_metrics`) is timed in this
process too. Prints JSON; seconds, the best and every one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import EXAMPLE_MODULE
from benchmarks.database import json_report_main, server_facts
from benchmarks.status import _timed, seeded_warehouse

SCRAPE_TARGET_SECONDS = 1.0


def run_metrics_bench(
    database_url: str, partition_count: int, quarantined: int, repeats: int = 5
) -> dict:

    from jobs_platform.location import load_definitions
    from jobs_platform.orchestration.health import backfill_expected_keys
    from jobs_platform.orchestration.tags import BACKFILL_TAG

    specs = load_definitions(EXAMPLE_MODULE).resolve_all_asset_specs()
    assets = sorted(
        spec.key.to_user_string() for spec in specs if spec.tags.get(BACKFILL_TAG) == "true"
    )
    with seeded_warehouse(database_url, "metrics", assets, partition_count, quarantined) as (
        url,
        folder,
        home,
        env,
        build_seconds,
    ):
        with served_metrics(env, folder, EXAMPLE_MODULE) as address:
            body = scrape(address)  # warm: the engine connected, the schema checked
            results = {"scrape_http_cold_cache": _timed(repeats, lambda: scrape(address))}
        results["read_metrics_in_process"] = _in_process(url, home, specs, repeats,
                                                         backfill_expected_keys)  # fmt: skip
    best = results["scrape_http_cold_cache"]["best_seconds"]
    return {
        "partitions_per_asset": partition_count,
        "quarantine_entries": quarantined,
        "assets": assets,
        "results": results,
        "target": f"a cold scrape < {SCRAPE_TARGET_SECONDS:g} s",
        "met": best < SCRAPE_TARGET_SECONDS,
        "notes": {
            "repeats": repeats,
            "build_seconds": round(build_seconds, 2),
            "exposition_bytes": len(body),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "server": server_facts(database_url),
        },
    }


@contextlib.contextmanager
def served_metrics(env: dict[str, str], folder: str, module: str | None = None) -> Iterator[str]:
    """`jobs-platform metrics serve --cache-seconds 0` in a subprocess, as an operator runs
    it (of `module`, else $JOBS_PLATFORM_MODULE's): yields its /metrics URL, then
    stops it."""
    with metrics_server(env, folder, module) as server:
        yield server.address


@dataclass(frozen=True)
class MetricsServer:
    """A running `metrics serve`: where it answers, and its process (for its memory)."""

    address: str
    pid: int

    def peak_rss_mib(self) -> float:
        """The server process's peak resident set so far (`VmHWM`, Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        raise RuntimeError(f"no VmHWM for process {self.pid}")


@contextlib.contextmanager
def metrics_server(
    env: dict[str, str], folder: str, module: str | None = None
) -> Iterator[MetricsServer]:
    """`served_metrics`, yielding the server's address and process id."""
    command = [str(Path(sys.executable).with_name("jobs-platform")), "metrics", "serve",
               "--port", "0", "--cache-seconds", "0"]  # fmt: skip
    if module:
        command += ["-m", module]
    server = subprocess.Popen(
        command, env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        yield MetricsServer(_served_address(server), server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _served_address(server: subprocess.Popen) -> str:
    line = (
        server.stdout.readline() if server.stdout else ""
    )  # the one line it prints once listening ('' if it died)
    if not line.startswith("serving metrics on "):
        raise RuntimeError(f"metrics serve did not start (exit {server.poll()}): {line!r}")
    return line.split()[-1]


def scrape(url: str) -> bytes:
    """One GET of /metrics (cold when the server's cache is off): the exposition's bytes."""
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def _in_process(url, home, specs, repeats, backfill_expected_keys) -> dict:
    import dagster as dg

    from jobs_platform.metrics.reader import read_metrics
    from jobs_platform.store.clock import DATABASE_CLOCK
    from jobs_platform.store.db import warehouse_engine

    engine = warehouse_engine(url)
    with dg.DagsterInstance.from_config(str(home)) as instance:

        def read():
            with engine.connect() as connection:
                return read_metrics(
                    connection, backfill_expected_keys(specs, instance), clock=DATABASE_CLOCK
                )

        read()
        return _timed(repeats, read)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metrics",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--partitions", type=int, default=10_000, metavar="P")
    parser.add_argument("--quarantined", type=int, default=500, metavar="Q")
    return json_report_main(
        parser,
        argv,
        lambda url, args: run_metrics_bench(url, args.partitions, args.quarantined, args.repeats),
    )


if __name__ == "__main__":
    sys.exit(main())
