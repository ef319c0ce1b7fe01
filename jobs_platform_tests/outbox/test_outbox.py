"""The outbox: a backfill request commits with the caller's state change and launches once."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import request_backfill
from jobs_platform.cli.main import main
from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.orchestration.tags import CORRELATION_TAG, REQUEST_ID_TAG, RUN_KEY_TAG
from jobs_platform.outbox import (
    MAX_PARTITIONS_PER_REQUEST,
    InvalidRequest,
    OutboxNotInstalled,
    OutboxStatus,
)
from jobs_platform.outbox.queue import Outbox
from jobs_platform.outbox.sensor import (
    HEALTH_CHECK_NAME,
    REQUESTS_PER_TICK,
    STALE_PENDING_SECONDS,
    backfill_request_sensor,
)
from jobs_platform.outbox.store import mark_rejected
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.outbox_backlog import OutboxBacklog
from jobs_platform.store.schema import create_user_tables, outbox, utcnow
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.databases import upgraded_warehouse
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.examples.samples import seed_example_orders
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import materialize, record_requested_run
from orders_example.customers.assets import customer_order_history
from orders_example.customers.history import busiest_customers
from orders_example.customers.tables import customer_order_history_table
from orders_example.definitions import defs
from orders_example.orders.assets import orders
from orders_example.orders.seed import seed_orders

DAY = "2024-01-03"
# The bundled location's, over its backfills' requests.
outbox_health = defs.get_assets_def("outbox_health")

app_metadata = sa.MetaData()
# The application's own state, changed in the same transaction as the request.
invoices = sa.Table(
    "invoices",
    app_metadata,
    sa.Column("invoice_id", sa.Integer, primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
)


@pytest.fixture
def engine(platform_env) -> sa.Engine:
    """The warehouse (PostgreSQL and SQLite), with the framework's and the app's tables."""
    engine = engine_from(platform_env)
    create_user_tables(engine, invoices)
    return engine


@pytest.fixture
def pg_engine(pg_platform_env) -> sa.Engine:
    engine = engine_from(pg_platform_env)
    create_user_tables(engine, invoices)
    return engine


@pytest.fixture
def instance(platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def tick(instance: dg.DagsterInstance):
    context = dg.build_sensor_context(
        instance=instance,
        instance_ref=None if instance.is_ephemeral else instance.get_ref(),
        definitions=defs,
        resources=dict(defs.resources),
    )
    return backfill_request_sensor.evaluate_tick(context)


def enqueue(engine: sa.Engine, asset="orders", partitions=(DAY,), **kwargs) -> int:
    kwargs.setdefault("reason", "invoice corrected")
    with engine.begin() as connection:
        return request_backfill(connection, asset, list(partitions), **kwargs)


def stored(engine: sa.Engine, request_id: int) -> sa.Row:
    with engine.connect() as connection:
        return connection.execute(sa.select(outbox).where(outbox.c.id == request_id)).one()


def our_tags(run_request: dg.RunRequest) -> dict[str, str]:
    return {k: v for k, v in run_request.tags.items() if k.startswith("jobs_platform/")}


def test_request_commits_with_the_callers_state_change(engine):
    with engine.begin() as connection:
        connection.execute(sa.insert(invoices).values(invoice_id=7, status="corrected"))
        request_id = request_backfill(
            connection, "orders", [DAY], reason="invoice 7 corrected", correlation_id="inv-7"
        )

    row = stored(engine, request_id)
    assert (row.asset, json.loads(row.partitions), row.status) == ("orders", [DAY], "pending")
    assert (row.reason, row.correlation_id, row.schema_version) == (
        "invoice 7 corrected",
        "inv-7",
        1,
    )
    with engine.connect() as connection:
        assert connection.execute(sa.select(invoices.c.status)).scalar_one() == "corrected"


def test_request_is_absent_when_the_callers_transaction_rolls_back(engine):
    with pytest.raises(RuntimeError, match="payment service down"), engine.begin() as connection:
        connection.execute(sa.insert(invoices).values(invoice_id=7, status="corrected"))
        request_backfill(connection, "orders", [DAY], reason="invoice 7 corrected")
        raise RuntimeError("payment service down")

    with engine.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(outbox)).scalar() == 0
        assert connection.execute(sa.select(sa.func.count()).select_from(invoices)).scalar() == 0


def test_request_is_invisible_to_the_sensor_until_the_caller_commits(pg_engine):
    with pg_engine.connect() as caller:
        caller.begin()
        request_id = request_backfill(caller, "orders", [DAY], reason="r")
        with pg_engine.begin() as sensor:
            assert Outbox(DATABASE_CLOCK).claim_pending(sensor, 10) == []
        caller.commit()

    with pg_engine.begin() as sensor:
        assert [request.id for request in Outbox(DATABASE_CLOCK).claim_pending(sensor, 10)] == [
            request_id
        ]


def test_request_backfill_refuses_a_connection_without_a_transaction(engine):
    with engine.connect() as connection, pytest.raises(InvalidRequest, match=r"engine\.begin"):
        request_backfill(connection, "orders", [DAY], reason="r")


def test_request_backfill_without_the_outbox_table_raises_a_clear_error(warehouse_url):
    engine = warehouse_engine(warehouse_url)  # `jobs-platform db upgrade` never ran on it

    with (
        pytest.raises(OutboxNotInstalled, match="run: jobs-platform db upgrade"),
        engine.begin() as connection,
    ):
        request_backfill(connection, "orders", [DAY], reason="r")

    assert not sa.inspect(engine).has_table("jp_outbox")  # and it created none


@pytest.mark.parametrize(
    ("asset", "partitions", "kwargs", "message"),
    [
        ("", [DAY], {}, "asset must be a non-empty string"),
        (" orders", [DAY], {}, "must not start or end with whitespace"),
        ("x" * 256, [DAY], {}, "asset must be at most 255 characters"),
        ("orders", DAY, {}, "partitions must be a list of partition keys, got str"),
        ("orders", [], {}, "at least one partition"),
        ("orders", [20240103], {}, r"partitions\[0\] must be a non-empty string"),
        ("orders", ["2024-01-03\n"], {}, "control characters"),
        ("orders", ["d"] * (MAX_PARTITIONS_PER_REQUEST + 1), {}, "at most 500 partitions"),
        ("orders", [DAY], {"reason": ""}, "reason must be a non-empty string"),
        ("orders", [DAY], {"reason": "r" * 1001}, "reason must be at most 1000"),
        ("orders", [DAY], {"correlation_id": ""}, "correlation_id must be a non-empty string"),
    ],
)
def test_enqueue_refuses_what_can_never_be_a_request(
    sqlite_url, asset, partitions, kwargs, message
):
    engine = upgraded_warehouse(sqlite_url)
    kwargs = {"reason": "r", **kwargs}

    with pytest.raises(ValueError, match=message), engine.begin() as connection:
        request_backfill(connection, asset, partitions, **kwargs)


def test_repeated_partition_keys_are_requested_once(engine):
    request_id = enqueue(engine, partitions=[DAY, "2024-01-04", DAY])

    assert json.loads(stored(engine, request_id).partitions) == [DAY, "2024-01-04"]


def test_request_launches_one_run_with_the_request_id_as_run_key(engine, instance):
    request_id = enqueue(engine, correlation_id="inv-7")

    result = tick(instance)

    [run] = result.run_requests
    assert (run.run_key, run.partition_key) == (str(request_id), DAY)
    # The asset and the backfills it feeds, so each day's revenue is computed with it.
    assert run.asset_selection == [orders.key, dg.AssetKey("daily_revenue")]
    assert our_tags(run) == {CORRELATION_TAG: "inv-7", REQUEST_ID_TAG: str(request_id)}
    row = stored(engine, request_id)
    assert (row.status, row.error) == ("claimed", None)  # launched once its run exists
    assert row.claimed_at is not None and row.launched_at is None


def test_a_launched_request_is_never_requested_again(engine, instance):
    enqueue(engine)
    [run] = tick(instance).run_requests
    record_requested_run(instance, run)
    tick(instance)  # finds the run: launched

    later = tick(instance)

    assert later.run_requests == []
    assert later.skip_message == "no pending backfill requests"


def test_a_request_whose_runs_never_reached_dagster_is_requested_again_next_tick(engine, instance):
    request_id = enqueue(engine)
    tick(instance)  # the tick's result is lost: the daemon died or the tick timed out

    again = tick(instance)

    assert [run.run_key for run in again.run_requests] == [str(request_id)]
    assert stored(engine, request_id).status == "claimed"


def test_a_request_is_marked_launched_on_the_tick_after_its_run_exists(engine, instance):
    request_id = enqueue(engine)
    [run] = tick(instance).run_requests
    record_requested_run(instance, run)

    later = tick(instance)

    assert later.run_requests == []
    row = stored(engine, request_id)
    assert (row.status, row.run_key) == ("launched", str(request_id))
    assert row.launched_at is not None


def test_a_run_created_but_never_submitted_is_requested_again(engine, instance):
    request_id = enqueue(engine)
    [run] = tick(instance).run_requests
    record_requested_run(instance, run, status=dg.DagsterRunStatus.NOT_STARTED)

    [again] = tick(instance).run_requests

    assert again.run_key == str(request_id)  # the daemon launches the created run for it
    assert stored(engine, request_id).status == "claimed"


def test_only_the_partitions_without_a_run_are_requested_again(engine, instance):
    request_id = enqueue(engine, partitions=["2024-01-02", DAY])
    first, _lost = tick(instance).run_requests
    record_requested_run(instance, first)

    [again] = tick(instance).run_requests

    assert again.run_key == f"{request_id}:{DAY}"
    assert stored(engine, request_id).status == "claimed"


def test_a_request_naming_several_partitions_gets_one_run_per_partition(engine, instance):
    request_id = enqueue(engine, partitions=["2024-01-02", DAY], correlation_id="c")

    runs = tick(instance).run_requests

    assert [(run.run_key, run.partition_key) for run in runs] == [
        (f"{request_id}:2024-01-02", "2024-01-02"),
        (f"{request_id}:{DAY}", DAY),
    ]
    assert all(our_tags(run)[REQUEST_ID_TAG] == str(request_id) for run in runs)


def test_a_request_without_a_correlation_id_gets_one_naming_the_request(engine, instance):
    request_id = enqueue(engine)

    [run] = tick(instance).run_requests

    assert run.tags[CORRELATION_TAG] == f"outbox-{request_id}"


@pytest.mark.parametrize("requests", [1, 2 * REQUESTS_PER_TICK + 5])
def test_concurrent_claimers_split_the_pending_requests_between_them(pg_engine, requests):
    ids = [enqueue(pg_engine) for _ in range(requests)]
    barrier = threading.Barrier(2)
    claimed: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def sensor_process(slot: int) -> None:
        # Each thread stands for a sensor process with its own warehouse connection.
        try:
            barrier.wait(timeout=30)
            while True:
                with pg_engine.begin() as connection:
                    batch = Outbox(DATABASE_CLOCK).claim_pending(connection, REQUESTS_PER_TICK)
                if not batch:
                    return
                claimed[slot].extend(request.id for request in batch)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=sensor_process, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    assert sorted(claimed[0] + claimed[1]) == ids  # each exactly once


def test_a_claimed_batch_is_skipped_by_other_claimers_not_waited_for(pg_engine):
    first, second = enqueue(pg_engine), enqueue(pg_engine)
    with pg_engine.connect() as holder:
        holder.begin()
        assert [request.id for request in Outbox(DATABASE_CLOCK).claim_pending(holder, 1)] == [
            first
        ]
        with pg_engine.connect() as other:
            other.begin()
            # Waiting on the held row would hit this and raise instead of skipping it.
            other.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
            assert [request.id for request in Outbox(DATABASE_CLOCK).claim_pending(other, 10)] == [
                second
            ]
            other.commit()
        holder.commit()


def test_a_claimed_request_is_claimed_again_until_it_is_marked(engine):
    request_id = enqueue(engine)
    with engine.begin() as connection:
        [claimed] = Outbox(DATABASE_CLOCK).claim_pending(
            connection, 10
        )  # then the tick dies: never marked

    with engine.begin() as connection:
        assert Outbox(DATABASE_CLOCK).claim_pending(connection, 10) == []
        [again] = Outbox(DATABASE_CLOCK).reclaim_unlaunched(connection, 10)
        assert again.id == request_id and again.claimed_at >= claimed.claimed_at
        assert Outbox(DATABASE_CLOCK).mark_launched(connection, request_id, str(request_id))
        # A slower tick's late verdict changes nothing.
        assert not mark_rejected(connection, request_id, "too late")
        assert Outbox(DATABASE_CLOCK).reclaim_unlaunched(connection, 10) == []

    assert stored(engine, request_id).status == "launched"


def test_reclaims_take_the_longest_claimed_request_first(engine):
    first, second = enqueue(engine), enqueue(engine)
    with engine.begin() as connection:
        Outbox(DATABASE_CLOCK).claim_pending(connection, 10)

    with engine.begin() as connection:
        [taken] = Outbox(DATABASE_CLOCK).reclaim_unlaunched(connection, 1)
    with engine.begin() as connection:
        [then] = Outbox(DATABASE_CLOCK).reclaim_unlaunched(connection, 1)

    assert (taken.id, then.id) == (first, second)  # a request whose runs never appear rotates


def _set_schema_version(engine: sa.Engine, request_id: int) -> None:
    with engine.begin() as connection:
        connection.execute(
            sa.update(outbox).where(outbox.c.id == request_id).values(schema_version=2)
        )


def _set_partitions_text(engine: sa.Engine, request_id: int) -> None:
    with engine.begin() as connection:
        connection.execute(
            sa.update(outbox).where(outbox.c.id == request_id).values(partitions='{"day": 1')
        )


@pytest.mark.parametrize(
    ("asset", "partitions", "tamper", "reason"),
    [
        ("outbox_health", [DAY], None, "asset 'outbox_health' is not a backfill"),
        ("orders", ["2024-02-30"], None, "unknown partition key(s) of 'orders': '2024-02-30'"),
        ("orders", [DAY, "2023-12-31"], None, "'2023-12-31' (1 of 2)"),
        ("customer_order_history", ["a...b"], None, "invalid dynamic partition key(s)"),
        ("orders", [DAY], _set_schema_version, "unknown schema_version 2"),
        ("orders", [DAY], _set_partitions_text, "invalid partitions: partitions is not valid JSON"),
    ],
)
def test_an_invalid_request_is_rejected_with_the_reason_and_never_retried(
    engine, instance, asset, partitions, tamper, reason
):
    request_id = enqueue(engine, asset=asset, partitions=partitions)
    if tamper:
        tamper(engine, request_id)  # written by another producer, or by hand

    result = tick(instance)

    assert result.run_requests == []
    assert result.dynamic_partitions_requests == []
    row = stored(engine, request_id)
    assert row.status == "rejected"
    assert reason in row.error
    far_later = utcnow() + dt.timedelta(days=30)
    with engine.begin() as connection:
        assert Outbox(ManualClock(far_later)).claim_pending(connection, 10) == []
        assert Outbox(ManualClock(far_later)).reclaim_unlaunched(connection, 10) == []
    assert tick(instance).run_requests == []


def test_a_request_for_an_asset_no_loaded_location_serves_stays_pending_and_counted(
    engine, instance, capsys
):
    request_id = enqueue(engine, asset="campaign_spend")

    result = tick(instance)

    assert result.run_requests == []
    assert stored(engine, request_id).status == "pending"  # for the location that serves it
    with engine.connect() as connection:
        assert (
            OutboxBacklog(DATABASE_CLOCK).queue_stats(connection).pending == 1
        )  # the metric and its alert see it
    capsys.readouterr()
    assert main(["outbox", "list", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["status"]) == (request_id, "pending")
    # The bundled location's health counts its own backfills' requests: none.
    health = dg.materialize([outbox_health], instance=instance, resources=dict(defs.resources))
    [materialization] = health.get_asset_materialization_events()
    assert materialization.materialization.metadata["pending_count"].value == 0


def test_a_new_customer_key_is_added_as_a_dynamic_partition_then_resynced(platform_env):
    engine = engine_from(platform_env)
    seed_example_orders(platform_env["JOBS_PLATFORM_LANDING"])
    customer = str(busiest_customers(platform_env["JOBS_PLATFORM_LANDING"], 1)[0])
    request_id = enqueue(engine, asset="customer_order_history", partitions=[customer])

    with dg.DagsterInstance.get() as instance:
        result = tick(instance)
        [added] = result.dynamic_partitions_requests
        assert (added.partitions_def_name, list(added.partition_keys)) == ("customers", [customer])
        [run] = result.run_requests
        assert (run.run_key, run.partition_key) == (str(request_id), customer)
        # What the daemon does with the tick's result: add the keys, then launch the run.
        instance.add_dynamic_partitions(added.partitions_def_name, added.partition_keys)
        run_result = materialize(
            [customer_order_history], customer, instance=instance, tags=our_tags(run)
        )

        assert run_result.success
        with engine.connect() as connection:
            rows = connection.execute(sa.select(customer_order_history_table)).all()
        assert rows and {row.customer_id for row in rows} == {int(customer)}
        # A key that exists already is not added again.
        enqueue(engine, asset="customer_order_history", partitions=[customer])
        assert tick(instance).dynamic_partitions_requests == []


def test_the_correlation_id_is_on_the_run_and_in_the_attempt_history(platform_env, instance):
    engine = engine_from(platform_env)
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], dt.date(2024, 1, 3), dt.date(2024, 1, 3))
    enqueue(engine, correlation_id="ticket-42")
    [run] = tick(instance).run_requests

    result = materialize([orders], run.partition_key, instance=instance, tags=our_tags(run))

    assert result.success
    assert result.dagster_run.tags[CORRELATION_TAG] == "ticket-42"
    history = attempts_of(engine, "orders", DAY)
    assert [row.correlation_id for row in history] == ["ticket-42"]


def test_a_request_whose_run_fails_terminally_ends_in_the_dead_letter(platform_env, instance):
    engine = engine_from(platform_env)
    day = dt.date(2024, 1, 3)
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], day, day, poison_days=[day])
    request_id = enqueue(engine, correlation_id="ticket-43")
    [run] = tick(instance).run_requests

    result = materialize(
        [orders], run.partition_key, instance=instance, tags={**run.tags, RUN_KEY_TAG: run.run_key}
    )
    tick(instance)

    assert not result.success
    assert result.dagster_run.tags[REQUEST_ID_TAG] == str(request_id)
    with engine.connect() as connection:
        entry = active_entry(connection, "orders", DAY)
    assert entry is not None and entry.error_class == "terminal"
    assert [row.correlation_id for row in attempts_of(engine, "orders", DAY)] == ["ticket-43"]
    assert stored(engine, request_id).status == "launched"  # the dead letter owns it now


def test_queue_stats_counts_each_status_and_ages_the_oldest_pending(engine):
    oldest, waiting, to_launch, to_reject, _still_claimed = (enqueue(engine) for _ in range(5))
    with engine.begin() as connection:
        Outbox(DATABASE_CLOCK).claim_pending(connection, 10)
        Outbox(DATABASE_CLOCK).mark_launched(connection, to_launch, str(to_launch))
        mark_rejected(connection, to_reject, "unknown asset")
        # Two back to pending, as if they had never been claimed.
        connection.execute(
            sa.update(outbox)
            .where(outbox.c.id.in_([oldest, waiting]))
            .values(status=OutboxStatus.PENDING, claimed_at=None)
        )
    created = stored(engine, oldest).created_at

    with engine.connect() as connection:
        stats = OutboxBacklog(ManualClock(created + dt.timedelta(seconds=90))).queue_stats(
            connection
        )

    assert (stats.pending, stats.claimed, stats.launched, stats.rejected) == (2, 1, 1, 1)
    assert stats.oldest_pending_age_seconds == pytest.approx(90, abs=1)


def test_outbox_health_shows_the_queue_and_warns_when_a_request_waits_too_long(engine, instance):
    enqueuing = time.monotonic()
    request_id = enqueue(engine)
    fresh = dg.materialize([outbox_health], instance=instance, resources=dict(defs.resources))
    since_enqueuing = time.monotonic() - enqueuing
    with engine.begin() as connection:
        connection.execute(
            sa.update(outbox)
            .where(outbox.c.id == request_id)
            .values(created_at=utcnow() - dt.timedelta(seconds=STALE_PENDING_SECONDS + 60))
        )
    stale = dg.materialize([outbox_health], instance=instance, resources=dict(defs.resources))

    [materialization] = fresh.get_asset_materialization_events()
    metadata = {k: v.value for k, v in materialization.materialization.metadata.items()}
    assert metadata["pending_count"] == 1
    # Its age counts from the enqueue (round to the millisecond), however slow the machine.
    assert 0 <= metadata["oldest_pending_age_seconds"] <= since_enqueuing + 0.001
    assert (metadata["claimed_count"], metadata["launched_count"], metadata["rejected_count"]) == (
        0,
        0,
        0,
    )
    [fresh_check] = fresh.get_asset_check_evaluations()
    [stale_check] = stale.get_asset_check_evaluations()
    assert fresh_check.check_name == HEALTH_CHECK_NAME
    assert (fresh_check.passed, stale_check.passed) == (True, False)
    assert "backfill_request_sensor" in stale_check.description


def test_outbox_list_json_has_the_contract_fields(engine, capsys):
    request_id = enqueue(engine, correlation_id="inv-7", reason="invoice 7 corrected")
    capsys.readouterr()

    assert main(["outbox", "list", "--json"]) == 0

    [listed] = json.loads(capsys.readouterr().out)
    assert list(listed) == [
        "id", "asset", "partitions", "status", "reason", "correlation_id", "created_at", "error",
    ]  # fmt: skip
    assert listed["id"] == request_id
    assert (listed["asset"], listed["partitions"], listed["status"]) == ("orders", [DAY], "pending")
    assert (listed["reason"], listed["correlation_id"], listed["error"]) == (
        "invoice 7 corrected",
        "inv-7",
        None,
    )
    assert dt.datetime.fromisoformat(listed["created_at"]).tzinfo is not None


def test_outbox_list_ends_with_a_summary_of_the_backlog(engine, capsys):
    enqueue(engine)
    capsys.readouterr()

    assert main(["outbox", "list"]) == 0

    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith("1 pending (oldest pending ")
    assert last_line.endswith("0 claimed, 0 launched, 0 rejected")


def test_request_backfill_imports_without_dagster():
    code = (
        "import sys; from jobs_platform import request_backfill; "
        "assert 'dagster' not in sys.modules, 'dagster was imported'"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
