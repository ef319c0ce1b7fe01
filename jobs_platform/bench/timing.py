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
