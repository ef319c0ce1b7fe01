"""A ranged step retries each partition after its own delay, as a step of its own would.

In-process where processes do not matter (a server's `Retry-After` on one partition of a
range), and through a real outage of the warehouse for the rest: `dagster job execute`
over a range, its connections to PostgreSQL through a TCP proxy that refuses them for 5 s,
with the default budget (5 attempts, 2 s base delay).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import threading
from collections import defaultdict

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.errors import RetryableError
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.store.schema import attempts, checkpoints, partitions, quarantine
from jobs_platform_tests.commands import default_signal_handlers, ranged_job_command
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import declared_rows
from jobs_platform_tests.tcp_proxy import TcpProxy
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import daily_partitions, orders_of_day
from orders_example.orders.landing import landing_file, read_order_chunks
from orders_example.orders.resources import LandingZone
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

FIRST = dt.date(2024, 8, 1)
DAYS = [FIRST + dt.timedelta(days=i) for i in range(4)]

retried_metadata = sa.MetaData()
retried_orders_table = orders_table.to_metadata(retried_metadata, name="retried_orders")
# Errors the next reads of a partition raise first (this process only: in-process runs).
FAULTS: dict[str, list[BaseException]] = defaultdict(list)


@backfill_asset(
    table=retried_orders_table,
    partitions_def=daily_partitions,
    partition_scope=orders_of_day,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def retried_orders(source: PartitionInput, landing: LandingZone):
    """Orders of a day, with faults the test injects per partition (a test-only asset)."""
    if FAULTS[source.partition_key]:
        raise FAULTS[source.partition_key].pop(0)
    path = landing_file(landing.resolved_root(), source.partition_key)
    yield from read_order_chunks(path, source.partition_key, source.chunk_rows)


def attempts_by_partition(engine: sa.Engine, asset: str) -> dict[str, list[sa.Row]]:
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(attempts).where(attempts.c.asset == asset).order_by(attempts.c.id)
        ).all()
    by_partition: dict[str, list[sa.Row]] = defaultdict(list)
    for row in rows:
        by_partition[row.partition].append(row)
    return by_partition


def test_a_retry_after_on_one_partition_of_a_range_is_honoured(platform_env):
    first, told, backing_off = (day.isoformat() for day in DAYS[:3])
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAYS[0], DAYS[2], orders_per_day=30)
    FAULTS.clear()
    FAULTS[told].append(RetryableError("429 Too Many Requests", retry_after=1.5))
    # Its own backoff (base 0.05 s in the tests) is far shorter than the server's 1.5 s.
    FAULTS[backing_off].extend([RetryableError("503"), RetryableError("503")])
    from orders_example.definitions import defs

    result = dg.materialize(
        [retried_orders],
        instance=dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        tags={PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: backing_off},
        raise_on_error=False,
    )

    assert result.success
    history = attempts_by_partition(engine_from(platform_env), "retried_orders")
    outcomes = {key: [(r.outcome, r.error_class) for r in rows] for key, rows in history.items()}
    assert outcomes == {
        first: [("succeeded", None)],  # done in the first try, not attempted again
        # No attempt spent early: failed once, attempted again only when due.
        told: [("failed", "retryable"), ("succeeded", None)],
        backing_off: [("failed", "retryable"), ("failed", "retryable"), ("succeeded", None)],
    }
    told_failed_at, told_retried_at = history[told][0].ended_at, history[told][1].started_at
    assert (told_retried_at - told_failed_at).total_seconds() >= 1.5
    # The partition with short delays was retried on its own time, before the told one.
    assert history[backing_off][2].started_at < told_retried_at
    rows = declared_rows(engine_from(platform_env), retried_orders_table)
    assert rows == [row for day in (first, told, backing_off) for row in _expected(day)]


def _expected(day: str) -> list[tuple]:
    return expected_tables_from_landing(os.environ["JOBS_PLATFORM_LANDING"], day)[0]


OUTAGE_SECONDS = 5.0
# Log timestamps are wall-clock; the rule runs on the monotonic clock.
CLOCK_SLACK_SECONDS = 0.05
# `JOBS_PLATFORM_TEST_OUTAGE_REPEATS=5` runs the outage five times (each on a fresh warehouse).
REPEATS = int(os.environ.get("JOBS_PLATFORM_TEST_OUTAGE_REPEATS", "1"))


@pytest.mark.parametrize("repetition", range(REPEATS))
def test_a_ranged_run_survives_a_warehouse_outage_with_the_default_budget(
    pg_platform_env, repetition
):
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    seed_orders(landing, DAYS[0], DAYS[-1], orders_per_day=200)
    direct = engine_from(pg_platform_env)
    with TcpProxy() as proxy:
        env = {
            **pg_platform_env,
            "JOBS_PLATFORM_DATABASE_URL": proxy.url(pg_platform_env["JOBS_PLATFORM_DATABASE_URL"]),
            # The defaults: 5 attempts, backoff from 2 s (the tests' own are shorter).
            "JOBS_PLATFORM_MAX_ATTEMPTS": "5",
            "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "2",
            # The second day's first attempt pauses after its first chunk: the outage
            # begins there, with one day done and three to go.
            "JOBS_PLATFORM_FAILPOINTS": f"after_commit@orders/{DAYS[1].isoformat()}#0=sleep:1*1",
            "JOBS_PLATFORM_LOG_FORMAT": "json",
        }
        run = subprocess.Popen(
            ranged_job_command(DAYS[0], DAYS[-1], chunk_rows=50),
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=default_signal_handlers,
        )
        chunk_0 = sa.select(sa.func.count()).where(checkpoints.c.partition == DAYS[1].isoformat())
        wait_for(
            lambda: _scalar(direct, chunk_0) >= 1, timeout=120, what="the second day's chunk 0"
        )
        proxy.cut()
        restore = threading.Timer(OUTAGE_SECONDS, proxy.restore)
        restore.start()
        try:
            output, _ = run.communicate(timeout=300)
        finally:
            restore.join()
    assert run.returncode == 0, output[-5000:]

    expected = [expected_tables_from_landing(landing, day.isoformat()) for day in DAYS]
    assert declared_rows(direct, orders_table) == [row for o, _ in expected for row in o]
    assert declared_rows(direct, daily_revenue_table) == [row for _, r in expected for row in r]
    assert _scalar(direct, sa.select(sa.func.count()).select_from(quarantine)) == 0
    statuses = sa.select(partitions.c.status).where(partitions.c.asset == "orders")
    with direct.connect() as connection:
        assert set(connection.execute(statuses).scalars()) == {"done"}
    with dg.DagsterInstance.get() as instance:
        (dagster_run,) = instance.get_runs()
        logs = instance.all_logs(dagster_run.run_id)
    tried_early, retried = tries_before_their_time(logs)
    assert retried, "the outage never reached the run"
    assert tried_early == []


def tries_before_their_time(logs) -> tuple[list[str], set[str]]:
    """From a run's JSON lifecycle lines: tries made before the delay their partition was
    told had passed, and the partitions that were told one. Same host: the step processes'
    clocks are one clock."""
    told: dict[str, tuple[float, float]] = {}  # partition → (when told, delay)
    early, retried = [], set()
    for entry in logs:
        if not entry.user_message.startswith("{"):
            continue
        line = json.loads(entry.user_message)
        key = f"{line['asset']}/{line['partition']}"
        if line["event"] == "retrying":
            told[key] = (entry.timestamp, float(line["delay_seconds"]))
            retried.add(key)
        elif line["event"] in ("started", "failed") and key in told:
            at, delay = told.pop(key)
            if entry.timestamp < at + delay - CLOCK_SLACK_SECONDS:
                early.append(f"{key} tried {entry.timestamp - at:.3f}s after told {delay}s")
    return early, retried


def _scalar(engine: sa.Engine, query) -> int:
    with engine.connect() as connection:
        return connection.execute(query).scalar_one()
