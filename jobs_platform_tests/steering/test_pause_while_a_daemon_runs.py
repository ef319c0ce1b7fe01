"""Pause while a real `dagster-daemon` runs a Dagster backfill, then resume.

A user's own code location (`jobs_platform_tests.locations.steered`, ten days a run) on
PostgreSQL; the backfill of 20 days is launched as the UI does (GraphQL on a webserver),
its runs created and queued by the daemon. `jobs-platform backfill pause` as soon as the
first day is done: the attempts in flight finish their day, every other day is held with
no attempt recorded, and the Dagster backfill ends. `resume`: the holds sensor launches
the held days through the run queue, one run per contiguous range, once each, and every
day ends done with exactly one attempt. Then `dagster asset materialize` of a paused
backfill answers paused too.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.orchestration.tags import HELD_ASSET_TAG, RUN_KEY_TAG
from jobs_platform.steering.holds import held_partitions
from jobs_platform.store.schema import attempts, create_user_tables, partitions
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import DAGSTER, run_cli
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.locations.steered import landed_events_table

MODULE = "jobs_platform_tests.locations.steered"
ASSET = "landed_events"
DAYS = [(dt.date(2024, 3, 1) + dt.timedelta(days=n)).isoformat() for n in range(20)]
TIMEOUT_SECONDS = 120


def land(env: dict[str, str], days: list[str]) -> None:
    folder = Path(env["JOBS_PLATFORM_LANDING"]) / "landed_events"
    folder.mkdir(parents=True, exist_ok=True)
    for day in days:
        (folder / f"{day}.csv").write_text("event_id,amount_cents\n1,100\n2,250\n")


def done_days(engine: sa.Engine) -> list[str]:
    with engine.connect() as connection:
        query = sa.select(partitions.c.partition).where(
            partitions.c.asset == ASSET, partitions.c.status == "done"
        )
        return sorted(connection.execute(query).scalars())


def attempts_per_day(engine: sa.Engine) -> dict[str, list[str]]:
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(attempts.c.partition, attempts.c.outcome)
            .where(attempts.c.asset == ASSET)
            .order_by(attempts.c.id)
        )
        found: dict[str, list[str]] = {}
        for day, outcome in rows:
            found.setdefault(day, []).append(outcome)
        return found


def _holds(engine: sa.Engine) -> dict:
    with engine.connect() as connection:
        return held_partitions(connection, ASSET)


def wait_until(condition, what: str, stack) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} not within {TIMEOUT_SECONDS}s:\n{stack.log_tail('daemon')}"
            )
        time.sleep(0.2)


@pytest.mark.slow
def test_a_pause_holds_the_backfills_other_days_and_resume_launches_each_once(
    pg_platform_env, tmp_path
):
    from benchmarks.daemon import DagsterStack, ui_backfill_params, wait_for_backfill

    env = {**pg_platform_env, "STEERED_READ_SECONDS": "0.5", "JOBS_PLATFORM_MODULE": MODULE}
    engine = engine_from(env)
    create_user_tables(engine, landed_events_table)
    land(env, DAYS)
    stack_env = fast_daemon_loops(
        {name: value for name, value in env.items() if name != "DAGSTER_HOME"},
        sensor_seconds={"holds_sensor": 1},
    )
    with DagsterStack(tmp_path / "stack", stack_env, module=MODULE) as stack:
        backfill_id = stack.launch_backfill(ui_backfill_params(DAYS, None, assets=(ASSET,)))
        wait_until(lambda: done_days(engine), "a first day done", stack)
        paused = jobs_platform_in_process(
            ["backfill", "pause", "-m", MODULE, ASSET, "--reason", "warehouse maintenance"], env
        )
        assert paused.returncode == 0, paused.stderr
        _, records, _ = wait_for_backfill(stack, backfill_id, timeout=TIMEOUT_SECONDS)

        # In flight when paused: finished. Every other day: held, never attempted.
        finished = done_days(engine)
        with engine.connect() as connection:
            held = held_partitions(connection, ASSET)
        assert sorted([*finished, *held]) == DAYS
        assert 0 < len(finished) < len(DAYS)
        assert all(outcomes == ["succeeded"] for outcomes in attempts_per_day(engine).values())
        assert sorted(attempts_per_day(engine)) == finished
        assert len(records) == 2  # ten days a run
        failures = [record.dagster_run for record in records if record.dagster_run.is_failure]
        assert failures  # each run that held a day says so

        resumed = jobs_platform_in_process(["backfill", "resume", "-m", MODULE, ASSET], env)
        assert resumed.returncode == 0, resumed.stderr
        wait_until(lambda: done_days(engine) == DAYS, "every day done after resume", stack)
        wait_until(lambda: not _holds(engine), "the held days forgotten", stack)

        with dg.DagsterInstance.from_config(str(stack.home)) as instance:
            wait_until(
                lambda: all(
                    run.is_finished
                    for run in instance.get_runs(dg.RunsFilter(tags={HELD_ASSET_TAG: ASSET}))
                ),
                "the held days' runs ended",
                stack,
            )
            relaunched = instance.get_runs(dg.RunsFilter(tags={HELD_ASSET_TAG: ASSET}))
        # One run per contiguous range of held days (each run's own days are contiguous).
        assert 2 <= len(relaunched) <= 4
        assert len({run.tags[RUN_KEY_TAG] for run in relaunched}) == len(relaunched)
        assert all(run.is_success for run in relaunched)
    # Once each: every day was attempted exactly once, whichever run did it.
    assert attempts_per_day(engine) == {day: ["succeeded"] for day in DAYS}
    with engine.connect() as connection:
        assert held_partitions(connection, ASSET) == {}

    # `dagster asset materialize` (no daemon) answers paused as well.
    jobs_platform_in_process(["backfill", "pause", "-m", MODULE, ASSET], env)
    materialized = run_cli(
        [DAGSTER, "asset", "materialize", "-m", MODULE, "--select", ASSET, "--partition",
         "2024-04-01"],
        {**env, "STEERED_READ_SECONDS": "0"},
    )  # fmt: skip
    assert materialized.returncode != 0
    assert "paused by" in materialized.stdout + materialized.stderr
    assert "2024-04-01" not in attempts_per_day(engine)
