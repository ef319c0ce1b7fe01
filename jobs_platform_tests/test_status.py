"""`jobs-platform status` reports a known scenario exactly."""

from __future__ import annotations

import datetime as dt
import json

from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import ACME, JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import platform_environment
from jobs_platform_tests.runs import materialize
from orders_example.orders.assets import daily_partitions, daily_revenue, orders
from orders_example.orders.seed import seed_orders

FIRST = dt.date(2024, 6, 1)
POISON = dt.date(2024, 6, 3)


def test_status_json_counts_done_quarantined_and_missing_partitions(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], FIRST, POISON, poison_days=[POISON])
    for day in (FIRST, FIRST + dt.timedelta(days=1), POISON):
        materialize([orders, daily_revenue], day.isoformat())

    finished = run_cli([JOBS_PLATFORM, "status", "--json"], platform_env)

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


def test_platform_health_schedule_refreshes_figures_and_quarantine_checks(platform_env):
    import dagster as dg

    from orders_example.definitions import defs

    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], POISON, POISON, poison_days=[POISON])
    materialize([orders], POISON.isoformat())
    schedule = defs.resolve_schedule_def("platform_health_every_10_minutes")

    result = defs.resolve_job_def(schedule.job_name).execute_in_process(
        instance=dg.DagsterInstance.get(), raise_on_error=False
    )

    checks = {
        (evaluation.asset_key.to_user_string(), evaluation.check_name): evaluation.passed
        for evaluation in (
            event.event_specific_data
            for event in result.all_events
            if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
        )
    }
    assert checks[("orders", "no_quarantined_partitions")] is False
    assert checks[("daily_revenue", "no_quarantined_partitions")] is True
    assert checks[("platform_health", "nothing_quarantined")] is False
    health = result.get_asset_materialization_events()[0].materialization.metadata
    assert health["orders/quarantined"].value == 1
    # Progress beside the figures: nothing done, so no ETA (no history) but what is failing.
    assert health["orders/progress_failing"].value == 1
    assert health["orders/progress_done"].value == 0
    assert "orders/progress_eta_seconds" not in health


def test_status_with_a_module_reports_that_locations_backfills(upgraded_pg_url, tmp_path):
    env = platform_environment(upgraded_pg_url, tmp_path)

    finished = run_cli([JOBS_PLATFORM, "status", "-m", ACME, "--json"], env)

    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert list(report["assets"]) == ["acme_events"]
    assert report["assets"]["acme_events"]["done"] == 0


def status(*args: str) -> tuple[int, str, str]:
    """`jobs-platform status ARGS…` through the CLI's main, in this process."""
    done = jobs_platform_in_process(["status", *args])
    return done.returncode, done.stdout, done.stderr


def test_status_over_a_window_counts_only_the_days_asked_about(pg_platform_env):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], FIRST, POISON, poison_days=[POISON])
    for day in (FIRST, FIRST + dt.timedelta(days=1), POISON):
        materialize([orders, daily_revenue], day.isoformat())
    first, last = (FIRST - dt.timedelta(days=1)).isoformat(), (POISON + dt.timedelta(days=1))
    before = FIRST - dt.timedelta(days=5)
    materialize([orders], before.isoformat())  # outside the window: not counted

    code, out, err = status("--from", first, "--to", last.isoformat(), "--json")

    assert code == 0, err
    report = json.loads(out)
    counts = ("done", "failed", "quarantined", "missing", "in_flight")
    # Five days: the day before, three run (one poisoned), the day after.
    assert [report["assets"]["orders"][name] for name in counts] == [2, 0, 1, 2, 0]
    assert [report["assets"]["daily_revenue"][name] for name in counts] == [2, 0, 0, 3, 0]
    assert report["window"] == {
        "from": first,
        "to": last.isoformat(),
        "start": f"{first}T00:00:00+00:00",
        "end": f"{(last + dt.timedelta(days=1)).isoformat()}T00:00:00+00:00",
    }
    assert report["not_windowed"] == ["customer_order_history"]
    code, out, _ = status("--from", first, "--to", last.isoformat())
    assert code == 0
    assert out.startswith(f"window: partitions starting from {first}T00:00:00+00:00 until")
    assert "not time-partitioned, left out: customer_order_history" in out


def test_status_with_a_bad_window_key_says_what_keys_look_like(pg_platform_env):
    code, out, err = status("--from", "2024-06-31")

    assert (code, out) == (2, "")
    assert err == (
        "error: --from '2024-06-31' is not a partition key (or not one yet) of a "
        "time-partitioned backfill of this code location; their first keys: "
        "2024-01-01 (daily_revenue, orders)\n"
    )


def test_status_without_a_named_location_says_so_instead_of_reading_another(pg_platform_env):
    # A user's shell: the warehouse set, no -m and no $JOBS_PLATFORM_MODULE. The command
    # once fell back to the orders example and reported its assets against this warehouse.
    env = {name: value for name, value in pg_platform_env.items() if name != "JOBS_PLATFORM_MODULE"}

    finished = run_cli(["env", "-u", "JOBS_PLATFORM_MODULE", JOBS_PLATFORM, "status"], env)

    assert finished.returncode == 2, finished.stdout
    assert finished.stdout == ""
    assert finished.stderr.strip() == (
        "error: no code location named: pass -m MODULE (a module with `defs`, as for "
        "`dagster … -m`) or set JOBS_PLATFORM_MODULE"
    )
