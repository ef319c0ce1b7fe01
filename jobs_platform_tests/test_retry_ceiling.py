"""Retries honour the server's Retry-After, and the attempt ceiling holds across runs."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import signal
import threading
import time

import dagster as dg
import httpx
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.store.schema import attempts, quarantine
from jobs_platform_tests.commands import start_run
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import orders
from orders_example.orders.seed import seed_orders

RETRY_AFTER_SECONDS = 2

rates_metadata = sa.MetaData()
rates_table = sa.Table(
    "test_rates",
    rates_metadata,
    sa.Column("currency", sa.String(3), primary_key=True),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("rate", sa.Float, nullable=False),
)


class RateServer(http.server.ThreadingHTTPServer):
    """A real HTTP API that is rate-limited on the first call."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), RateHandler)
        self.request_times: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/rates"


class RateHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.request_times.append(time.monotonic())
        if len(self.server.request_times) == 1:
            self.send_response(429)
            self.send_header("Retry-After", str(RETRY_AFTER_SECONDS))
            self.end_headers()
            return
        body = json.dumps([{"currency": "EUR", "rate": 1.1}, {"currency": "GBP", "rate": 1.3}])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


RATE_API: dict[str, str] = {}


@backfill_asset(
    table=rates_table,
    partitions_def=dg.StaticPartitionsDefinition(["2024-01-01"]),
    partition_scope=lambda table, day: table.c.day == day,
)
def exchange_rates(source: PartitionInput):
    """Exchange rates of a day from an HTTP API (a test-only backfill)."""
    response = httpx.get(RATE_API["url"], timeout=5)
    response.raise_for_status()
    frame = pd.DataFrame(response.json())
    frame["day"] = source.partition_key
    yield frame


@pytest.fixture
def rate_server():
    server = RateServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    RATE_API["url"] = server.url
    yield server
    server.shutdown()


def test_http_429_waits_at_least_retry_after_before_the_next_attempt(platform_env, rate_server):
    result = materialize([exchange_rates], "2024-01-01")

    assert result.success
    first, second = rate_server.request_times
    assert second - first >= RETRY_AFTER_SECONDS
    with engine_from(platform_env).connect() as connection:
        classes = connection.execute(
            sa.select(attempts.c.error_class).order_by(attempts.c.id)
        ).scalars()
        assert list(classes) == ["retryable", None]
        assert connection.execute(sa.select(sa.func.count()).select_from(rates_table)).scalar() == 2


def test_attempt_ceiling_holds_across_runs(pg_platform_env, monkeypatch):
    """Runs that die, relaunches and op retries all draw from one budget of 3 attempts."""
    day = dt.date(2024, 4, 1)
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], day, day, orders_per_day=20)
    engine = engine_from(pg_platform_env)

    def attempt_classes() -> list:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    sa.select(attempts.c.error_class).order_by(attempts.c.id)
                ).scalars()
            )

    # Two runs whose workers die mid-attempt (as a run retry would then relaunch them).
    hanging = {**pg_platform_env, "JOBS_PLATFORM_FAILPOINTS": "read@orders=sleep:60"}
    for started in (1, 2):
        run = start_run(hanging, day.isoformat(), in_process=True)
        wait_for(lambda n=started: len(attempt_classes()) == n, timeout=60, what="an attempt")
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()

    # A third run with op retries allowed: its first attempt is the last of the budget.
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient")
    assert not materialize([orders], day.isoformat()).success
    # And relaunching once more does no work at all.
    assert not materialize([orders], day.isoformat()).success

    assert attempt_classes() == ["crash", "crash", "retryable"]
    with engine.connect() as connection:
        entry = connection.execute(sa.select(quarantine)).one()
    assert (entry.attempts, entry.error_class) == (3, "retryable")
