"""`python -m benchmarks.step_start`: what a step process pays before its op runs.

A step of a multiprocess run is forked from its run's forkserver and first builds the
run's Dagster instance from its `InstanceRef`. Compared: the framework's forkserver
(`with_forkserver_by_default`: Dagster's instance storage modules, then the code location)
against one preloading the code location alone (the framework before it preloaded the
storage modules). Each round is a fresh interpreter, as Python keeps one forkserver a
process, and the rounds alternate the two. Prints JSON: for each, the CPU seconds of a
step building its instance (median, min, max over every step of every round) and of the
forkserver's start (over rounds).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.forkserver
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import EXAMPLE_MODULE
from benchmarks.timing import process_cpu_seconds

VARIANTS = ("framework", "location_only")
EXECUTOR_MODULE = "dagster._core.executor.multiprocess"  # Dagster's loop preloads it first


def preload_of(variant: str, module: str) -> list[str]:
    from jobs_platform.orchestration.executors import with_forkserver_by_default

    if variant == "location_only":
        return [EXECUTOR_MODULE, module]
    config = with_forkserver_by_default({"multiprocess": {}}, module)
    return [
        EXECUTOR_MODULE,
        *config["multiprocess"]["start_method"]["forkserver"]["preload_modules"],
    ]


def _step(home: str, results) -> None:
    """What a step does before its op: the run's instance (`from_config` reads the home's
    settings into the `InstanceRef` a step gets, then builds the instance from it)."""
    from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES

    preloaded = all(name in sys.modules for name in INSTANCE_STORAGE_MODULES)
    started = time.process_time()
    import dagster as dg

    with dg.DagsterInstance.from_config(home):
        pass
    results.put({"cpu": time.process_time() - started, "storage_preloaded": preloaded})


def one_round(variant: str, module: str, home: str, steps: int) -> dict:
    """In this process: a forkserver with the variant's preload, `steps` steps forked from it."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload_of(variant, module))
    results = context.SimpleQueue()
    reports = []
    for _ in range(steps):
        process = context.Process(target=_step, args=(home, results))
        process.start()
        reports.append(results.get())
        process.join()
    server: Any = multiprocessing.forkserver._forkserver  # private: typeshed leaves it out
    return {
        "forkserver_cpu": process_cpu_seconds(server._forkserver_pid),
        "steps": reports,
    }


def _summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_start")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="steps forked a round")
    parser.add_argument("--module", default=EXAMPLE_MODULE)
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_round(args.one, args.module, args.home, args.steps)))
        return 0
    import dagster as dg

    with tempfile.TemporaryDirectory(prefix="jp_step_start_") as home:
        Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(home):  # its storage, before the rounds
            pass
        rounds: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                command = [
                    sys.executable, "-m", "benchmarks.step_start", "--one", variant,
                    "--module", args.module, "--home", home, "--steps", str(args.steps),
                ]  # fmt: skip
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                rounds[variant].append(json.loads(done.stdout.splitlines()[-1]))
    figures = {
        variant: {
            "step_cpu_seconds": _summary([s["cpu"] for r in found for s in r["steps"]]),
            "forkserver_cpu_seconds": _summary([r["forkserver_cpu"] for r in found]),
            "storage_preloaded": sorted(
                {s["storage_preloaded"] for r in found for s in r["steps"]}
            ),
        }
        for variant, found in rounds.items()
    }
    print(json.dumps({"rounds": args.rounds, "steps": args.steps, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
