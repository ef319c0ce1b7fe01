"""`python -m benchmarks.metrics`: runs for real at a tiny size and reports its
figures (the 10,000-partition figure is in README "Monitoring").

Through the module's `main` in this process (`cli_in_process`); the `metrics serve` it
scrapes is a real process.
"""

from __future__ import annotations

import json

from benchmarks.metrics import main
from jobs_platform_tests.cli_in_process import run_in_process


def test_bench_metrics_times_cold_scrapes_of_a_real_metrics_serve(pg_url, tmp_path):
    completed = run_in_process(
        main,
        ["--partitions", "40", "--quarantined", "3", "--repeats", "2", "--database-url", pg_url],
        cwd=tmp_path,
    )

    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    assert report["partitions_per_asset"] == 40 and report["met"] is True
    for figure in ("scrape_http_cold_cache", "read_metrics_in_process"):
        assert len(report["results"][figure]["seconds"]) == 2
    assert report["notes"]["exposition_bytes"] > 0
