"""`jobs-platform dead-letter list|show|requeue`: find, read and release a quarantined day."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from jobs_platform.examples.orders.assets import daily_revenue, orders
from jobs_platform.examples.orders.seed import seed_orders
from jobs_platform_tests.support import engine_from, materialize, run_cli, table_snapshot

DAY = dt.date(2024, 8, 1)
PARTITION = DAY.isoformat()
JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
LIST_FIELDS = {
    "asset", "partition", "status", "attempts", "error_class", "last_error",
    "first_failed_at", "last_failed_at",
}  # fmt: skip
HISTORY_FIELDS = {"attempt", "run_id", "error_class", "error_type", "message", "at"}


def cli(env, *args: str):
    finished = run_cli([JOBS_PLATFORM, "dead-letter", *args], env)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    return finished


def test_requeue_after_fixing_the_input_resolves_the_entry_and_keeps_its_history(
    pg_platform_env,
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=30, poison_days=[DAY])
    assert not materialize([orders, daily_revenue], PARTITION).success

    (listed,) = json.loads(cli(pg_platform_env, "list", "--json").stdout)
    assert set(listed) == LIST_FIELDS
    assert (listed["asset"], listed["partition"], listed["status"]) == (
        "orders", PARTITION, "quarantined",
    )  # fmt: skip
    assert (listed["attempts"], listed["error_class"]) == (1, "terminal")
    shown = json.loads(cli(pg_platform_env, "show", "orders", PARTITION, "--json").stdout)
    assert [set(attempt) >= HISTORY_FIELDS for attempt in shown["history"]] == [True]

    seed_orders(landing, DAY, DAY, orders_per_day=30)  # the input is fixed
    cli(pg_platform_env, "requeue", "orders", PARTITION)

    assert json.loads(cli(pg_platform_env, "list", "--json").stdout) == []
    after = json.loads(cli(pg_platform_env, "show", "orders", PARTITION, "--json").stdout)
    assert after["status"] == "resolved"
    assert [(a["episode"], a["error_class"]) for a in after["history"]] == [
        (1, "terminal"),
        (2, "succeeded"),
    ]
    engine = engine_from(pg_platform_env)
    assert len(table_snapshot(engine, "orders")) == 30
    assert table_snapshot(engine, "daily_revenue")  # the downstream day was rebuilt too
