"""A source outage during a backfill: the circuit breaker, on real processes.

The test writes a team's own code location — daily orders read from an HTTP API, 200 days
— and backfills it in two real `dagster asset materialize` runs of 100 days each, at once,
on PostgreSQL. The API (a loopback server in the test) answers 503 for its first two
minutes, then each day's orders. The circuit for that cause opens after 5 partitions
failed; from then on both runs snooze, one probe at a time tries, and the probe after the
outage closes the circuit. The backfill then completes on its own: every day done once,
its rows exact, nothing quarantined, and the outage spent no partition's budget.

Run with `-s` to see the figures (wall time, attempts, snoozes, probes).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobs_platform.store.schema import attempts, circuit_failures, circuits, partitions, quarantine
from jobs_platform_tests.commands import DAGSTER, JOBS_PLATFORM, run_cli

MODULE = "ordersapi.defs"
ASSET = "api_orders"
OUTAGE_SECONDS = 120
FIRST_DAY = dt.date(2024, 1, 1)
DAYS = [FIRST_DAY + dt.timedelta(days=n) for n in range(200)]
ORDERS_PER_DAY = 5
CIRCUIT_PARTITIONS = 5

DEFS = '''\
import datetime as dt

import dagster as dg
import httpx
import pandas as pd
import sqlalchemy as sa
from jobs_platform import PartitionInput, backfill_asset, platform_definitions

metadata = sa.MetaData()
api_orders_table = sa.Table(
    "api_orders",
    metadata,
    sa.Column("day", sa.Date, nullable=False),
    sa.Column("order_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


class OrdersApi(dg.ConfigurableResource):
    """The orders service's HTTP API."""

    url: str


def of_day(table: sa.Table, day: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(day)


@backfill_asset(
    table=api_orders_table,
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-07-19"),
    partition_scope=of_day,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def api_orders(source: PartitionInput, api: OrdersApi):
    """A day's orders, from the orders API (an outage answers 503: retryable)."""
    response = httpx.get(f"{api.url}/orders", params={"day": source.partition_key}, timeout=10)
    response.raise_for_status()
    frame = pd.DataFrame(response.json(), columns=["order_id", "amount_cents"])
    yield frame.assign(day=dt.date.fromisoformat(source.partition_key))


defs = dg.Definitions.merge(
    platform_definitions([api_orders]),
    dg.Definitions(resources={"api": OrdersApi(url=dg.EnvVar("ORDERS_API_URL"))}),
)
'''


def day_orders(day: dt.date) -> list[dict]:
    first_id = int(day.strftime("%Y%m%d")) * 10
    return [{"order_id": first_id + n, "amount_cents": 100 + 17 * n} for n in range(ORDERS_PER_DAY)]


class OrdersApi(http.server.ThreadingHTTPServer):
    """An HTTP API that is down (503) for `down_for` seconds after `start()`, then serves."""

    def __init__(self, down_for: float):
        super().__init__(("127.0.0.1", 0), OrdersHandler)
        self.down_for = down_for
        self.started = time.monotonic()
        self.answers: dict[int, int] = {}
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> None:
        self.started = time.monotonic()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def count(self, status: int) -> None:
        with self.lock:
            self.answers[status] = self.answers.get(status, 0) + 1


class OrdersHandler(http.server.BaseHTTPRequestHandler):
    server: OrdersApi

    def do_GET(self):
        if time.monotonic() - self.server.started < self.server.down_for:
            self.server.count(503)
            self.send_response(503)
            self.end_headers()
            return
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        body = json.dumps(day_orders(dt.date.fromisoformat(query["day"][0]))).encode()
        self.server.count(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def location(tmp_path: Path, pg_url: str, api_url: str) -> dict[str, str]:
    package = tmp_path / "project" / "ordersapi"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(DEFS)
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "ORDERS_API_URL": api_url,
        "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.5",
        "JOBS_PLATFORM_LEASE_SECONDS": "15",
        "JOBS_PLATFORM_CIRCUIT_PARTITIONS": str(CIRCUIT_PARTITIONS),
        # Probes after 5 s, 10, 20, then every 20 s: a two-minute test, not a two-hour outage.
        "JOBS_PLATFORM_CIRCUIT_PROBE_SECONDS": "5",
        "JOBS_PLATFORM_CIRCUIT_PROBE_MAX_SECONDS": "20",
    }


def materialize(env: dict[str, str], home: Path, first: dt.date, last: dt.date):
    """`dagster asset materialize` of the days `first`…`last`, one run, its own instance."""
    home.mkdir()
    return subprocess.Popen(
        [
            DAGSTER, "asset", "materialize", "-m", MODULE, "--select", ASSET,
            "--partition-range", f"{first.isoformat()}...{last.isoformat()}",
        ],
        env={**os.environ, **env, "DAGSTER_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_two_minute_source_outage_quarantines_nothing_and_the_backfill_completes(
    pg_url, tmp_path
):
    api = OrdersApi(down_for=OUTAGE_SECONDS)
    env = location(tmp_path, pg_url, api.url)
    upgraded = run_cli([JOBS_PLATFORM, "db", "upgrade", "-m", MODULE], env)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr

    api.start()
    began = time.monotonic()
    runs = [
        materialize(env, tmp_path / "home_a", DAYS[0], DAYS[99]),
        materialize(env, tmp_path / "home_b", DAYS[100], DAYS[-1]),
    ]
    outputs = [run.communicate(timeout=420)[0] for run in runs]
    wall = time.monotonic() - began
    api.shutdown()

    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-4000:]
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    with engine.connect() as connection:
        entries = connection.execute(sa.select(sa.func.count()).select_from(quarantine))
        assert entries.scalar_one() == 0
        done = connection.execute(
            sa.select(partitions.c.partition).where(
                partitions.c.asset == ASSET, partitions.c.status == "done"
            )
        ).scalars()
        assert sorted(done) == [day.isoformat() for day in DAYS]
        successes = connection.execute(
            sa.select(attempts.c.partition, sa.func.count())
            .where(attempts.c.asset == ASSET, attempts.c.outcome == "succeeded")
            .group_by(attempts.c.partition)
        ).all()
        assert {count for _, count in successes} == {1} and len(successes) == len(DAYS)
        rows = connection.execute(
            sa.text("SELECT day, order_id, amount_cents FROM api_orders ORDER BY order_id")
        ).all()
        failed = connection.execute(
            sa.select(attempts.c.id, attempts.c.partition).where(
                attempts.c.asset == ASSET, attempts.c.outcome == "failed"
            )
        ).all()
        forgiven = set(
            connection.execute(
                sa.select(circuit_failures.c.attempt_id).where(circuit_failures.c.forgiven)
            ).scalars()
        )
        (circuit,) = connection.execute(sa.select(circuits)).all()
    expected = sorted(
        (day, order["order_id"], order["amount_cents"]) for day in DAYS for order in day_orders(day)
    )
    assert [tuple(row) for row in rows] == expected
    counted = [attempt for attempt in failed if attempt.id not in forgiven]
    tripping = {partition for _, partition in failed} - {circuit.probe_partition}
    probes = circuit.probes_failed + 1
    print(
        f"\noutage {OUTAGE_SECONDS} s, {len(DAYS)} partitions in 2 runs: wall {wall:.0f} s; "
        f"failed attempts {len(failed)} on {len({p for _, p in failed})} partitions "
        f"(counted against a budget: {len(counted)}); circuit opened {circuit.times_opened}x "
        f"on {circuit.partitions} partitions; snoozes {circuit.snoozes}; probes {probes} "
        f"({circuit.probes_failed} failed); API answers {api.answers}"
    )
    assert circuit.closed_at is not None and circuit.times_opened == 1
    assert counted == []  # the outage spent no partition's budget
    # The attempts the outage cost: the N that opened the circuit, one in flight in the
    # other run when it opened, and the failed probes; every other partition snoozed.
    assert len(failed) <= CIRCUIT_PARTITIONS + 1 + circuit.probes_failed
    assert len(tripping) <= CIRCUIT_PARTITIONS + 1 + circuit.probes_failed
