"""`jobs-platform dead-letter list|show|requeue`: find, read and release a quarantined day."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.orchestration.tags import RUN_KEY_TAG, requeue_run_key
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.commands import ACME, JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import engine_from, platform_environment
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materialize, record_requested_run
from jobs_platform_tests.store.factories import a_partition, a_quarantine_entry
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 8, 1)
PARTITION = DAY.isoformat()
# A day of the user's code location ACME (`jobs_platform_tests.locations.acme`).
ACME_DAY = "2024-01-03"
LIST_FIELDS = {
    "asset", "partition", "status", "attempts", "error_class", "last_error",
    "first_failed_at", "last_failed_at", "signature",
}  # fmt: skip
HISTORY_FIELDS = {"attempt", "run_id", "error_class", "error_type", "message", "at"}


def attempts_in(history: list[dict]) -> list[dict]:
    return [record for record in history if record["kind"] == "attempt"]


def cli(env, *args: str):
    finished = run_cli([JOBS_PLATFORM, "dead-letter", *args], env)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    return finished


def dead_letter(*args: str) -> tuple[int, str, str]:
    """`jobs-platform dead-letter ARGS…` through the CLI's main, in this process, whose
    environment is the test's: (exit status, stdout, stderr).

    The tests read `list` and `show` this way and run `requeue` as a command: a process per
    read would cost an interpreter's start and the CLI's imports to run the same code on
    the same warehouse. (A location named with `-m` is loaded, so a test of a location kept
    out of this process, ACME, runs those as commands.)"""
    import contextlib
    import io

    from jobs_platform.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["dead-letter", *args])
    return code, out.getvalue(), err.getvalue()


def read_json(*args: str):
    """The JSON that `jobs-platform dead-letter ARGS… --json` prints, run in this process."""
    code, out, err = dead_letter(*args, "--json")
    assert code == 0, out[-3000:] + err[-3000:]
    return json.loads(out)


def test_requeue_after_fixing_the_input_resolves_the_entry_and_keeps_its_history(
    pg_platform_env,
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=30, poison_days=[DAY])
    assert not materialize([orders, daily_revenue], PARTITION).success

    (listed,) = read_json("list")
    assert set(listed) == LIST_FIELDS
    assert (listed["asset"], listed["partition"], listed["status"]) == (
        "orders", PARTITION, "quarantined",
    )  # fmt: skip
    assert (listed["attempts"], listed["error_class"]) == (1, "terminal")
    shown = read_json("show", "orders", PARTITION)
    assert [set(attempt) >= HISTORY_FIELDS for attempt in shown["history"]] == [True]

    seed_orders(landing, DAY, DAY, orders_per_day=30)  # the input is fixed
    # No daemon here: the command runs the requeue's run itself and returns once it ended.
    requeued = cli(pg_platform_env, "requeue", "orders", PARTITION, "--wait")

    assert "no dagster-daemon serves the Dagster instance: running the runs here" in (
        requeued.stdout
    )
    assert "1 run succeeded" in requeued.stdout
    run = requeue_run(requeue_run_key(listed_id()))
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert read_json("list") == []
    after = read_json("show", "orders", PARTITION)
    assert (after["status"], after["entry"]["status"]) == ("done", "resolved")
    assert [(a["episode"], a["error_class"]) for a in attempts_in(after["history"])] == [
        (1, "terminal"),
        (2, "succeeded"),
    ]
    # The release sits between the episode it ended and the one it started.
    assert [record["kind"] for record in after["history"]] == ["attempt", "requeue", "attempt"]
    requeue = after["history"][1]
    assert (requeue["by"], requeue["reason"]) == ("cli", "requested")
    assert after["history"][0]["at"] <= requeue["at"] <= after["history"][2]["at"]
    engine = engine_from(pg_platform_env)
    assert len(table_snapshot(engine, "orders")) == 30
    assert table_snapshot(engine, "daily_revenue")  # the downstream day was rebuilt too


def requeue_run(run_key: str) -> dg.DagsterRun:
    """The one run of `run_key` in the test's instance."""
    with dg.DagsterInstance.get() as instance:
        [run] = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: run_key}))
    return run


def listed_id() -> int:
    return read_json("show", "orders", PARTITION)["entry"]["id"]


def quarantined_day(env) -> None:
    """A day quarantined for bad input, whose input is fixed since."""
    landing = env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=30, poison_days=[DAY])
    assert not materialize([orders, daily_revenue], PARTITION).success
    seed_orders(landing, DAY, DAY, orders_per_day=30)


def requeued_with_its_run(engine, status: dg.DagsterRunStatus | None) -> sa.Row:
    """The day released as a requeue releases it; the sensor's run of it, in `status`
    (None: never launched, or gone), created without running anything."""
    with engine.begin() as connection:
        entry = DeadLetter(DATABASE_CLOCK).requeue_partition(connection, "orders", PARTITION)
        if status is not None:  # the sensor found its run
            DeadLetter(DATABASE_CLOCK).mark_requeue_launched(connection, [entry.id])
    if status is not None:
        with dg.DagsterInstance.get() as instance:
            request = dg.RunRequest(run_key=requeue_run_key(entry.id), partition_key=PARTITION)
            record_requested_run(instance, request, status)
    return entry


def requeue_records(history: list[dict]) -> list[tuple[str, str]]:
    return [(r["by"], r["reason"]) for r in history if r["kind"] == "requeue"]


def test_a_second_requeue_runs_an_entry_whose_run_was_never_launched(pg_platform_env):
    quarantined_day(pg_platform_env)
    entry = requeued_with_its_run(engine_from(pg_platform_env), None)

    relaunched = cli(pg_platform_env, "requeue", "orders", PARTITION, "--wait")

    assert "was requeued, but no run of it was launched yet" in relaunched.stdout
    after = read_json("show", "orders", PARTITION)
    assert (after["status"], after["entry"]["status"]) == ("done", "resolved")
    # Launched, not released again: one release in the history.
    assert requeue_records(after["history"]) == [("cli", "requested")]
    assert requeue_run(requeue_run_key(entry.id)).status == dg.DagsterRunStatus.SUCCESS


def test_an_entry_whose_run_failed_before_any_attempt_is_released_again_under_a_new_key(
    pg_platform_env,
):
    quarantined_day(pg_platform_env)
    entry = requeued_with_its_run(engine_from(pg_platform_env), dg.DagsterRunStatus.FAILURE)
    failed = requeue_run(requeue_run_key(entry.id))

    again = cli(pg_platform_env, "requeue", "orders", PARTITION, "--wait")

    assert f"released orders/{PARTITION} (entry {entry.id}) again: its run {failed.run_id} " in (
        again.stdout
    )
    assert requeue_run(requeue_run_key(entry.id, 2)).status == dg.DagsterRunStatus.SUCCESS
    after = read_json("show", "orders", PARTITION)
    assert (after["status"], after["entry"]["status"]) == ("done", "resolved")
    assert requeue_records(after["history"]) == [
        ("cli", "requested"),
        ("cli", f"requested again: run {failed.run_id[:8]} failed"),
    ]
    # The failed run did nothing: the partition's second episode has one attempt, its own.
    assert [(a["episode"], a["error_class"]) for a in attempts_in(after["history"])] == [
        (1, "terminal"),
        (2, "succeeded"),
    ]


def test_requeue_wait_with_the_input_still_poison_fails_naming_the_run(pg_platform_env):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=30, poison_days=[DAY])
    assert not materialize([orders, daily_revenue], PARTITION).success
    entry_id = listed_id()

    finished = run_cli(
        [JOBS_PLATFORM, "dead-letter", "requeue", "orders", PARTITION, "--wait"], pg_platform_env
    )

    assert finished.returncode == 3, finished.stdout[-3000:] + finished.stderr[-3000:]
    run = requeue_run(requeue_run_key(entry_id))
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert f"error: run {run.run_id} (requeue-{entry_id}) failed" in finished.stderr
    assert f"jobs-platform dead-letter show -m orders_example.definitions orders {PARTITION}" in (
        finished.stderr
    )
    # Quarantined again, in the episode the requeue opened; the run under its key is found,
    # so the requeue sensor launches nothing more.
    (listed,) = read_json("list")
    assert (listed["partition"], listed["status"], listed["attempts"]) == (
        PARTITION, "quarantined", 1,
    )  # fmt: skip
    from orders_example.definitions import defs

    with dg.DagsterInstance.get() as instance:
        context = dg.build_sensor_context(
            instance=instance, definitions=defs, resources=dict(defs.resources)
        )
        assert requeue_sensor.evaluate_tick(context).run_requests == []


def test_a_second_requeue_is_refused_while_the_first_ones_run_exists(pg_platform_env):
    quarantined_day(pg_platform_env)
    entry = requeued_with_its_run(engine_from(pg_platform_env), dg.DagsterRunStatus.STARTED)
    run = requeue_run(requeue_run_key(entry.id))

    finished = run_cli(
        [JOBS_PLATFORM, "dead-letter", "requeue", "orders", PARTITION], pg_platform_env
    )

    assert finished.returncode == 2
    assert f"is already requeued: its run {run.run_id} is started" in finished.stderr


def test_requeue_in_a_location_without_the_asset_releases_nothing(upgraded_pg_url, tmp_path):
    env = platform_environment(upgraded_pg_url, tmp_path)
    with warehouse_engine(upgraded_pg_url).begin() as connection:
        a_quarantine_entry(connection, asset="acme_events", partition=ACME_DAY)

    refused = run_cli([JOBS_PLATFORM, "dead-letter", "requeue", "acme_events", ACME_DAY], env)

    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert "code location orders_example.definitions has no backfill 'acme_events'" in line
    (entry,) = json.loads(cli(env, "list", "--json").stdout)
    assert (entry["asset"], entry["status"]) == ("acme_events", "quarantined")


def show(*args: str) -> tuple[int, str, str]:
    """`jobs-platform dead-letter show ARGS…` through the CLI's main, in this process."""
    return dead_letter("show", *args)


def test_show_gives_the_attempts_of_a_partition_retried_then_done(pg_platform_env, monkeypatch):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=5)
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient*1")
    assert materialize([orders], PARTITION).success

    code, out, _ = show("orders", PARTITION, "--json")

    assert code == 0
    shown = json.loads(out)
    assert (shown["asset"], shown["partition"]) == ("orders", PARTITION)
    assert (shown["status"], shown["quarantined"], shown["entry"]) == ("done", False, None)
    assert [set(attempt) >= HISTORY_FIELDS for attempt in shown["history"]] == [True, True]
    assert [(a["attempt"], a["error_class"]) for a in shown["history"]] == [
        (1, "retryable"),
        (2, "succeeded"),
    ]
    code, out, _ = show("orders", PARTITION)
    assert code == 0
    assert out.splitlines()[0] == f"orders/{PARTITION}: done, not quarantined (2 attempts)"
    assert "retryable" in out and "succeeded" in out


def test_show_of_a_partition_with_no_attempt_is_a_clear_error(pg_platform_env):
    code, out, err = show("orders", PARTITION)

    assert (code, out) == (2, "")
    assert err == (
        f"error: orders/{PARTITION} has no attempt and no quarantine entry: it has never run "
        "(check the asset's name and the partition key)\n"
    )


def test_show_of_an_entry_says_it_is_quarantined(pg_platform_env):
    with engine_from(pg_platform_env).begin() as connection:
        a_partition(connection, asset="orders", partition=PARTITION, status="quarantined")
        entry_id = a_quarantine_entry(connection, asset="orders", partition=PARTITION)

    shown = read_json("show", "orders", PARTITION)

    assert (shown["status"], shown["quarantined"]) == ("quarantined", True)
    assert set(shown["entry"]) == LIST_FIELDS | {"id", "episode"}
    assert (shown["entry"]["id"], shown["entry"]["status"]) == (entry_id, "quarantined")


def test_show_of_a_partition_done_since_its_requeue_gives_its_status_and_its_entrys_apart(
    pg_platform_env,
):
    with engine_from(pg_platform_env).begin() as connection:
        a_partition(connection, asset="orders", partition=PARTITION, status="done", episode=2)
        entry_id = a_quarantine_entry(
            connection, asset="orders", partition=PARTITION, status="resolved"
        )

    shown = read_json("show", "orders", PARTITION)
    code, out, _ = show("orders", PARTITION)

    assert code == 0
    assert (shown["status"], shown["quarantined"]) == ("done", False)
    assert (shown["entry"]["id"], shown["entry"]["status"]) == (entry_id, "resolved")
    assert out.splitlines()[0] == (
        f"orders/{PARTITION}: done; entry {entry_id} resolved (episode 1, 3 attempt(s))"
    )


MULTI_KEY = "2024-03-03|apac"


def test_show_suggests_a_quoted_requeue_naming_the_code_location(pg_platform_env):
    import shlex

    with engine_from(pg_platform_env).begin() as connection:
        a_quarantine_entry(connection, asset="events", partition=MULTI_KEY)

    code, out, _ = show("-m", ACME, "events", MULTI_KEY)

    assert code == 0
    suggested = out.strip().splitlines()[-1].removeprefix("requeue with: ")
    assert suggested == f"jobs-platform dead-letter requeue -m {ACME} events '{MULTI_KEY}'"
    assert shlex.split(suggested)[-2:] == ["events", MULTI_KEY]
