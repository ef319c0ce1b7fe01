"""Two code locations on one warehouse: each acts on its own backfills' rows only.

Two teams' packages, written to a temporary folder as each team writes its own, built with
`platform_definitions(..., location=...)`, on one PostgreSQL warehouse and one Dagster
instance: each location's sensors and jobs claim, alert, requeue and rescue only what is
theirs; a request for an asset no location serves stays pending; the two locations'
definitions hold no duplicate asset key or name; and under one daemon with a workspace
of both, each location launches its own request.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from deploy import stack
from jobs_platform import request_backfill
from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.outbox_backlog import OutboxBacklog
from jobs_platform.store.schema import attempts, create_user_tables, outbox
from jobs_platform_tests.alert_fixtures import HttpReceiver, http_receiver, quarantine_entry
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.environments import platform_environment
from jobs_platform_tests.runs import record_requested_run
from jobs_platform_tests.store.factories import a_lease, an_attempt
from jobs_platform_tests.waiting import wait_for

# (location name, package, backfill asset, its table)
SALES = ("sales", "sales_team", "sales_orders", "sales_orders")
ADS = ("ads", "ads_team", "campaign_spend", "campaign_spend")
UNSERVED = "churn_scores"  # no location of the workspace serves it
PARTITION = "north"
# Daemon, two code servers, one run per location: seconds each on a quiet machine.
DAEMON_SECONDS = 150
# Dagster's default run queue, dequeued every second as the repository's dagster.yaml does
# (Dagster's default is 5 s): each sensor's run starts within a second of being queued.
DEQUEUE_EVERY_SECOND = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""

LOCATION_SOURCE = """
import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, TerminalError, backfill_asset, platform_definitions

metadata = sa.MetaData()
table = sa.Table(
    TABLE,
    metadata,
    sa.Column("region", sa.String(32), primary_key=True),
    sa.Column("line", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


def rows_of_region(table: sa.Table, region: str) -> sa.ColumnElement[bool]:
    return table.c.region == region


@backfill_asset(
    name=ASSET,
    table=table,
    partitions_def=dg.StaticPartitionsDefinition(["north", "south", "poison"]),
    partition_scope=rows_of_region,
)
def backfill(source: PartitionInput):
    if source.partition_key == "poison":
        raise TerminalError("the poison region's export is malformed")
    yield pd.DataFrame(
        {"region": [source.partition_key] * 2, "line": [1, 2], "amount_cents": [5, 7]}
    )


defs = platform_definitions([backfill], executor=dg.in_process_executor, location=LOCATION)
"""


def write_location(project: Path, location: tuple[str, str, str, str]) -> None:
    name, package, asset, table = location
    folder = project / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    names = f"LOCATION, ASSET, TABLE = {name!r}, {asset!r}, {table!r}\n"
    (folder / "defs.py").write_text(names + LOCATION_SOURCE)


@pytest.fixture
def receiver(monkeypatch) -> Iterator[HttpReceiver]:
    """A webhook receiver every location alerts (JOBS_PLATFORM_ALERT_WEBHOOK_URL)."""
    with http_receiver() as receiver:
        monkeypatch.setenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", receiver.url)
        yield receiver


@pytest.fixture
def workspace(upgraded_pg_url, tmp_path, monkeypatch) -> Iterator[dict[str, str]]:
    """Both packages importable here and in subprocesses, the warehouse deployed for them."""
    project = tmp_path / "project"
    for location in (SALES, ADS):
        write_location(project, location)
    (project / "workspace.yaml").write_text(
        "load_from:\n"
        + "".join(
            f"  - python_module:\n      module_name: {package}.defs\n"
            f"      location_name: {package}\n"
            for _, package, _, _ in (SALES, ADS)
        )
    )
    env = platform_environment(
        upgraded_pg_url,
        tmp_path,
        PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]),
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(tmp_path)
    engine = warehouse_engine(upgraded_pg_url)
    create_user_tables(engine, *(_table_of(location) for location in (SALES, ADS)))
    yield env
    for name in [name for name in sys.modules if name.split(".")[0] in ("sales_team", "ads_team")]:
        del sys.modules[name]


def _table_of(location) -> sa.Table:
    return importlib.import_module(f"{location[1]}.defs").table


def definitions(location) -> dg.Definitions:
    return importlib.import_module(f"{location[1]}.defs").defs


def sensor_name(location, name: str) -> str:
    return f"{location[0]}_{name}"


def tick(location, sensor: str, instance: dg.DagsterInstance, cursor: str | None = None):
    defs = definitions(location)
    context = dg.build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        cursor=cursor,
        definitions=defs,
        resources=dict(defs.resources),
    )
    return defs.get_sensor_def(sensor_name(location, sensor)).evaluate_tick(context)


def enqueue(engine: sa.Engine, asset: str) -> int:
    with engine.begin() as connection:
        return request_backfill(connection, asset, [PARTITION], reason="source corrected")


def status_of(engine: sa.Engine, request_id: int) -> str:
    with engine.connect() as connection:
        return connection.execute(
            sa.select(outbox.c.status).where(outbox.c.id == request_id)
        ).scalar_one()


@pytest.fixture
def engine(workspace) -> sa.Engine:
    return sa.create_engine(workspace["JOBS_PLATFORM_DATABASE_URL"])


@pytest.fixture
def instance(workspace) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.get() as instance:
        yield instance


def test_each_locations_outbox_sensor_claims_only_requests_for_its_own_assets(engine, instance):
    sales, ads, unserved = (enqueue(engine, asset) for asset in (SALES[2], ADS[2], UNSERVED))

    [sales_run] = tick(SALES, "backfill_request_sensor", instance).run_requests

    assert sales_run.asset_selection == [dg.AssetKey(SALES[2])]
    assert [status_of(engine, i) for i in (sales, ads, unserved)] == [
        "claimed",
        "pending",
        "pending",
    ]
    record_requested_run(instance, sales_run, definitions=definitions(SALES))
    assert tick(SALES, "backfill_request_sensor", instance).run_requests == []
    assert status_of(engine, sales) == "launched"

    [ads_run] = tick(ADS, "backfill_request_sensor", instance).run_requests

    assert ads_run.asset_selection == [dg.AssetKey(ADS[2])]
    assert (status_of(engine, ads), status_of(engine, unserved)) == ("claimed", "pending")
    # Never rejected by a location that does not serve it; counted while it waits.
    with engine.connect() as connection:
        assert OutboxBacklog(DATABASE_CLOCK).queue_stats(connection).pending == 1


def test_each_locations_dead_letter_sensor_alerts_and_shows_only_its_own_entries(
    engine, instance, receiver
):
    sales_entry = quarantine_entry(engine, SALES[2], PARTITION)
    ads_entry = quarantine_entry(engine, ADS[2], PARTITION)

    sales_tick = tick(SALES, "dead_letter_sensor", instance)

    assert [request.partition_key for request in sales_tick.run_requests] == [str(sales_entry)]
    assert sales_tick.run_requests[0].asset_selection == [dg.AssetKey(["sales", "dead_letter"])]
    [added] = sales_tick.dynamic_partitions_requests
    assert (added.partitions_def_name, list(added.partition_keys)) == (
        "sales_dead_letter_entries",
        [str(sales_entry)],
    )
    assert [alert.json()["entry_id"] for alert in receiver.requests] == [sales_entry]
    # The next tick of the same location finds nothing new: the other's entry is not its.
    assert tick(SALES, "dead_letter_sensor", instance, sales_tick.cursor).run_requests == []

    ads_tick = tick(ADS, "dead_letter_sensor", instance)

    assert [request.partition_key for request in ads_tick.run_requests] == [str(ads_entry)]
    assert [alert.json()["entry_id"] for alert in receiver.requests] == [sales_entry, ads_entry]


def test_each_locations_requeue_job_and_sensor_release_and_relaunch_only_its_own(engine, instance):
    quarantine_entry(engine, SALES[2], PARTITION)
    quarantine_entry(engine, ADS[2], PARTITION)
    requeue = definitions(SALES).resolve_job_def("sales_requeue_dead_letter")

    def run_requeue(asset: str) -> dg.ExecuteInProcessResult:
        config = {
            "ops": {"requeue_partition": {"config": {"asset": asset, "partition": PARTITION}}}
        }
        return requeue.execute_in_process(
            run_config=config, instance=instance, raise_on_error=False
        )

    assert not run_requeue(ADS[2]).success  # the other location's to release
    assert run_requeue(SALES[2]).success
    with engine.begin() as connection:
        assert latest_entry(connection, ADS[2], PARTITION).status == "quarantined"
        DeadLetter(DATABASE_CLOCK).requeue_partition(
            connection, ADS[2], PARTITION
        )  # released by the ads team

    [relaunch] = tick(SALES, "requeue_sensor", instance).run_requests

    assert relaunch.asset_selection == [dg.AssetKey(SALES[2])]
    assert [r.asset_selection for r in tick(ADS, "requeue_sensor", instance).run_requests] == [
        [dg.AssetKey(ADS[2])]
    ]


def test_each_locations_abandoned_run_sensor_rescues_only_its_own_attempts(engine, instance):
    long_ago = dt.datetime(2024, 1, 4, tzinfo=dt.UTC)
    with engine.begin() as connection:
        ids = {}
        for asset in (SALES[2], ADS[2]):
            ids[asset] = an_attempt(
                connection, asset=asset, partition=PARTITION, outcome="running", run_id=asset
            )
            a_lease(
                connection,
                asset=asset,
                partition=PARTITION,
                attempt_id=ids[asset],
                run_id=asset,
                acquired_at=long_ago,
                expires_at=long_ago + dt.timedelta(seconds=30),
            )

    tick(SALES, "abandoned_run_sensor", instance)

    with engine.connect() as connection:
        outcomes = dict(
            connection.execute(
                sa.select(attempts.c.asset, attempts.c.error_class.label("c")).where(
                    attempts.c.id.in_(list(ids.values()))
                )
            ).all()
        )
    assert outcomes == {SALES[2]: "crash", ADS[2]: None}


def test_each_locations_health_counts_only_its_own_backfills(engine, instance):
    for asset in (SALES[2], ADS[2], ADS[2], UNSERVED):
        enqueue(engine, asset)
    quarantine_entry(engine, ADS[2], PARTITION)
    defs = definitions(SALES)
    health = [defs.get_assets_def(dg.AssetKey(["sales", name])) for name in ("outbox_health",)]
    platform = defs.get_assets_def(dg.AssetKey(["sales", "platform_health"]))

    outbox_result = dg.materialize(health, instance=instance, resources=dict(defs.resources))
    platform_result = dg.materialize([platform], instance=instance, resources=dict(defs.resources))

    [outbox_event] = outbox_result.get_asset_materialization_events()
    assert outbox_event.materialization.metadata["pending_count"].value == 1
    [platform_event] = platform_result.get_asset_materialization_events()
    metadata = platform_event.materialization.metadata
    assert metadata["pending_requests"].value == 1
    assert not any(key.startswith(ADS[2]) for key in metadata)
    assert metadata["dead_letter_causes"].value == 0  # the ads team's entry is theirs
    checks = {
        check.check_name: check.passed for check in platform_result.get_asset_check_evaluations()
    }
    assert checks["nothing_quarantined"] is True  # the quarantined partition is the ads team's


def test_two_locations_hold_no_duplicate_asset_key_or_definition_name(workspace):
    from orders_example.definitions import defs as bundled

    def names(defs: dg.Definitions) -> set[str]:
        repository = defs.get_repository_def()
        return {
            *(key.to_user_string() for key in defs.resolve_all_asset_keys()),
            *(f"sensor {sensor.name}" for sensor in repository.sensor_defs),
            *(f"schedule {schedule.name}" for schedule in repository.schedule_defs),
            *(
                f"job {job.name}"
                for job in repository.get_all_jobs()
                if not job.name.startswith("__")
            ),
        }

    sales, ads, bare = names(definitions(SALES)), names(definitions(ADS)), names(bundled)

    assert sales & ads == set() and sales & bare == set() and ads & bare == set()
    assert {
        "sales/dead_letter",
        "sensor sales_dead_letter_sensor",
        "job sales_requeue_dead_letter",
    } <= sales
    assert {"dead_letter", "sensor dead_letter_sensor", "job requeue_dead_letter"} <= bare


def test_under_one_daemon_each_location_launches_its_own_request(workspace, engine, tmp_path):
    requests = {asset: enqueue(engine, asset) for asset in (SALES[2], ADS[2], UNSERVED)}
    with open(Path(workspace["DAGSTER_HOME"]) / "dagster.yaml", "a") as settings:
        settings.write(DEQUEUE_EVERY_SECOND)
    layout = stack.StackLayout(tmp_path / "stack")
    stack.start_process(
        layout,
        "daemon",
        [
            str(stack.BIN / "dagster-daemon"),
            "run",
            "-w",
            str(tmp_path / "project" / "workspace.yaml"),
        ],
        # The sensor daemon looks for due sensors every second, not every 5 s.
        stack.process_environment(fast_daemon_loops(workspace)),
        cwd=tmp_path,
    )
    try:
        with dg.DagsterInstance.get() as instance:

            def both_succeeded() -> dict[str, dg.DagsterRun] | None:
                runs = {}
                for asset in (SALES[2], ADS[2]):
                    found = instance.get_runs(
                        filters=dg.RunsFilter(
                            tags={"jobs_platform/request_id": str(requests[asset])}
                        )
                    )
                    if not found or found[0].status != dg.DagsterRunStatus.SUCCESS:
                        return None
                    runs[asset] = found[0]
                return runs

            runs = wait_for(
                both_succeeded, timeout=DAEMON_SECONDS, interval=0.25, what="both requests' runs"
            )
    finally:
        stack.stop_process(layout, "daemon", timeout=30)

    origins = {
        asset: run.remote_job_origin.repository_origin.code_location_origin.location_name
        for asset, run in runs.items()
    }
    assert origins == {SALES[2]: "sales_team", ADS[2]: "ads_team"}
    with engine.connect() as connection:
        for _, _, _, table in (SALES, ADS):
            assert connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 2
    assert status_of(engine, requests[UNSERVED]) == "pending"
