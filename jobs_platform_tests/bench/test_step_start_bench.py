"""`python -m benchmarks.step_start`: runs for real at a tiny size (its figures are
in docs/BENCHMARKS.md, "Scratch in memory").

Through the module's `main` in this process (`cli_in_process`); each round is a real
interpreter with a real forkserver, and each step a real process forked from it.
"""

from __future__ import annotations

import json

from benchmarks.step_start import main
from jobs_platform_tests.cli_in_process import run_in_process


def test_bench_step_start_reports_both_forkservers_and_only_the_framework_preloads_storage(
    tmp_path,
):
    completed = run_in_process(main, ["--rounds", "1", "--steps", "2"], cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    figures = report["figures"]
    assert figures["framework"]["storage_preloaded"] == [True]
    assert figures["location_only"]["storage_preloaded"] == [False]
    for variant in figures.values():
        assert variant["step_cpu_seconds"]["min"] > 0
        assert variant["forkserver_cpu_seconds"]["median"] > 0
