"""How the benchmarks time things: wall seconds of repeated work, and commands run to time.

One home, so every figure a benchmark prints is the same kind of figure: the median of
`repeats` runs with its spread (min and max), and each run's own seconds.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any


def wall_seconds(repeats: int, work: Callable[[], object]) -> dict[str, Any]:
    """`work` run `repeats` times: the median, min and max of its wall seconds, each run's
    seconds, and what each run returned (`results`)."""
    seconds, results = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        results.append(work())
        seconds.append(round(time.perf_counter() - began, 4))
    return {
        "median_seconds": statistics.median(seconds),
        "min_seconds": min(seconds),
        "max_seconds": max(seconds),
        "seconds": seconds,
        "results": results,
    }


def run_command(command: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    """Run a command to time it; a command that fails is an error, not a figure."""
    finished = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[1:])} exited {finished.returncode}: "
            f"{finished.stderr.strip()[-800:]}"
        )
    return finished


def alternated_wall_seconds(
    repeats: int, methods: dict[str, Callable[[], object]]
) -> dict[str, dict[str, Any]]:
    """Each of `methods` run once to warm up, then `repeats` times alternated (A B A B …),
    so that the machine's drift hits all alike: per method its median, min, max and each
    run's seconds, and (`ratio_to_first`) the median of its pairwise ratios to the first."""
    for work in methods.values():
        work()
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, work in methods.items():
            began = time.perf_counter()
            work()
            seconds[name].append(round(time.perf_counter() - began, 4))
    first = seconds[next(iter(methods))]
    return {
        name: {
            "median_seconds": statistics.median(runs),
            "min_seconds": min(runs),
            "max_seconds": max(runs),
            "seconds": runs,
            "ratio_to_first": round(
                statistics.median(run / base for run, base in zip(runs, first, strict=True)), 3
            ),
        }
        for name, runs in seconds.items()
    }
