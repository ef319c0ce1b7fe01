"""A team's own package with an hourly backfill under a key prefix and a daily one reading it.

Written to a temporary folder and driven in real processes with the README's commands
only (`jobs-platform … -m acme.defs`, `dagster … -m acme.defs`) on PostgreSQL: the
backfill is known by its asset key (`acme/events`) in every command; a day with a poison
hour is blocked (exit 1, nothing written); after the input is fixed, requeuing the hour
queues its run, and once it succeeded the location's requeue sensor (under a daemon)
brings the day up to date, equal to a reference computed here from the landing files.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    RUN_KEY_TAG,
    downstream_run_key,
    requeue_run_key,
)
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.requeued_runs import RUN_SECONDS, daemon_running
from jobs_platform_tests.test_own_code_location import concurrently
from jobs_platform_tests.waiting import wait_for

BIN = Path(sys.executable).parent
MODULE = "acme.defs"
DAY = "2024-05-02"
POISON_HOUR = f"{DAY}-07:00"
HOURS = [f"{DAY}-{h:02d}:00" for h in range(24)]
# Dagster's default queue, dequeued every second as the repository's dagster.yaml does
# (Dagster's default is 5 s): the requeued hour and then its day each start within a second.
INSTANCE = """\
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
telemetry:
  enabled: false
"""

DEFS = textwrap.dedent(
    """
    import dagster as dg
    import pandas as pd
    import sqlalchemy as sa
    from jobs_platform import PartitionInput, TerminalError, backfill_asset, platform_definitions

    metadata = sa.MetaData()
    events_table = sa.Table(
        "acme_hourly_events", metadata,
        sa.Column("event_id", sa.BigInteger, primary_key=True),
        sa.Column("hour", sa.String(16), nullable=False),
        sa.Column("amount_cents", sa.BigInteger, nullable=False),
    )
    daily_table = sa.Table(
        "acme_daily_events", metadata,
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("events", sa.BigInteger, nullable=False),
        sa.Column("amount_cents", sa.BigInteger, nullable=False),
    )


    class Landing(dg.ConfigurableResource):
        root: str


    @backfill_asset(
        table=events_table,
        partitions_def=dg.HourlyPartitionsDefinition(start_date="2024-05-01-00:00"),
        partition_scope=lambda table, hour: table.c.hour == hour,
        key_prefix=["acme"],
    )
    def events(source: PartitionInput, landing: Landing):
        path = f"{landing.root}/events/{source.partition_key}.csv"
        chunk = pd.read_csv(path, dtype=str)
        try:
            chunk["event_id"] = pd.to_numeric(chunk["event_id"], errors="raise")
            chunk["amount_cents"] = pd.to_numeric(chunk["amount_cents"], errors="raise")
        except ValueError as exc:
            raise TerminalError(f"{path}: {exc}") from None
        yield chunk.assign(hour=source.partition_key)


    @backfill_asset(
        table=daily_table,
        partitions_def=dg.DailyPartitionsDefinition(start_date="2024-05-01"),
        partition_scope=lambda table, day: table.c.day == day,
        deps=[events],
        key_prefix=["acme"],
    )
    def events_daily(source: PartitionInput):
        amount = events_table.c.amount_cents
        with source.warehouse.connect() as connection:
            count, total = connection.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(amount), 0)).where(
                    sa.func.substr(events_table.c.hour, 1, 10) == source.partition_key
                )
            ).one()
        yield pd.DataFrame([{"day": source.partition_key, "events": count, "amount_cents": total}])


    tenants_table = sa.Table(
        "acme_tenants", metadata,
        sa.Column("tenant", sa.String(16), primary_key=True),
        sa.Column("rate", sa.BigInteger, nullable=False),
    )
    charges_table = sa.Table(
        "acme_tenant_charges", metadata,
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("tenant", sa.String(16), primary_key=True),
        sa.Column("charge", sa.BigInteger, nullable=False),
    )
    tenant_partitions = dg.StaticPartitionsDefinition(["north", "south"])


    @backfill_asset(
        table=tenants_table,
        partitions_def=tenant_partitions,
        partition_scope=lambda table, tenant: table.c.tenant == tenant,
        key_prefix=["acme"],
    )
    def tenants(source: PartitionInput, landing: Landing):
        rate = pd.read_csv(f"{landing.root}/tenants/{source.partition_key}.csv")["rate"]
        yield pd.DataFrame([{"tenant": source.partition_key, "rate": int(rate.iloc[0])}])


    @backfill_asset(
        table=charges_table,
        partitions_def=dg.MultiPartitionsDefinition(
            {"day": dg.DailyPartitionsDefinition("2024-05-01"), "tenant": tenant_partitions}
        ),
        partition_scope=lambda table, key: sa.and_(
            table.c.day == key.split("|")[0], table.c.tenant == key.split("|")[1]
        ),
        deps=[dg.AssetDep(tenants, partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
            partition_dimension_name="tenant"))],
        key_prefix=["acme"],
    )
    def charges(source: PartitionInput):
        day, tenant = source.partition_key.split("|")
        with source.warehouse.connect() as connection:
            rate = connection.execute(
                sa.select(tenants_table.c.rate).where(tenants_table.c.tenant == tenant)
            ).scalar_one()
        yield pd.DataFrame([{"day": day, "tenant": tenant, "charge": 3 * rate}])


    # Steps run in the run's process (README: `executor=`): what is checked here happens
    # inside a step whichever executor runs it, and no run pays for a step process
    # (test_own_code_location keeps the default executor, a crash retried in a new one).
    defs = dg.Definitions.merge(
        platform_definitions(
            [events, events_daily, tenants, charges], executor=dg.in_process_executor
        ),
        dg.Definitions(
            jobs=[dg.define_asset_job("acme_hourly", selection=[events])],
            resources={"landing": Landing(root=dg.EnvVar("ACME_LANDING"))},
        ),
    )
    """
)


def hour_rows(hour: str) -> list[dict]:
    base = (int(hour[8:10]) * 24 + int(hour[11:13])) * 100
    return [{"event_id": base + n, "amount_cents": 10 * n + int(hour[11:13])} for n in range(5)]


def write_hour(landing: Path, hour: str, *, poison: bool = False) -> None:
    path = landing / "events" / f"{hour}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["event_id", "amount_cents"])
        writer.writeheader()
        for n, row in enumerate(hour_rows(hour)):
            writer.writerow(
                {**row, "amount_cents": "twelve" if poison and n == 2 else row["amount_cents"]}
            )


def day_reference(landing: Path) -> list[tuple]:
    rows = []
    for hour in HOURS:
        with (landing / "events" / f"{hour}.csv").open() as handle:
            rows += [int(r["amount_cents"]) for r in csv.DictReader(handle)]
    return [(DAY, len(rows), sum(rows))]


@pytest.fixture
def acme(pg_url, tmp_path) -> dict[str, str]:
    package = tmp_path / "project" / "acme"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(DEFS)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE)
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "ACME_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(home),
        "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.2",
    }


def ok(completed) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def jobs_platform(env, *args: str):
    return run_cli([str(BIN / "jobs-platform"), *args], env)


def daily_rows(url: str) -> list[tuple]:
    with sa.create_engine(url).connect() as connection:
        return [tuple(r) for r in connection.execute(sa.text("SELECT * FROM acme_daily_events"))]


@pytest.mark.slow
def test_a_prefixed_hourly_backfill_gates_its_daily_rollup_and_its_requeue_updates_the_day(
    acme, pg_url, tmp_path
):
    env, landing = acme, Path(acme["ACME_LANDING"])
    assert "acme_daily_events" in ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    for hour in HOURS:
        write_hour(landing, hour, poison=hour == POISON_HOUR)

    # The day's 24 hours in one ranged run: the poison hour is quarantined alone.
    tags = {PARTITION_RANGE_START_TAG: HOURS[0], PARTITION_RANGE_END_TAG: HOURS[-1]}
    hourly = [str(BIN / "dagster"), "job", "execute", "-m", MODULE, "-j", "acme_hourly",
              "--tags", json.dumps(tags)]  # fmt: skip
    assert run_cli(hourly, env).returncode == 1
    # Two reads of the same entry, each in its own process: run side by side.
    listed, shown = concurrently(
        [BIN / "jobs-platform", "dead-letter", "list", "-m", MODULE, "--json"],
        [BIN / "jobs-platform", "dead-letter", "show", "-m", MODULE, "acme/events", POISON_HOUR,
         "--json"],
        env=env,
    )  # fmt: skip
    (entry,) = json.loads(ok(listed))
    assert (entry["asset"], entry["partition"]) == ("acme/events", POISON_HOUR)
    entry_id = json.loads(ok(shown))["entry"]["id"]

    # The day reads the poison hour: blocked, not computed from 23 hours.
    day = [str(BIN / "dagster"), "asset", "materialize", "-m", MODULE,
           "--select", "acme/events_daily", "--partition", DAY]  # fmt: skip
    blocked = run_cli(day, env)
    assert blocked.returncode == 1
    assert "not attempted" in blocked.stdout + blocked.stderr
    assert daily_rows(pg_url) == []

    # The file is fixed; requeuing the hour by its key completes it, then its day.
    write_hour(landing, POISON_HOUR)
    requeued = ok(
        jobs_platform(env, "dead-letter", "requeue", "-m", MODULE, "acme/events", POISON_HOUR)
    )
    # Once a daemon runs, the requeue sensor launches the hour; once it succeeded, its day.
    # The requeue sensor ticks every second here, not 15 s: the day's run follows its hour's.
    assert "the code location's requeue sensor launches its run" in requeued
    day_key = downstream_run_key(entry_id, "acme/events_daily", DAY)
    with (
        ThreadPoolExecutor(1) as background,
        daemon_running(env, tmp_path / "daemon", MODULE, sensor_seconds={"requeue_sensor": 1}),
        dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance,
    ):
        hour_run = wait_for(
            lambda: finished_run(instance, requeue_run_key(entry_id)),
            timeout=RUN_SECONDS,
            interval=0.25,
            what="the hour's requeue run to end",
        )
        assert hour_run.status == dg.DagsterRunStatus.SUCCESS
        wait_for(
            lambda: daily_rows(pg_url) == day_reference(landing),
            timeout=RUN_SECONDS,
            interval=0.25,
            what=lambda: f"the day's run to bring it up to date: {daily_rows(pg_url)}",
        )
        # The day is up to date: listed while its run ends and the daemon stops, not after.
        relisted = background.submit(
            jobs_platform, env, "dead-letter", "list", "-m", MODULE, "--json"
        )
        # Ended before the daemon stops, which would interrupt it.
        day_run = wait_for(
            lambda: finished_run(instance, day_key),
            timeout=RUN_SECONDS,
            interval=0.25,
            what=f"the day's run {day_key} to end",
        )
    assert day_run.tags[PARTITION_TAG] == DAY
    assert day_run.status == dg.DagsterRunStatus.SUCCESS
    assert json.loads(ok(relisted.result())) == []


def finished_run(instance: dg.DagsterInstance, run_key: str) -> dg.DagsterRun | None:
    """The run of `run_key` once it has ended (the only one: a run key is launched once)."""
    runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: run_key}))
    assert len(runs) <= 1, runs
    return runs[0] if runs and runs[0].is_finished else None


def test_a_multi_partitioned_backfill_waits_for_the_static_one_it_reads(acme, pg_url):
    env, landing = acme, Path(acme["ACME_LANDING"])
    ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    (landing / "tenants").mkdir(parents=True)
    (landing / "tenants" / "north.csv").write_text("rate\n7\n")

    def materialize(asset: str, partition: str):
        return run_cli(
            [str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", asset,
             "--partition", partition],
            env,
        )  # fmt: skip

    ok(materialize("acme/tenants", "north"))
    ok(materialize("acme/charges", f"{DAY}|north"))
    assert materialize("acme/charges", f"{DAY}|south").returncode == 1  # south never ran
    with sa.create_engine(pg_url).connect() as connection:
        rows = [tuple(r) for r in connection.execute(sa.text("SELECT * FROM acme_tenant_charges"))]
    assert rows == [(DAY, "north", 21)]
