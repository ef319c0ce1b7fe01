"""The dead letter heals itself: `dead_letter_redrive_sensor` requeues entries whose cause is gone.

Real PostgreSQL, real runs in process, the sensor ticked as the daemon ticks it. Time is
the database's, shifted by a test clock where a cool-down must pass (no sleeping).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, TerminalError, backfill_asset, platform_definitions
from jobs_platform.dead_letter import redrive_sensor as redrive_module
from jobs_platform.dead_letter.entries import active_entry, latest_entry
from jobs_platform.dead_letter.redrive_sensor import dead_letter_redrive_sensor
from jobs_platform.dead_letter.releases import requeue_log
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.metrics.reader import read_metrics
from jobs_platform.orchestration.tags import requeue_run_key
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import alert_ledger, quarantine
from jobs_platform_tests.alert_fixtures import http_receiver
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materialize
from orders_example.definitions import defs
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 3, 4)
PARTITION = DAY.isoformat()

redrive_events = sa.Table(
    "redrive_events",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("part", sa.String(16), nullable=False),
)
PARTS = dg.StaticPartitionsDefinition(["a", "b"])


def of_part(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.part == partition


def events_backfill(code_version: str, *, redrive: bool = True, fixed: bool) -> dg.AssetsDefinition:
    """The same backfill, `redrive_events`, as shipped at `code_version`: broken or fixed."""

    @backfill_asset(
        table=redrive_events,
        partitions_def=PARTS,
        partition_scope=of_part,
        code_version=code_version,
        redrive=redrive,
        name="redrive_events",
    )
    def events(source: PartitionInput) -> Iterator[pd.DataFrame]:
        if not fixed:
            raise TerminalError("a bug in the reader")
        yield pd.DataFrame(
            {"id": [1 if source.partition_key == "a" else 2], "part": [source.partition_key]}
        )

    return events


EVENTS_V1 = events_backfill("1", fixed=False)
EVENTS_V2 = events_backfill("2", fixed=True)
EVENTS_V2_NOT_REDRIVEN = events_backfill("2", redrive=False, fixed=True)


@pytest.fixture
def instance(pg_platform_env) -> Iterator[dg.DagsterInstance]:
    """An in-memory instance: the redrive and requeue sensors need no instance ref (no
    dynamic partitions), and a run's events stay out of a SQLite file per run."""
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


@pytest.fixture
def engine(pg_platform_env) -> sa.Engine:
    return engine_from(pg_platform_env)


class ShiftedClock:
    """The database's clock, `ahead` in the future: a cool-down passes without waiting."""

    def __init__(self, ahead: dt.timedelta):
        self.ahead = ahead

    def now(self, connection: sa.Connection) -> dt.datetime:
        return DATABASE_CLOCK.now(connection) + self.ahead


@pytest.fixture
def time_passes(monkeypatch):
    """Moves the clock of the redrive sensor's judgement only (`find_redrives`, the cool-down
    comparison): the runs, hooks and releases keep the database's."""
    find_redrives = redrive_module.find_redrives

    def to(ahead: dt.timedelta) -> None:
        def on_shifted_clock(store: Warehouse, *args, **kwargs):
            return find_redrives(Warehouse(store.engine, ShiftedClock(ahead)), *args, **kwargs)

        monkeypatch.setattr(redrive_module, "find_redrives", on_shifted_clock)

    return to


def tick(
    instance: dg.DagsterInstance,
    definitions: dg.Definitions = defs,
    sensor: dg.SensorDefinition = dead_letter_redrive_sensor,
    cursor: str | None = None,
) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=definitions,
        resources=dict(definitions.resources),
    )
    return sensor.evaluate_tick(context)


def redrives(engine: sa.Engine, asset: str, partition: str) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        return [(row.by, row.reason) for row in requeue_log(connection, asset, partition)]


def is_open(engine: sa.Engine, asset: str, partition: str) -> bool:
    with engine.connect() as connection:
        return active_entry(connection, asset, partition) is not None


def poison_day(landing: str, seed: int = 0) -> None:
    seed_orders(landing, DAY, DAY, orders_per_day=30, poison_days=[DAY], seed=seed)


def order_ids_in_landing(landing: str) -> list[int]:
    lines = (Path(landing) / "orders" / f"{PARTITION}.jsonl").read_text().splitlines()
    return sorted({json.loads(line)["order_id"] for line in lines})


def test_a_poison_file_fixed_on_disk_is_redriven_for_its_input_and_the_day_completes(
    pg_platform_env, instance, engine
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing)
    assert not materialize([orders, daily_revenue], PARTITION, instance=instance).success
    unchanged = tick(instance)
    assert is_open(engine, "orders", PARTITION)

    seed_orders(landing, DAY, DAY, orders_per_day=30)  # someone fixes the file
    fixed = tick(instance, cursor=unchanged.cursor)

    assert redrives(engine, "orders", PARTITION) == [("redrive", "input_changed")]
    with engine.connect() as connection:
        entry = latest_entry(connection, "orders", PARTITION)
    [launch] = tick(instance, sensor=requeue_sensor).run_requests  # as the daemon would
    assert launch.run_key == requeue_run_key(entry.id) and launch.partition_key == PARTITION
    assert materialize([orders, daily_revenue], PARTITION, instance=instance).success
    assert [row[0] for row in table_snapshot(engine, "orders")] == order_ids_in_landing(landing)
    assert table_snapshot(engine, "daily_revenue")
    assert fixed.skip_message == "redrove 1 (input_changed 1)"
    assert unchanged.skip_message and "no dead-letter entry" in unchanged.skip_message


def test_a_missing_input_file_that_arrives_is_redriven_for_its_input(
    pg_platform_env, instance, engine
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    assert not materialize([orders], PARTITION, instance=instance).success  # no file: terminal
    still_missing = tick(instance)
    assert redrives(engine, "orders", PARTITION) == []

    seed_orders(landing, DAY, DAY, orders_per_day=30)  # the file lands
    arrived = tick(instance, cursor=still_missing.cursor)

    assert redrives(engine, "orders", PARTITION) == [("redrive", "input_changed")]
    assert arrived.skip_message == "redrove 1 (input_changed 1)"


def test_an_entry_from_before_fingerprints_were_recorded_is_not_judged_by_input(
    pg_platform_env, instance, engine
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing)
    assert not materialize([orders], PARTITION, instance=instance).success
    with engine.begin() as connection:  # as migration 0004 leaves an older entry
        connection.execute(sa.update(quarantine).values(fingerprint=None))
    seed_orders(landing, DAY, DAY, orders_per_day=30)

    tick(instance)

    assert redrives(engine, "orders", PARTITION) == []


def test_a_bumped_code_version_redrives_the_entries_of_the_old_one(instance, engine):
    location_v1 = platform_definitions([EVENTS_V1])
    location_v2 = platform_definitions([EVENTS_V2])
    assert not materialize([EVENTS_V1], "a", instance=instance).success

    tick(instance, location_v1)
    assert redrives(engine, "redrive_events", "a") == []

    tick(instance, location_v2)
    assert redrives(engine, "redrive_events", "a") == [("redrive", "code_changed")]
    assert materialize([EVENTS_V2], "a", instance=instance).success
    assert table_snapshot(engine, "redrive_events") == [(1, "a")]


def test_a_backfill_with_redrive_off_is_never_redriven(instance, engine, time_passes):
    assert not materialize([EVENTS_V1], "a", instance=instance).success
    time_passes(dt.timedelta(days=365))

    result = tick(instance, platform_definitions([EVENTS_V2_NOT_REDRIVEN]))

    assert redrives(engine, "redrive_events", "a") == []
    assert is_open(engine, "redrive_events", "a")
    assert "no backfill of this code location is redriven" in (result.skip_message or "")


def outage_exhausted_day(pg_platform_env, monkeypatch, instance) -> None:
    """The day ran out of attempts on a source outage (retryable each time)."""
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=10)
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient")
    monkeypatch.setenv("JOBS_PLATFORM_MAX_ATTEMPTS", "2")
    assert not materialize([orders], PARTITION, instance=instance).success


def test_an_outage_exhausted_day_is_redriven_after_its_cool_down_and_not_before(
    pg_platform_env, monkeypatch, instance, engine, time_passes
):
    outage_exhausted_day(pg_platform_env, monkeypatch, instance)
    with engine.connect() as connection:
        assert latest_entry(connection, "orders", PARTITION).error_class == "retryable"

    time_passes(dt.timedelta(seconds=890))  # the default cool-down is 900 s
    tick(instance)
    assert redrives(engine, "orders", PARTITION) == []

    time_passes(dt.timedelta(seconds=901))
    tick(instance)
    assert redrives(engine, "orders", PARTITION) == [("redrive", "cooldown")]


def test_the_second_cool_down_of_a_day_is_four_times_the_first(
    pg_platform_env, monkeypatch, instance, engine, time_passes
):
    monkeypatch.setenv("JOBS_PLATFORM_REDRIVE_COOLDOWN_SECONDS", "60")
    outage_exhausted_day(pg_platform_env, monkeypatch, instance)
    time_passes(dt.timedelta(seconds=61))
    tick(instance)
    assert not materialize([orders], PARTITION, instance=instance).success  # still out

    time_passes(dt.timedelta(seconds=230))
    tick(instance)
    assert redrives(engine, "orders", PARTITION) == [("redrive", "cooldown")]
    time_passes(dt.timedelta(seconds=241))
    tick(instance)
    assert redrives(engine, "orders", PARTITION) == [("redrive", "cooldown")] * 2

    monkeypatch.delenv("JOBS_PLATFORM_FAILPOINTS")  # the outage ends
    assert materialize([orders], PARTITION, instance=instance).success


def test_a_terminal_day_is_never_redriven_by_cool_down(
    pg_platform_env, instance, engine, time_passes
):
    poison_day(pg_platform_env["JOBS_PLATFORM_LANDING"])
    assert not materialize([orders], PARTITION, instance=instance).success

    time_passes(dt.timedelta(days=3650))
    tick(instance)

    assert redrives(engine, "orders", PARTITION) == []
    assert is_open(engine, "orders", PARTITION)


def exhausted_alert_rows(engine: sa.Engine) -> list[tuple[int, str]]:
    with engine.connect() as connection:
        return [
            (row.entry_id, row.sink)
            for row in connection.execute(
                sa.select(alert_ledger).where(alert_ledger.c.sink.like("%:redrives_exhausted"))
            )
        ]


def test_a_day_is_redriven_at_most_max_redrives_times_then_alerted_exactly_once_more(
    pg_platform_env, monkeypatch, instance, engine
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing, seed=0)
    assert not materialize([orders], PARTITION, instance=instance).success
    with http_receiver() as receiver:
        monkeypatch.setenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", receiver.url)
        for fix_that_fails in (1, 2, 3):
            poison_day(landing, seed=fix_that_fails)  # another file, still poison
            tick(instance)
            assert not materialize([orders], PARTITION, instance=instance).success

        poison_day(landing, seed=4)
        cursor = tick(instance).cursor
        tick(instance, cursor=cursor)
        tick(instance)

        assert redrives(engine, "orders", PARTITION) == [("redrive", "input_changed")] * 3
        with engine.connect() as connection:
            last = latest_entry(connection, "orders", PARTITION)
            reading = read_metrics(
                connection, {"orders": [PARTITION]}, max_redrives=3, clock=DATABASE_CLOCK
            )
        assert last.status == "quarantined"
        assert receiver.keys() == [f"{last.id}:redrives_exhausted"]
    assert exhausted_alert_rows(engine) == [(last.id, "log:redrives_exhausted"),
                                            (last.id, "webhook:redrives_exhausted")]  # fmt: skip
    assert reading.redrives == {("orders", "input_changed"): 3}
    assert reading.redrives_exhausted["orders"] == 1


def test_max_redrives_is_the_settings_value(pg_platform_env, monkeypatch, instance, engine):
    monkeypatch.setenv("JOBS_PLATFORM_MAX_REDRIVES", "1")
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing, seed=0)
    assert not materialize([orders], PARTITION, instance=instance).success
    poison_day(landing, seed=1)
    tick(instance)
    assert not materialize([orders], PARTITION, instance=instance).success

    poison_day(landing, seed=2)
    tick(instance)

    assert redrives(engine, "orders", PARTITION) == [("redrive", "input_changed")]
    assert len(exhausted_alert_rows(engine)) == 1  # the log sink's


def test_the_input_walk_is_bounded_per_tick_and_goes_round(
    pg_platform_env, monkeypatch, instance, engine
):
    monkeypatch.setattr(redrive_module, "FINGERPRINTS_PER_TICK", 1)
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    days = [DAY, DAY + dt.timedelta(days=1)]
    seed_orders(landing, days[0], days[1], orders_per_day=5, poison_days=days)
    for day in days:
        assert not materialize([orders], day.isoformat(), instance=instance).success
    seed_orders(landing, days[0], days[1], orders_per_day=5)  # both fixed

    first = tick(instance)
    after_first = [redrives(engine, "orders", d.isoformat()) for d in days]
    second = tick(instance, cursor=first.cursor)
    after_second = [redrives(engine, "orders", d.isoformat()) for d in days]

    assert after_first == [[("redrive", "input_changed")], []]
    assert after_second == [[("redrive", "input_changed")]] * 2
    assert second.cursor is not None


def test_every_location_has_its_redrive_sensor_named_for_it_and_running_by_default():
    named = platform_definitions([EVENTS_V2], location="acme").get_repository_def()
    bare = defs.get_repository_def()

    assert "acme_dead_letter_redrive_sensor" in [sensor.name for sensor in named.sensor_defs]
    sensor = bare.get_sensor_def("dead_letter_redrive_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_zero_max_redrives_turns_the_redrive_off(pg_platform_env, monkeypatch, instance, engine):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing)
    assert not materialize([orders], PARTITION, instance=instance).success
    seed_orders(landing, DAY, DAY, orders_per_day=30)
    monkeypatch.setenv("JOBS_PLATFORM_MAX_REDRIVES", "0")

    result = tick(instance)

    assert redrives(engine, "orders", PARTITION) == []
    assert "the redrive is off" in (result.skip_message or "")


def test_a_location_redrives_only_its_own_backfills_entries(pg_platform_env, instance, engine):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing)
    assert not materialize([orders], PARTITION, instance=instance).success
    seed_orders(landing, DAY, DAY, orders_per_day=30)

    tick(instance, platform_definitions([EVENTS_V2]))

    assert redrives(engine, "orders", PARTITION) == []
    assert is_open(engine, "orders", PARTITION)


def test_an_input_that_cannot_be_fingerprinted_now_is_not_judged_by_it(
    pg_platform_env, instance, engine, capfd
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    poison_day(landing)
    assert not materialize([orders], PARTITION, instance=instance).success
    (Path(landing) / "orders" / f"{PARTITION}.jsonl").unlink()  # the file is gone

    tick(instance)

    assert redrives(engine, "orders", PARTITION) == []
    assert is_open(engine, "orders", PARTITION)
    assert f"{PARTITION} (entry 1): input fingerprint failed" in capfd.readouterr().err
