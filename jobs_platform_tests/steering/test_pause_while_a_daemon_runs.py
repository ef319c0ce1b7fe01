"""Pause while a real `dagster-daemon` runs a Dagster backfill, then resume.

A user's own code location (`jobs_platform_tests.locations.steered`, ten days a run) on
PostgreSQL; the backfill of 20 days is launched as the UI does (GraphQL on a webserver),
its runs created and queued by the daemon. `jobs-platform backfill pause` as soon as the
first day is done: the attempts in flight finish their day, every other day is held with
no attempt recorded, and the Dagster backfill ends. `resume`: the holds sensor launches
the held days through the run queue, one run per contiguous range, once each, and every
day ends done with exactly one attempt. Then readiness: of two days launched before their
files landed, the one that lands is launched by the sensor and done, the other is
reported once past `max_wait` and never quarantined. Apart, without a daemon: `dagster
asset materialize` of a paused backfill answers paused too.
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
from jobs_platform.store.schema import (
    alert_notices,
    attempts,
    create_user_tables,
    partitions,
    quarantine,
)
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import DAGSTER, run_cli
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.locations.steered import landed_events_table

MODULE = "jobs_platform_tests.locations.steered"
ASSET = "landed_events"
DAYS = [(dt.date(2024, 3, 1) + dt.timedelta(days=n)).isoformat() for n in range(20)]
LATE_DAYS = ["2024-05-01", "2024-05-02"]
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

    env = {
        **pg_platform_env,
        "STEERED_READ_SECONDS": "0.5",
        "STEERED_MAX_WAIT_SECONDS": "5",
        "JOBS_PLATFORM_MODULE": MODULE,
    }
    began = time.monotonic()
    engine = engine_from(env)
    create_user_tables(engine, landed_events_table)
    land(env, DAYS)
    stack_env = fast_daemon_loops(
        {name: value for name, value in env.items() if name != "DAGSTER_HOME"},
        sensor_seconds={"holds_sensor": 1},
    )
    with DagsterStack(tmp_path / "stack", stack_env, module=MODULE) as stack:
        print(f"stack up: {time.monotonic() - began:.0f}s")
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
        print(f"paused and resumed: {time.monotonic() - began:.0f}s")

        # Readiness: two days whose files land later. Held, not attempted; launched by
        # the sensor once the files are there; the one still missing past max_wait (5 s
        # here) is reported once, never quarantined.
        late = stack.launch_backfill(ui_backfill_params(LATE_DAYS, None, assets=(ASSET,)))
        wait_for_backfill(stack, late, timeout=TIMEOUT_SECONDS)
        assert sorted(_holds(engine)) == LATE_DAYS
        assert not set(LATE_DAYS) & set(attempts_per_day(engine))
        land(env, LATE_DAYS[:1])
        wait_until(lambda: LATE_DAYS[0] in done_days(engine), "the landed day done", stack)
        wait_until(
            lambda: (
                _holds(engine).get(LATE_DAYS[1]) is not None
                and _holds(engine)[LATE_DAYS[1]].reported
            ),
            "the missing day reported",
            stack,
        )
        print(f"readiness: {time.monotonic() - began:.0f}s")
    assert attempts_per_day(engine)[LATE_DAYS[0]] == ["succeeded"]
    assert LATE_DAYS[1] not in attempts_per_day(engine)
    with engine.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar() == 0
        [notice] = connection.execute(sa.select(alert_notices)).all()
    assert (notice.kind, notice.asset, notice.key.split("@")[0]) == (
        "not_ready",
        ASSET,
        LATE_DAYS[1],
    )


def test_dagster_asset_materialize_of_a_paused_backfill_answers_paused(pg_platform_env):
    env = {**pg_platform_env, "JOBS_PLATFORM_MODULE": MODULE}
    engine = engine_from(env)
    create_user_tables(engine, landed_events_table)
    land(env, ["2024-04-01"])
    jobs_platform_in_process(
        ["backfill", "pause", "-m", MODULE, ASSET, "--reason", "failover"], env
    )

    materialized = run_cli(
        [DAGSTER, "asset", "materialize", "-m", MODULE, "--select", ASSET, "--partition",
         "2024-04-01"],
        env,
    )  # fmt: skip

    assert materialized.returncode != 0
    assert "paused by" in materialized.stdout + materialized.stderr
    assert "(failover)" in materialized.stdout + materialized.stderr
    assert attempts_per_day(engine) == {}
    with engine.connect() as connection:
        assert list(held_partitions(connection, ASSET)) == ["2024-04-01"]
