"""The dead letter in Dagster: sensor alerts once per entry, UI metadata, check, requeue."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.asset import (
    DeadLetterCursor,
    dead_letter,
    dead_letter_sensor,
)
from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.dead_letter.requeue import REQUEUE_LAUNCH_GRACE_SECONDS, requeue_sensor
from jobs_platform.gate.reviews import ChangeReviews
from jobs_platform.orchestration._compat import without_current_defs_state_storage
from jobs_platform.orchestration.tags import BACKFILL_TAG, requeue_run_key
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import EntryStatus, alert_ledger, utcnow
from jobs_platform_tests.alert_fixtures import (
    bulk_quarantine_entries,
    http_receiver,
    quarantine_entry,
)
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.runs import materialize, record_requested_run
from orders_example.definitions import defs
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 3, 4)
PARTITION = DAY.isoformat()
PAST_THE_GRACE = dt.timedelta(seconds=REQUEUE_LAUNCH_GRACE_SECONDS + 1)


@pytest.fixture
def instance(platform_env) -> Iterator[dg.DagsterInstance]:
    """An in-memory instance: enough for runs and for sensors without dynamic partitions."""
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


@pytest.fixture
def daemon_instance(platform_env) -> Iterator[dg.DagsterInstance]:
    """A persistent instance, which `dead_letter_sensor` needs to resolve its partitions."""
    with dg.DagsterInstance.get() as instance:
        yield instance


@pytest.fixture
def receiver(platform_env, monkeypatch):
    """A real webhook receiver, set as JOBS_PLATFORM_ALERT_WEBHOOK_URL."""
    with http_receiver() as receiver:
        monkeypatch.setenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", receiver.url)
        yield receiver


@pytest.fixture
def engine(platform_env) -> sa.Engine:
    return engine_from(platform_env)


def tick(
    instance: dg.DagsterInstance, sensor: dg.SensorDefinition, cursor: str | None = None
) -> dg.SensorResult:
    # Closed after the tick: the context may enter an instance of its own from the ref,
    # whose definitions-state storage Dagster makes current until that instance exits.
    # Left open, a later load of the location's `Definitions` in this process fails once
    # that instance is collected ("Attempted to resolve undefined DagsterInstance weakref").
    with dg.build_sensor_context(
        instance=instance,
        # The ref lets the sensor resolve dynamic partitions, as under the daemon.
        instance_ref=None if instance.is_ephemeral else instance.get_ref(),
        cursor=cursor,
        definitions=defs,
        resources=dict(defs.resources),
    ) as context:
        return sensor.evaluate_tick(context)


def requeue(instance: dg.DagsterInstance, asset: str, partition: str, **kwargs):
    config = {"ops": {"requeue_partition": {"config": {"asset": asset, "partition": partition}}}}
    return defs.resolve_job_def("requeue_dead_letter").execute_in_process(
        run_config=config, instance=instance, **kwargs
    )


@contextmanager
def quarantine_statements(engine: sa.Engine) -> Iterator[list[tuple[str, int]]]:
    """(SQL, rows returned) of every statement reading jp_quarantine while inside."""
    seen: list[tuple[str, int]] = []

    def record(_conn, cursor, statement, _params, _context, _many):
        if "FROM jp_quarantine" in statement:
            seen.append((" ".join(statement.split()), cursor.rowcount))

    sa.event.listen(engine, "after_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "after_cursor_execute", record)


def test_new_entry_is_alerted_once_even_when_the_sensor_ticks_again(
    engine, daemon_instance, receiver
):
    entry_id = quarantine_entry(engine)

    first = tick(daemon_instance, dead_letter_sensor)
    same_cursor = tick(daemon_instance, dead_letter_sensor)
    after_first = tick(daemon_instance, dead_letter_sensor, cursor=first.cursor)

    assert receiver.keys() == [str(entry_id)]
    assert first.cursor == str(entry_id)
    [request] = first.run_requests
    assert (request.run_key, request.partition_key) == (str(entry_id), str(entry_id))
    assert request.asset_selection == [dead_letter.key]
    [added] = first.dynamic_partitions_requests
    assert (added.partitions_def_name, list(added.partition_keys)) == (
        "dead_letter_entries",
        [str(entry_id)],
    )
    assert [r.run_key for r in same_cursor.run_requests] == [str(entry_id)]  # the daemon dedups
    assert after_first.run_requests == []
    assert after_first.cursor == first.cursor


def test_an_alert_suggests_a_quoted_requeue_in_the_code_location_of_the_sensor(
    engine, daemon_instance, receiver
):
    from dagster._core.workspace.load_target import ModuleTarget

    # An entry of one of the location's backfills: a sensor alerts its own location's only.
    quarantine_entry(engine, asset="orders", partition="2024-03-03|apac")
    # The tick as the daemon evaluates it for a location started with `dagster dev -m`.
    [origin] = ModuleTarget(
        module_name="acme.defs", attribute=None, working_directory=None, location_name=None
    ).create_origins()
    context = dg.SensorEvaluationContext(
        instance_ref=daemon_instance.get_ref(),
        last_tick_completion_time=None,
        last_run_key=None,
        cursor=None,
        log_key=None,
        repository_name=None,
        repository_def=defs.get_repository_def(),
        resources=dict(defs.resources),
        code_location_origin=origin,
    )

    dead_letter_sensor.evaluate_tick(context)

    [alert] = [request.json() for request in receiver.requests]
    assert alert["location"] == "acme.defs"
    assert alert["requeue_command"] == (
        "jobs-platform dead-letter requeue -m acme.defs orders '2024-03-03|apac'"
    )


def test_poison_day_alerts_once_and_not_again_after_requeue_and_success(
    platform_env, engine, daemon_instance, receiver
):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAY, DAY, orders_per_day=20, poison_days=[DAY])
    assert not materialize([orders], PARTITION, instance=daemon_instance).success
    first = tick(daemon_instance, dead_letter_sensor)
    tick(daemon_instance, dead_letter_sensor)
    [alert] = receiver.requests
    assert (alert.json()["partition"], alert.json()["error_class"]) == (PARTITION, "terminal")

    assert requeue(daemon_instance, "orders", PARTITION).success
    seed_orders(landing, DAY, DAY, orders_per_day=20)
    # The ticks and the requeue leave an instance's definitions-state storage current that
    # may be collected by now; the conftest clears it between tests, this clears it here.
    with without_current_defs_state_storage():
        assert materialize([orders], PARTITION, instance=daemon_instance).success
    later = tick(daemon_instance, dead_letter_sensor, cursor=first.cursor)
    from_scratch = tick(daemon_instance, dead_letter_sensor)

    assert later.run_requests == []
    assert receiver.keys() == [alert.headers["idempotency-key"]]
    assert [r.run_key for r in from_scratch.run_requests] == [alert.headers["idempotency-key"]]
    with engine.connect() as connection:
        assert latest_entry(connection, "orders", PARTITION).status == EntryStatus.RESOLVED


def test_alert_that_failed_is_retried_past_the_cursor_once_its_next_try_is_due(
    engine, daemon_instance, receiver
):
    entry_id = quarantine_entry(engine)
    receiver.fail_next(400)  # a client error is not retried within the tick

    failed = tick(daemon_instance, dead_letter_sensor)
    too_soon = tick(daemon_instance, dead_letter_sensor, cursor=failed.cursor)
    with engine.begin() as connection:  # as if its wait had passed
        connection.execute(sa.update(alert_ledger).values(next_try_at=utcnow()))
    retried = tick(daemon_instance, dead_letter_sensor, cursor=too_soon.cursor)

    assert DeadLetterCursor.parse(failed.cursor) == DeadLetterCursor(entry_id, (entry_id,))
    assert too_soon.cursor == failed.cursor
    assert retried.run_requests == []
    assert retried.cursor == str(entry_id)
    assert receiver.keys() == [str(entry_id)] * 2
    with engine.connect() as connection:
        statuses = connection.execute(sa.select(alert_ledger.c.sink, alert_ledger.c.status))
        assert dict(statuses.all()) == {"log": "sent", "webhook": "sent"}


def test_alert_left_sending_by_a_dead_tick_is_resent_with_the_same_key(
    engine, daemon_instance, receiver
):
    entry_id = quarantine_entry(engine)
    first = tick(daemon_instance, dead_letter_sensor)
    # As if that tick had died after the POST and before the ledger said "sent", and its
    # cursor had never been saved.
    with engine.begin() as connection:
        connection.execute(
            sa.update(alert_ledger).where(alert_ledger.c.sink == "webhook").values(status="sending")
        )

    tick(daemon_instance, dead_letter_sensor)
    tick(daemon_instance, dead_letter_sensor, cursor=first.cursor)

    assert receiver.keys() == [str(entry_id), str(entry_id)]


def test_tick_reads_only_the_new_entries_when_ten_thousand_exist(engine, daemon_instance):
    last_old = bulk_quarantine_entries(engine, 10_000)
    new_ids = [quarantine_entry(engine, partition=f"2024-03-0{n}") for n in (1, 2, 3)]

    with quarantine_statements(engine) as statements:
        result = tick(daemon_instance, dead_letter_sensor, cursor=str(last_old))

    assert [r.run_key for r in result.run_requests] == [str(i) for i in new_ids]
    assert result.cursor == str(new_ids[-1])
    # Every read of the quarantine is bounded by the primary key: a walk after the cursor
    # with a LIMIT, or a lookup of given ids.
    assert statements
    for sql, _rows in statements:
        assert ("jp_quarantine.id >" in sql and "LIMIT" in sql) or "jp_quarantine.id IN" in sql
    if engine.dialect.name == "postgresql":  # SQLite reports no row count for a SELECT
        assert sum(rows for _sql, rows in statements) == len(new_ids)


def test_tick_takes_about_as_long_with_ten_thousand_old_entries_as_with_none(
    engine, daemon_instance
):
    def best_tick_seconds(cursor: str) -> float:
        timings = []
        for _ in range(3):
            began = time.perf_counter()
            assert len(tick(daemon_instance, dead_letter_sensor, cursor=cursor).run_requests) == 10
            timings.append(time.perf_counter() - began)
        return min(timings)

    fresh = [quarantine_entry(engine, partition=f"fresh-{n}") for n in range(10)]
    with_none_before = best_tick_seconds(str(fresh[0] - 1))
    last_old = bulk_quarantine_entries(engine, 10_000)
    for n in range(10):
        quarantine_entry(engine, partition=f"late-{n}")
    with_ten_thousand_before = best_tick_seconds(str(last_old))

    # Generous: a scan of 10,000 entries per new entry would be orders of magnitude slower.
    assert with_ten_thousand_before < 3 * with_none_before + 0.5


def test_dead_letter_partition_shows_the_whole_history_in_the_ui(engine, instance):
    entry_id = quarantine_entry(engine, failures=3, message="HTTP 503 from the source API")
    instance.add_dynamic_partitions("dead_letter_entries", [str(entry_id)])

    result = dg.materialize(
        [dead_letter],
        partition_key=str(entry_id),
        instance=instance,
        resources=dict(defs.resources),
    )

    [event] = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert (metadata["asset"].value, metadata["partition"].value) == ("orders", "2024-01-05")
    assert (metadata["status"].value, metadata["attempts"].value) == ("quarantined", 3)
    assert metadata["error_class"].value == "retryable"
    # A run in this process names no code location: the one the CLI loads without -m.
    assert metadata["requeue"].value == (
        "jobs-platform dead-letter requeue -m orders_example.definitions orders 2024-01-05"
    )
    assert metadata["first_failed_at"].value <= metadata["last_failed_at"].value
    history = metadata["history"]
    assert isinstance(history, dg.TableMetadataValue)
    assert [column.name for column in history.schema.columns] == [
        "episode",
        "attempt",
        "run_id",
        "error_class",
        "error_type",
        "message",
        "at",
        "rule",
    ]
    assert [record.data["attempt"] for record in history.records] == [1, 2, 3]
    assert [record.data["rule"] for record in history.records] == [None, None, None]
    assert history.records[-1].data["message"] == "HTTP 503 from the source API"


def test_dead_letter_partition_shows_the_diff_its_gate_refused(engine, instance):
    entry_id = quarantine_entry(engine, failures=1, message="change refused by ChangeContract")
    diff = {"rows_before": 10, "inserted": 0, "updated": 4, "unchanged": 6, "swept": 0}
    with engine.begin() as connection:
        ChangeReviews(DATABASE_CLOCK).record_refusal(
            connection,
            "orders",
            "2024-01-05",
            attempt_id=None,
            diff_hash="h",
            evidence={"contract": "ChangeContract(max_updated_fraction=0.02)", "diff": diff},
        )
    instance.add_dynamic_partitions("dead_letter_entries", [str(entry_id)])

    result = dg.materialize(
        [dead_letter],
        partition_key=str(entry_id),
        instance=instance,
        resources=dict(defs.resources),
    )

    [event] = result.get_asset_materialization_events()
    change = event.materialization.metadata["change"].value
    assert change["diff"] == diff and change["accepted_by"] is None


def test_dead_letter_partition_of_an_unknown_entry_fails_clearly(engine, instance):
    instance.add_dynamic_partitions("dead_letter_entries", ["999"])

    result = dg.materialize(
        [dead_letter],
        partition_key="999",
        instance=instance,
        resources=dict(defs.resources),
        raise_on_error=False,
    )

    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "there is no quarantine entry 999" in failure.step_failure_data.error.message


def run_quarantine_check(instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    result = dg.materialize(
        [orders, daily_revenue, *defs.asset_checks],
        selection=dg.AssetSelection.checks_for_assets(orders),
        instance=instance,
        resources=dict(defs.resources),
    )
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation


def test_check_fails_listing_quarantined_partitions_and_passes_after_requeue(engine, instance):
    quarantine_entry(engine, partition="2024-01-07")
    quarantine_entry(engine, partition="2024-01-05")
    quarantine_entry(engine, "daily_revenue", partition="2024-01-09")

    failing = run_quarantine_check(instance)
    assert requeue(instance, "orders", "2024-01-05").success
    assert requeue(instance, "orders", "2024-01-07").success
    passing = run_quarantine_check(instance)

    assert (failing.check_name, failing.passed) == ("no_quarantined_partitions", False)
    assert failing.severity == dg.AssetCheckSeverity.ERROR
    assert failing.metadata["quarantined_partitions"].value == "2024-01-05, 2024-01-07"
    assert passing.passed


def test_every_backfill_asset_has_the_quarantine_check():
    checked = {
        (key.asset_key.to_user_string(), key.name)
        for c in defs.asset_checks
        for key in c.check_keys
    }

    backfills = {
        spec.key.to_user_string()
        for assets_def in defs.assets
        for spec in assets_def.specs
        if spec.tags.get(BACKFILL_TAG) == "true"
    }
    assert {asset for asset, _name in checked} == backfills >= {"orders", "daily_revenue"}
    assert {name for _asset, name in checked} == {"no_quarantined_partitions"}


def test_requeue_job_releases_the_entry_and_the_sensor_launches_it_until_its_run_exists(
    engine, instance
):
    entry_id = quarantine_entry(engine, partition=PARTITION)

    assert requeue(instance, "orders", PARTITION).success
    first = tick(instance, requeue_sensor)
    [request] = first.run_requests
    record_requested_run(instance, request)
    second = tick(instance, requeue_sensor)

    assert request.run_key == requeue_run_key(entry_id)
    assert request.partition_key == PARTITION
    # The asset and the backfills it feeds, as `jobs-platform dead-letter requeue` launches.
    assert request.asset_selection == [orders.key, daily_revenue.key]
    assert second.run_requests == []
    with engine.connect() as connection:
        entry = latest_entry(connection, "orders", PARTITION)
    assert entry.status == EntryStatus.REQUEUED
    assert entry.requeue_launched_at is not None


def test_a_requeue_whose_run_never_reached_dagster_is_requested_again_next_tick(engine, instance):
    entry_id = quarantine_entry(engine, partition=PARTITION)
    assert requeue(instance, "orders", PARTITION).success
    tick(instance, requeue_sensor)  # the tick's result is lost

    [again] = tick(instance, requeue_sensor).run_requests

    assert (again.run_key, again.partition_key) == (requeue_run_key(entry_id), PARTITION)


def test_requeue_sensor_relaunches_a_requeue_whose_found_run_is_gone_once_the_grace_passed(
    engine, instance
):
    entry_id = quarantine_entry(engine, partition=PARTITION)
    with engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, "orders", PARTITION)
        # A tick found its run, which was deleted since.
        DeadLetter(ManualClock(utcnow() - PAST_THE_GRACE)).mark_requeue_launched(
            connection, [entry_id]
        )

    [request] = tick(instance, requeue_sensor).run_requests

    assert request.run_key == requeue_run_key(entry_id)


def test_requeue_sensor_looks_again_at_a_found_run_only_after_the_grace(engine, instance):
    entry_id = quarantine_entry(engine, partition=PARTITION)
    with engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, "orders", PARTITION)
        DeadLetter(DATABASE_CLOCK).mark_requeue_launched(connection, [entry_id])  # just found

    assert tick(instance, requeue_sensor).run_requests == []


def test_requeue_sensor_never_relaunches_a_requeue_whose_run_failed(engine, instance):
    entry_id = quarantine_entry(engine, partition=PARTITION)
    assert requeue(instance, "orders", PARTITION).success
    [request] = tick(instance, requeue_sensor).run_requests
    record_requested_run(instance, request, dg.DagsterRunStatus.FAILURE)  # before any step
    with engine.begin() as connection:
        DeadLetter(ManualClock(utcnow() - PAST_THE_GRACE)).mark_requeue_launched(
            connection, [entry_id]
        )

    # A run that failed before its step would fail again: a person requeues it again.
    assert tick(instance, requeue_sensor).run_requests == []


def test_requeue_sensor_leaves_a_requeue_whose_partition_has_started_again(engine, instance):
    quarantine_entry(engine, partition=PARTITION)
    assert requeue(instance, "orders", PARTITION).success
    # A run launched some other way (by hand, a backfill) made the new episode's attempt.
    quarantine_entry(engine, partition=PARTITION, failures=1)

    assert tick(instance, requeue_sensor).run_requests == []


def test_requeue_sensor_leaves_entries_of_assets_this_code_location_lacks(engine, instance):
    quarantine_entry(engine, "retired_backfill", partition=PARTITION)
    with engine.begin() as connection:  # released by another location's `dead-letter requeue`
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, "retired_backfill", PARTITION)

    result = tick(instance, requeue_sensor)

    assert result.run_requests == []
    with engine.connect() as connection:
        assert latest_entry(connection, "retired_backfill", PARTITION).requeue_launched_at is None


def test_requeue_job_releases_nothing_of_an_asset_this_code_location_lacks(engine, instance):
    quarantine_entry(engine, "campaign_spend", partition=PARTITION)

    result = requeue(instance, "campaign_spend", PARTITION, raise_on_error=False)

    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "'campaign_spend' is no backfill of this code location" in (
        failure.step_failure_data.error.message
    )
    with engine.connect() as connection:
        assert latest_entry(connection, "campaign_spend", PARTITION).status == "quarantined"


def test_requeue_job_fails_clearly_for_a_partition_that_is_not_quarantined(engine, instance):
    result = requeue(instance, "orders", PARTITION, raise_on_error=False)

    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert f"orders/{PARTITION} is not quarantined" in failure.step_failure_data.error.message


def test_cursor_reads_a_bare_entry_id_set_by_hand():
    assert DeadLetterCursor.parse("42") == DeadLetterCursor(42)
    assert DeadLetterCursor.parse(None) == DeadLetterCursor(0)
    pending = DeadLetterCursor(42, (40, 41))
    assert json.loads(pending.serialize()) == {"last_entry_id": 42, "undelivered": [40, 41]}
    assert DeadLetterCursor.parse(pending.serialize()) == pending
