"""`jobs-platform status` reports a known scenario exactly."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from jobs_platform.examples.orders.assets import daily_partitions, daily_revenue, orders
from jobs_platform.examples.orders.seed import seed_orders
from jobs_platform_tests.support import materialize, run_cli

FIRST = dt.date(2024, 6, 1)
POISON = dt.date(2024, 6, 3)


def test_status_json_counts_done_quarantined_and_missing_partitions(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], FIRST, POISON, poison_days=[POISON])
    for day in (FIRST, FIRST + dt.timedelta(days=1), POISON):
        materialize([orders, daily_revenue], day.isoformat())

    finished = run_cli(
        [str(Path(sys.executable).with_name("jobs-platform")), "status", "--json"], platform_env
    )

    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    every_day = len(daily_partitions.get_partition_keys())
    orders_health = report["assets"]["orders"]
    assert {key: orders_health[key] for key in ("done", "failed", "quarantined", "in_flight")} == {
        "done": 2,
        "failed": 0,
        "quarantined": 1,
        "in_flight": 0,
    }
    assert orders_health["missing"] == every_day - 3
    assert orders_health["duration_p50_seconds"] > 0
    revenue = report["assets"]["daily_revenue"]
    assert (revenue["done"], revenue["quarantined"], revenue["missing"]) == (2, 0, every_day - 2)
    assert report["oldest_pending_request_age_seconds"] is None
