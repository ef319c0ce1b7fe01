"""How the benchmarks time things: wall seconds of repeated work, and commands run to time.

One home, so every figure a benchmark prints is the same kind of figure: the median of
`repeats` runs with its spread (min and max), and each run's own seconds. Methods compared
with one another run alternated (`alternated`), and their ratio is taken pair by pair
(`median_ratio`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far, if this host runs it (from
    /proc/PID/stat; a server on another host, or a process gone, gives None)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def run_command(command: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    """Run a command to time it; a command that fails is an error, not a figure."""
    finished = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[1:])} exited {finished.returncode}: "
            f"{finished.stderr.strip()[-800:]}"
        )
    return finished


@dataclass
class Runs:
    """One method's timed runs, in the order they ran, with the load average at each."""

    seconds: list[float] = field(default_factory=list)
    load_averages: list[float] = field(default_factory=list)

    def figures(self, rows: int) -> dict[str, Any]:
        """What a benchmark prints for the method: the median and its spread, every run."""
        median = statistics.median(self.seconds)
        return {
            "rows": rows,
            "seconds": round(median, 4),  # the median run
            "rows_per_s": round(rows / median, 1),
            "min_seconds": round(min(self.seconds), 4),
            "max_seconds": round(max(self.seconds), 4),
            "runs_seconds": [round(s, 4) for s in self.seconds],
            "load_average": round(statistics.median(self.load_averages), 2),
        }


def alternated(
    methods: Mapping[str, Callable[[], float | None]], repeats: int, warmup: int = 1
) -> dict[str, Runs]:
    """Each method run `warmup` + `repeats` times, alternated: round by round, every method
    once in turn (A B C A B C …), so drift on the machine hits them all alike.

    A method times itself and returns its seconds (its set-up stays off the clock), or
    None when it does not apply this round. The warm-up rounds are not kept.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"--repeats must be >= 1 and --warmup >= 0, got {repeats}, {warmup}")
    runs = {name: Runs() for name in methods}
    for round_number in range(warmup + repeats):
        for name, method in methods.items():
            load = os.getloadavg()[0]
            seconds = method()
            if seconds is not None and round_number >= warmup:
                runs[name].seconds.append(seconds)
                runs[name].load_averages.append(load)
    return {name: kept for name, kept in runs.items() if kept.seconds}


def median_ratio(numerator: Runs, denominator: Runs) -> float:
    """The median of the runs' ratios pair by pair (run i of one over run i of the other:
    the same round, so the same state of the machine)."""
    pairs = zip(numerator.seconds, denominator.seconds, strict=True)
    return round(statistics.median(a / b for a, b in pairs), 3)


def seconds_of(work: Callable[[], object]) -> Callable[[], float]:
    """`work` as a method `alternated` times from outside: each call runs it and returns
    the wall seconds it took."""

    def run() -> float:
        began = time.perf_counter()
        work()
        return time.perf_counter() - began

    return run


def alternated_wall_seconds(
    repeats: int, methods: dict[str, Callable[[], object]]
) -> dict[str, dict[str, Any]]:
    """`alternated` for methods timed from outside (one warm-up round, then `repeats`):
    per method its median, min, max and each run's seconds, and (`ratio_to_first`) the
    median of its pairwise ratios to the first method."""

    runs = alternated({name: seconds_of(work) for name, work in methods.items()}, repeats)
    first = runs[next(iter(methods))]
    return {
        name: {
            "median_seconds": round(statistics.median(kept.seconds), 4),
            "min_seconds": round(min(kept.seconds), 4),
            "max_seconds": round(max(kept.seconds), 4),
            "seconds": [round(s, 4) for s in kept.seconds],
            "ratio_to_first": median_ratio(kept, first),
        }
        for name, kept in runs.items()
    }
