"""Specifications of the times on the framework's rows: the database's, whatever a host thinks.

A real process under `faketime` plays a worker whose clock runs ten minutes fast.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import textwrap

import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import attempts, outbox, quarantine
from jobs_platform_tests.clocks import database_now

# Records a failed attempt, quarantines the partition and requests a backfill, then prints
# its own idea of now.
_WORKER = textwrap.dedent(
    """
    import sys
    from jobs_platform.errors import Classification
    from jobs_platform.outbox import request_backfill
    from jobs_platform.store.attempts import AttemptFailure
    from jobs_platform.store.clock import DATABASE_CLOCK
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.engine.warehouse import Warehouse
    from jobs_platform.store.schema import utcnow

    store = Warehouse(warehouse_engine(sys.argv[1]), DATABASE_CLOCK)  # as a worker builds it
    with store.begin() as connection:
        attempt_id, _ = store.attempts.start(
            connection, asset="items", partition="2024-01-03", episode=1, run_id="r",
            step_retry=0, token=1, holder="fast-host", correlation_id=None,
        )
        failure = AttemptFailure(Classification.TERMINAL, "ValueError", "a poison row")
        store.attempts.finish(connection, attempt_id, failure)
        store.dead_letter.quarantine_partition(connection, "items", "2024-01-03", 1)
        request_backfill(connection, "items", ["2024-01-03"], reason="late rows")
    print(utcnow().isoformat(), flush=True)
    """
)

SKEW = dt.timedelta(minutes=10)


@pytest.fixture
def warehouse(upgraded_pg_url) -> sa.Engine:
    return warehouse_engine(upgraded_pg_url)


def run_ten_minutes_fast(url: str) -> dt.datetime:
    """Run the worker under a clock ten minutes ahead; returns the time it believed it was."""
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.fail("faketime is required for this test (.ci/run installs it)", pytrace=False)
    worker = subprocess.run(
        [faketime, "-f", "+10m", sys.executable, "-c", _WORKER, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dt.datetime.fromisoformat(worker.stdout.strip())


def test_attempt_quarantine_entry_and_request_of_a_fast_host_carry_the_databases_time(
    warehouse, upgraded_pg_url
):
    before = database_now(warehouse)
    worker_now = run_ten_minutes_fast(upgraded_pg_url)
    after = database_now(warehouse)
    with warehouse.connect() as connection:
        attempt = connection.execute(sa.select(attempts)).one()
        entry = connection.execute(sa.select(quarantine)).one()
        request = connection.execute(sa.select(outbox)).one()

    # A second of slack for the clocks' resolutions; without the skew it is 10 minutes out.
    assert before + SKEW - dt.timedelta(seconds=1) <= worker_now, "faketime did not shift it"
    stamps = {
        "attempt started_at": attempt.started_at,
        "attempt ended_at": attempt.ended_at,
        "entry quarantined_at": entry.quarantined_at,
        "entry last_failed_at": entry.last_failed_at,
        "outbox request created_at": request.created_at,
    }
    # Read on the database's clock between the two readings around the worker's run.
    assert {name: before <= at <= after for name, at in stamps.items()} == dict.fromkeys(
        stamps, True
    ), f"database's clock {before} to {after}, the worker's {worker_now}, stamps {stamps}"
