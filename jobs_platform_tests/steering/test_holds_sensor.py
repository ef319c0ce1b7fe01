"""The holds sensor, one tick at a time, over a user's own code location
(`jobs_platform_tests.locations.steered`: a daily backfill whose day is ready once its CSV
has landed) on PostgreSQL: held partitions are launched once each, when resumed or ready,
and forgotten once their run exists; one waiting past `max_wait` is reported once."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset, platform_definitions
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    RUN_KEY_TAG,
)
from jobs_platform.steering.holds import HoldReason, Holds, held_partitions
from jobs_platform.steering.pauses import Pauses
from jobs_platform.store.attempts import attempt_history
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import (
    alert_notices,
    backfill_holds,
    create_user_tables,
    quarantine,
)
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.locations.steered import defs, landed_events, landed_events_table

ASSET = "landed_events"


@pytest.fixture
def env(pg_platform_env) -> dict[str, str]:
    create_user_tables(engine_from(pg_platform_env), landed_events_table)
    return pg_platform_env


@pytest.fixture
def instance(env):
    with dg.DagsterInstance.get() as instance:
        yield instance


def land(env: dict[str, str], day: str) -> None:
    path = Path(env["JOBS_PLATFORM_LANDING"]) / "landed_events" / f"{day}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("event_id,amount_cents\n1,100\n2,250\n")


def materialize(
    instance, first: str, last: str | None = None, tags=None
) -> dg.ExecuteInProcessResult:
    where = (
        {"partition_key": first}
        if last is None
        else {"tags": {PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last}}
    )
    extra = where.pop("tags", {}) | dict(tags or {})
    return dg.materialize(
        [landed_events],
        instance=instance,
        resources=dict(defs.resources),
        raise_on_error=False,
        tags=extra,
        **where,
    )


def tick(instance) -> list[dg.RunRequest]:
    context = dg.build_sensor_context(
        instance=instance, definitions=defs, resources=dict(defs.resources)
    )
    return list(defs.get_sensor_def("holds_sensor").evaluate_tick(context).run_requests or [])


def holds(env) -> dict:
    with engine_from(env).connect() as connection:
        return held_partitions(connection, ASSET)


def attempts_of(env, day: str) -> list:
    with engine_from(env).connect() as connection:
        return list(attempt_history(connection, ASSET, day))


def test_a_day_not_landed_is_held_and_launched_once_its_file_lands(env, instance):
    held = materialize(instance, "2024-01-01")

    assert not held.success
    failure = held.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "its input is not ready" in failure.description
    assert holds(env)["2024-01-01"].reason is HoldReason.NOT_READY
    assert attempts_of(env, "2024-01-01") == []
    assert tick(instance) == []
    assert holds(env)["2024-01-01"].checked_at is not None

    land(env, "2024-01-01")
    [request] = tick(instance)
    assert request.partition_key == "2024-01-01"
    assert request.run_key.startswith("hold-landed_events-2024-01-01-")
    # Asked again under the same key until its run exists (the daemon skips a used key).
    assert [again.run_key for again in tick(instance)] == [request.run_key]

    launched = materialize(
        instance, "2024-01-01", tags={**request.tags, RUN_KEY_TAG: request.run_key}
    )
    assert launched.success
    assert tick(instance) == []
    assert holds(env) == {}
    assert [row.outcome for row in attempts_of(env, "2024-01-01")] == ["succeeded"]


def test_a_resumed_backfill_launches_its_held_range_as_one_run(env, instance):
    for day in ("2024-01-02", "2024-01-03", "2024-01-04"):
        land(env, day)
    with engine_from(env).begin() as connection:
        Pauses(DATABASE_CLOCK).pause(connection, ASSET, by="alice", reason="maintenance")

    held = materialize(instance, "2024-01-02", "2024-01-04")

    assert not held.success
    failure = held.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "paused by alice" in failure.description and "(maintenance)" in failure.description
    assert sorted(holds(env)) == ["2024-01-02", "2024-01-03", "2024-01-04"]
    assert tick(instance) == []  # still paused: nothing launched

    with engine_from(env).begin() as connection:
        Pauses(DATABASE_CLOCK).resume(connection, ASSET)
    [request] = tick(instance)

    assert request.tags[PARTITION_RANGE_START_TAG] == "2024-01-02"
    assert request.tags[PARTITION_RANGE_END_TAG] == "2024-01-04"
    for day in ("2024-01-02", "2024-01-03", "2024-01-04"):
        assert attempts_of(env, day) == []


def test_a_day_waiting_past_max_wait_is_reported_once_and_never_quarantined(env, instance):
    materialize(instance, "2024-01-05")
    # An hour and a minute later (max_wait is an hour in the location).
    since = holds(env)["2024-01-05"].since - dt.timedelta(minutes=61)
    with engine_from(env).begin() as connection:
        connection.execute(sa.update(backfill_holds).values(since=since))

    tick(instance)
    reported = holds(env)["2024-01-05"].reported_at
    tick(instance)

    assert reported is not None
    assert holds(env)["2024-01-05"].reported_at == reported
    with engine_from(env).connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar() == 0
        notices = connection.execute(
            sa.select(alert_notices.c.kind, alert_notices.c.asset, alert_notices.c.summary)
        ).all()
    # One alert, delivered to every sink by the dead-letter sensor (`alerts.notices`).
    [(kind, asset, summary)] = notices
    assert (kind, asset) == ("not_ready", ASSET)
    assert "2024-01-05 not ready for longer than its max_wait" in summary


def test_platform_health_says_who_paused_and_what_is_held(env, instance):
    with engine_from(env).begin() as connection:
        Pauses(DATABASE_CLOCK).pause(connection, ASSET, by="alice", reason="maintenance")
    materialize(instance, "2024-01-06")

    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance,
        asset_selection=[dg.AssetKey("platform_health")],
        resources=dict(defs.resources),
        raise_on_error=False,
    )

    [materialization] = result.asset_materializations_for_node("platform_health")
    metadata = {name: value.value for name, value in materialization.metadata.items()}
    assert metadata[f"{ASSET}/paused"].startswith("paused by alice at ")
    assert metadata[f"{ASSET}/paused"].endswith("(maintenance)")
    assert metadata[f"{ASSET}/held_paused"] == 1
    assert metadata[f"{ASSET}/held_not_ready"] == 0


def test_a_ready_check_that_raises_is_taken_as_not_ready_and_the_others_go_on(env, instance):
    def ready(source: PartitionInput) -> bool:
        if source.partition_key == "2024-01-07":
            raise ConnectionError("the bucket's listing timed out")
        return True

    @backfill_asset(
        table=landed_events_table.to_metadata(sa.MetaData(), name="flaky_events"),
        partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
        partition_scope=lambda table, partition: table.c.day == dt.date.fromisoformat(partition),
        ready=ready,
    )
    def flaky_events(source: PartitionInput):
        yield from ()

    flaky_defs = platform_definitions([flaky_events])
    with engine_from(env).begin() as connection:
        for day in ("2024-01-07", "2024-01-08"):
            Holds(DATABASE_CLOCK).hold(
                connection, "flaky_events", day, HoldReason.NOT_READY, run_id="r1"
            )
    context = dg.build_sensor_context(
        instance=instance, definitions=flaky_defs, resources=dict(flaky_defs.resources)
    )

    result = flaky_defs.get_sensor_def("holds_sensor").evaluate_tick(context)

    assert [request.partition_key for request in result.run_requests] == ["2024-01-08"]
    with engine_from(env).connect() as connection:
        still = held_partitions(connection, "flaky_events")
    assert still["2024-01-07"].checked_at is not None and still["2024-01-07"].launch_key is None
