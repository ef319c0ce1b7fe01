"""Released entries become one run per contiguous range of an asset's partitions.

The rule (`dead_letter.requeue_plan`) the requeue sensor and `dead-letter requeue` with
a selection share: hundreds of released entries (a redrive's) are a handful of runs, each
at most the backfill policy's partitions, never a run per entry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.dead_letter.entries import DeadLetter, entries_by_id
from jobs_platform.dead_letter.releases import RequeuedBy, requeue_log
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.dead_letter.requeue_plan import partitions_per_run, requeue_runs
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    REQUEUE_ENTRIES_TAG,
    RUN_KEY_TAG,
    entry_ids_of,
    tagged_entry_ids,
    tagged_releases,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import EntryStatus, quarantine
from jobs_platform_tests.alert_fixtures import quarantine_entry
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.environments import engine_from
from orders_example.definitions import defs
from orders_example.orders.assets import (
    daily_partitions,
    daily_revenue,
    orders,
    revenue_of_day,
)

GRAPH = defs.get_repository_def().asset_graph


def days(first: str, count: int) -> list[str]:
    start = dt.date.fromisoformat(first)
    return [(start + dt.timedelta(days=n)).isoformat() for n in range(count)]


# 35 consecutive days (more than the default policy's 30 per run), then two after a gap.
RELEASED_DAYS = days("2024-03-01", 35) + days("2024-05-01", 2)


@pytest.fixture
def engine(platform_env) -> sa.Engine:
    return engine_from(platform_env)


@pytest.fixture
def instance(platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def tick(instance: dg.DagsterInstance):
    context = dg.build_sensor_context(
        instance=instance, definitions=defs, resources=dict(defs.resources)
    )
    return requeue_sensor.evaluate_tick(context)


def released_by_redrive(engine: sa.Engine, partitions: list[str]) -> list[int]:
    """Quarantine each day of `orders`, then release them all as the redrive does."""
    ids = [quarantine_entry(engine, partition=day, failures=1) for day in partitions]
    with engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).release_entries(
            connection, entries_by_id(connection, ids), by=RequeuedBy.REDRIVE, reason="cooldown"
        )
    return ids


def record_run(
    instance: dg.DagsterInstance,
    request: dg.RunRequest,
    status: dg.DagsterRunStatus = dg.DagsterRunStatus.STARTED,
) -> dg.DagsterRun:
    """What the sensor daemon does with a ranged run request: create its run over its
    asset selection (no work runs)."""
    selection = set(request.asset_selection or ())
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=selection)
    tags = {**request.tags, RUN_KEY_TAG: request.run_key}
    if request.partition_key:
        tags[PARTITION_TAG] = request.partition_key
    return instance.create_run_for_job(job, tags=tags, status=status, asset_selection=selection)


def span(request: dg.RunRequest) -> tuple[str, str]:
    if request.partition_key is not None:
        return request.partition_key, request.partition_key
    return request.tags[PARTITION_RANGE_START_TAG], request.tags[PARTITION_RANGE_END_TAG]


def test_requeue_sensor_launches_released_days_as_one_run_per_contiguous_range(engine, instance):
    ids = released_by_redrive(engine, RELEASED_DAYS)

    requests = tick(instance).run_requests

    assert [span(request) for request in requests] == [
        ("2024-03-01", "2024-03-30"),  # the policy's 30 partitions per run
        ("2024-03-31", "2024-04-04"),
        ("2024-05-01", "2024-05-02"),  # a gap starts another run
    ]
    assert all(r.asset_selection == [orders.key, daily_revenue.key] for r in requests)
    named = [entry_ids_of(request.tags[REQUEUE_ENTRIES_TAG]) for request in requests]
    assert sorted(entry_id for run in named for entry_id in run) == sorted(ids)
    assert len({request.run_key for request in requests}) == 3
    assert all(request.run_key.startswith("requeue-") for request in requests)


def test_requeue_sensor_leaves_ranged_runs_alone_once_they_exist(engine, instance):
    ids = released_by_redrive(engine, RELEASED_DAYS)
    for request in tick(instance).run_requests:
        record_run(instance, request)

    assert tick(instance).run_requests == []
    with engine.connect() as connection:
        marked = connection.execute(
            sa.select(sa.func.count()).where(
                quarantine.c.id.in_(ids), quarantine.c.requeue_launched_at.is_not(None)
            )
        ).scalar_one()
    assert marked == len(ids)


def test_a_ranged_run_that_was_created_but_never_submitted_is_requested_again(engine, instance):
    released_by_redrive(engine, days("2024-03-01", 3))
    [request] = tick(instance).run_requests
    record_run(instance, request, dg.DagsterRunStatus.NOT_STARTED)

    [again] = tick(instance).run_requests

    assert (again.run_key, span(again)) == (request.run_key, ("2024-03-01", "2024-03-03"))


capped_metadata = sa.MetaData()
capped_table = sa.Table(
    "capped_order_totals",
    capped_metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("total_cents", sa.BigInteger, nullable=False),
)


@backfill_asset(
    table=capped_table,
    partitions_def=daily_partitions,
    partition_scope=revenue_of_day,
    deps=[orders],
    backfill_policy=dg.BackfillPolicy.multi_run(3),
)
def capped_order_totals(source: PartitionInput):
    """Fed by `orders` day for day, at most 3 days per run (a test-only asset)."""
    yield from ()


def test_ranges_follow_the_smallest_policy_of_the_asset_and_the_backfills_it_feeds(engine):
    ids = [quarantine_entry(engine, partition=day, failures=1) for day in days("2024-03-01", 4)]
    with engine.connect() as connection:
        entries = entries_by_id(connection, ids)
    capped = dg.Definitions(assets=[orders, capped_order_totals], resources=dict(defs.resources))
    graph = capped.get_repository_def().asset_graph

    runs = requeue_runs(graph, entries)

    assert partitions_per_run(GRAPH, [orders.key]) == 30
    assert [key.to_user_string() for key in runs[0].selection] == [
        "orders",
        "capped_order_totals",
    ]
    assert [(run.first, run.last) for run in runs] == [
        ("2024-03-01", "2024-03-03"),
        ("2024-03-04", "2024-03-04"),
    ]


def test_entry_ids_tag_names_every_id_and_reads_back():
    ids = [3, 4, 5, 9, 11, 12]

    assert tagged_entry_ids(ids) == "3-5,9,11-12"
    assert entry_ids_of(tagged_entry_ids(ids)) == ids
    assert entry_ids_of("not-ids") == []


def test_entry_ids_tag_names_each_later_release_and_reads_back():
    ids, releases = [3, 4, 5, 9], {4: 2, 9: 3}

    tag = tagged_entry_ids(ids, releases)

    assert tag == "3,5,4#2,9#3"
    assert tagged_releases(tag) == {3: 1, 5: 1, 4: 2, 9: 3}
    assert entry_ids_of(tag) == ids
    assert tagged_releases("4#2-5") == {}  # a release names one entry


def test_the_sensor_never_relaunches_a_failed_ranged_run_but_a_persons_requeue_does(
    engine, instance
):
    ids = released_by_redrive(engine, days("2024-03-01", 3))
    [first] = tick(instance).run_requests
    failed = record_run(instance, first, dg.DagsterRunStatus.FAILURE)  # before any step
    with engine.begin() as connection:  # long past the grace the sensor gives a found run
        long_ago = DATABASE_CLOCK.now(connection) - dt.timedelta(hours=1)
        DeadLetter(ManualClock(long_ago)).mark_requeue_launched(connection, ids)
    assert tick(instance).run_requests == []

    requeued = defs.resolve_job_def("requeue_dead_letter").execute_in_process(
        run_config=requeue_job_config(asset="orders"), instance=instance
    )
    [again] = tick(instance).run_requests

    assert requeued.success
    assert span(again) == span(first) == ("2024-03-01", "2024-03-03")
    assert again.run_key != first.run_key
    assert tagged_releases(again.tags[REQUEUE_ENTRIES_TAG]) == dict.fromkeys(ids, 2)
    with engine.connect() as connection:
        log = requeue_log(connection, "orders", "2024-03-02")
    assert [(row.by, row.reason) for row in log] == [
        ("redrive", "cooldown"),
        ("ui", f"requested again: run {failed.run_id[:8]} failed"),
    ]


def requeue_job_config(**config: str) -> dict:
    return {"ops": {"requeue_partition": {"config": config}}}


def test_requeue_job_releases_a_group_as_the_ui_and_the_sensor_ranges_it(engine, instance):
    malformed = [
        quarantine_entry(engine, partition=day, failures=1, message="line 3: not JSON")
        for day in days("2024-03-01", 3)
    ]
    other = quarantine_entry(engine, partition="2024-03-10", failures=1, message="HTTP 503")
    with engine.connect() as connection:
        [signature] = {entry.signature for entry in entries_by_id(connection, malformed)}
    job = defs.resolve_job_def("requeue_dead_letter")

    result = job.execute_in_process(
        run_config=requeue_job_config(group=signature), instance=instance
    )

    assert result.success
    with engine.connect() as connection:
        statuses = {e.id: e.status for e in entries_by_id(connection, [*malformed, other])}
        log = requeue_log(connection, "orders", "2024-03-02")
    assert statuses == {**dict.fromkeys(malformed, EntryStatus.REQUEUED), other: "quarantined"}
    assert [(row.by, row.reason) for row in log] == [("ui", "requested")]
    [request] = tick(instance).run_requests
    assert span(request) == ("2024-03-01", "2024-03-03")


@pytest.mark.parametrize(
    "config",
    [
        {"group": "abc123abc123", "asset": "orders"},
        {"partition": "2024-03-01"},
        {"asset": "orders", "partition": "2024-03-01", "error_class": "terminal"},
        {},
    ],
)
def test_requeue_job_refuses_a_config_that_is_not_exactly_one_form(engine, instance, config):
    entry = quarantine_entry(engine, partition="2024-03-01", failures=1)

    result = defs.resolve_job_def("requeue_dead_letter").execute_in_process(
        run_config=requeue_job_config(**config), instance=instance, raise_on_error=False
    )

    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "nothing was released" in failure.step_failure_data.error.message
    with engine.connect() as connection:
        assert entries_by_id(connection, [entry])[0].status == "quarantined"
