"""Overlapping, paused, hung and crashed workers never double-apply or lose work.

Real `dagster job execute` processes, real signals, real databases.
"""

from __future__ import annotations

import datetime as dt
import os
import signal

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.orchestration.recovery import GRACE_LEASES, abandoned_run_sensor
from jobs_platform.store.schema import attempts, checkpoints, leases, quarantine
from jobs_platform_tests.clocks import database_now, lease_has_expired
from jobs_platform_tests.commands import start_run, stop_between_transactions, stop_while_asleep
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materializations_metadata
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 3, 1)
PARTITION = DAY.isoformat()
ORDERS = 200
CHUNK_ROWS = 50  # four chunks
# How long a test may wait for a run it started to reach a given point, or for a lease to
# expire: a `dagster job execute` starting on a loaded two-core machine, with margin.
REACH_SECONDS = 120
# A failpoint pause in which the test freezes (SIGSTOP) a run it saw commit the chunk
# before it: 50 times the 0.1 s the test polls at. Too short shows up as a frozen run past
# its pause (an assertion fails), never as a pass. A pause is measured on the monotonic
# clock, so a run resumed after the pause's end goes on at once: a longer one only costs.
PAUSE_SECONDS = 5


def seed(env) -> None:
    seed_orders(env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=ORDERS)


def orders_attempts(env) -> list[sa.Row]:
    with engine_from(env).connect() as connection:
        return list(
            connection.execute(
                sa.select(attempts)
                .where(attempts.c.asset == "orders", attempts.c.partition == PARTITION)
                .order_by(attempts.c.id)
            )
        )


def committed_chunks(env) -> list[sa.Row]:
    with engine_from(env).connect() as connection:
        return list(
            connection.execute(
                sa.select(checkpoints.c.chunk_index, checkpoints.c.token).where(
                    checkpoints.c.asset == "orders", checkpoints.c.partition == PARTITION
                )
            )
        )


def assert_tables_equal_one_clean_run(env) -> None:
    engine = engine_from(env)
    orders_rows = table_snapshot(engine, "orders")
    assert len(orders_rows) == ORDERS
    assert len({row[0] for row in orders_rows}) == ORDERS
    revenue = table_snapshot(engine, "daily_revenue")
    paid = [row for row in orders_rows if row[4] == "paid"]
    expected = {}
    for row in paid:
        total, count = expected.get(row[3], (0, 0))
        expected[row[3]] = (total + row[2], count + 1)
    assert {(row[1], row[2], row[3]) for row in revenue} == {
        (currency, total, count) for currency, (total, count) in expected.items()
    }


def finish(process, timeout: float = 120) -> int:
    try:
        return process.wait(timeout=timeout)
    except Exception:
        os.killpg(process.pid, signal.SIGKILL)
        raise


def snoozes_of(instance: dg.DagsterInstance, run_id: str) -> list[dg.EventLogRecord]:
    """The retries Dagster scheduled for a run's steps (a busy partition asks for one)."""
    return list(
        instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY).records
    )


def at(timestamp: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC)


def test_two_overlapping_runs_apply_the_partition_once_the_second_waiting(platform_env, tmp_path):
    seed(platform_env)
    # A pauses after chunk 1, and the test freezes it there until B has found the partition
    # busy, however long B takes to start. A's lease outlives the freeze (and is not renewed
    # before a third of it, so A is never frozen inside a renewal's transaction).
    holding = {
        **platform_env,
        "JOBS_PLATFORM_LEASE_SECONDS": str(3 * REACH_SECONDS),
        "JOBS_PLATFORM_FAILPOINTS": f"after_commit@orders#1=sleep:{PAUSE_SECONDS}*1",
    }
    first = start_run(
        holding, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True, log_path=tmp_path / "a.log"
    )
    wait_for(lambda: len(committed_chunks(platform_env)) >= 2, timeout=60, what="chunks 0, 1 of A")
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        assert len(committed_chunks(platform_env)) == 2, "A was frozen after its pause, not in it"
        [worker_run_id] = {row.run_id for row in orders_attempts(platform_env)}
        second = start_run(
            platform_env,
            PARTITION,
            chunk_rows=CHUNK_ROWS,
            in_process=True,
            log_path=tmp_path / "b.log",
        )
        with dg.DagsterInstance.get() as instance:
            [waiter_run_id] = wait_for(
                lambda: [
                    run.run_id
                    for run in instance.get_runs()
                    if run.run_id != worker_run_id and snoozes_of(instance, run.run_id)
                ],
                timeout=REACH_SECONDS,
                what="run B to find the partition busy while A holds it",
            )
        # B is frozen in its snooze until A's run has ended: its next look at the partition
        # comes after A's last lease (daily_revenue's) is gone, whenever its snooze ends.
        stop_while_asleep(second.pid, timeout=REACH_SECONDS)
        try:
            os.killpg(first.pid, signal.SIGCONT)
            assert finish(first) == 0, (tmp_path / "a.log").read_text()[-5000:]
        finally:
            os.killpg(second.pid, signal.SIGCONT)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGCONT)

    with dg.DagsterInstance.get() as instance:
        assert finish(second) == 0, (tmp_path / "b.log").read_text()[-5000:]
        worker = instance.get_run_record_by_id(worker_run_id)
        waiter = instance.get_run_record_by_id(waiter_run_id)
        snoozes = snoozes_of(instance, waiter_run_id)
        runs = materializations_metadata(instance, "orders", PARTITION)

    # The two runs were alive at the same time.
    assert max(worker.start_time, waiter.start_time) < min(worker.end_time, waiter.end_time)
    history = orders_attempts(platform_env)
    [working] = [row for row in history if row.run_id == worker_run_id]
    waiting = [row for row in history if row.run_id == waiter_run_id]
    # B was told to wait while A's attempt held the lease, and that cost it no attempt:
    # its only attempt began once A's had ended, and found nothing left to do.
    assert at(snoozes[0].timestamp) < working.ended_at
    assert [row.outcome for row in waiting] == ["succeeded"]
    assert waiting[0].started_at >= working.ended_at
    assert_tables_equal_one_clean_run(platform_env)
    assert sorted(run["chunks_written"] for run in runs) == [0, 4]
    # Every committed chunk carries the token of the one attempt that did the work.
    assert {row.token for row in committed_chunks(platform_env)} == {working.token}


def test_paused_holder_cannot_commit_after_another_took_over(pg_platform_env, tmp_path):
    seed(pg_platform_env)
    env = {
        **pg_platform_env,
        "JOBS_PLATFORM_LEASE_SECONDS": "2",
        # A pause after chunk 0 in which the test freezes A (its heartbeat goes on until then).
        "JOBS_PLATFORM_FAILPOINTS": f"after_commit@orders#0=sleep:{PAUSE_SECONDS}*1",
    }
    holder = start_run(
        env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True, log_path=tmp_path / "a.log"
    )
    engine = engine_from(pg_platform_env)
    wait_for(lambda: committed_chunks(pg_platform_env), timeout=60, what="chunk 0 of run A")
    # A long GC pause or a frozen VM, while A's heartbeat is not inside a renewal.
    stop_between_transactions(holder.pid, engine, timeout=10)
    try:
        assert len(committed_chunks(pg_platform_env)) == 1, "A was frozen after its pause"
        wait_for(
            lambda: lease_has_expired(engine, "orders", PARTITION),
            timeout=REACH_SECONDS,
            what="A's 2 s lease to expire on the database's clock",
        )
        taker = start_run(pg_platform_env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True)
        assert finish(taker) == 0
    finally:
        os.killpg(holder.pid, signal.SIGCONT)
    assert finish(holder) == 0, (tmp_path / "a.log").read_text()[-3000:]

    history = orders_attempts(pg_platform_env)
    assert history[0].error_class == "lease_lost"
    assert "lease" in history[0].message
    # A's token committed chunk 0 only; B's token committed the rest.
    by_chunk = {row.chunk_index: row.token for row in committed_chunks(pg_platform_env)}
    assert by_chunk[0] == history[0].token
    assert {by_chunk[i] for i in (1, 2, 3)} == {history[1].token}
    assert_tables_equal_one_clean_run(pg_platform_env)


def test_hung_attempt_loses_its_lease_at_the_deadline(pg_platform_env, tmp_path):
    seed(pg_platform_env)
    timeout_seconds = 2
    env = {
        **pg_platform_env,
        "JOBS_PLATFORM_LEASE_SECONDS": "1.5",
        "JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS": str(timeout_seconds),
        # Stalls past the deadline while its heartbeat thread is alive.
        "JOBS_PLATFORM_FAILPOINTS": "after_commit@orders#0=sleep:7*1",
    }
    stalled = start_run(
        env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True, log_path=tmp_path / "a.log"
    )
    engine = engine_from(pg_platform_env)
    wait_for(lambda: committed_chunks(pg_platform_env), timeout=60, what="chunk 0 of run A")
    [started] = [row.started_at for row in orders_attempts(pg_platform_env)]

    def deadline_passed_and_lease_expired() -> bool:
        past_deadline = database_now(engine) >= started + dt.timedelta(seconds=timeout_seconds)
        return past_deadline and lease_has_expired(engine, "orders", PARTITION)

    wait_for(
        deadline_passed_and_lease_expired,
        timeout=REACH_SECONDS,
        what="A's deadline to pass and its unrenewed lease to expire",
    )
    other = start_run(pg_platform_env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True)
    assert finish(other) == 0
    assert finish(stalled) == 0, (tmp_path / "a.log").read_text()[-3000:]

    stalled_attempt = orders_attempts(pg_platform_env)[0]
    assert (stalled_attempt.error_class, stalled_attempt.error_type) == (
        "retryable",
        "AttemptTimedOut",
    )
    tokens = {row.chunk_index: row.token for row in committed_chunks(pg_platform_env)}
    assert all(tokens[i] != stalled_attempt.token for i in (1, 2, 3))
    assert_tables_equal_one_clean_run(pg_platform_env)


@pytest.mark.parametrize("ceiling", [3])
def test_partition_that_always_kills_its_worker_is_quarantined_at_the_ceiling(
    pg_platform_env, ceiling
):
    seed(pg_platform_env)
    env = {
        **pg_platform_env,
        "JOBS_PLATFORM_MAX_ATTEMPTS": str(ceiling),
        "JOBS_PLATFORM_FAILPOINTS": "read@orders#1=crash",
    }

    assert finish(start_run(env, PARTITION, chunk_rows=CHUNK_ROWS)) != 0

    history = orders_attempts(pg_platform_env)
    assert [row.error_class for row in history] == ["crash"] * ceiling
    with engine_from(pg_platform_env).connect() as connection:
        entry = connection.execute(sa.select(quarantine)).one()
    assert (entry.partition, entry.attempts, entry.error_class) == (PARTITION, ceiling, "crash")


def test_run_whose_worker_was_killed_is_failed_and_the_partition_rerun_once(
    pg_platform_env, monkeypatch
):
    seed(pg_platform_env)
    lease_seconds = 2
    monkeypatch.setenv("JOBS_PLATFORM_LEASE_SECONDS", str(lease_seconds))  # the sensor's
    env = {
        **pg_platform_env,
        "JOBS_PLATFORM_LEASE_SECONDS": str(lease_seconds),
        "JOBS_PLATFORM_FAILPOINTS": "after_commit@orders#1=sleep:30",
    }
    victim = start_run(env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True)
    wait_for(lambda: len(committed_chunks(pg_platform_env)) >= 2, timeout=60, what="chunks 0 and 1")
    os.killpg(victim.pid, signal.SIGKILL)  # the run worker and its step process
    victim.wait()
    engine = engine_from(pg_platform_env)
    with engine.connect() as connection:
        lease_expiry = connection.execute(sa.select(leases.c.expires_at)).scalar_one()
    grace = dt.timedelta(seconds=lease_seconds * GRACE_LEASES)

    from orders_example.definitions import defs

    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.STARTED  # what Dagster alone leaves behind

        def tick_until_the_run_failed() -> bool:
            began = database_now(engine)
            context = dg.build_sensor_context(
                instance=instance, definitions=defs, resources=dict(defs.resources)
            )
            abandoned_run_sensor.evaluate_tick(context)
            [attempt] = orders_attempts(pg_platform_env)
            failed = instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
            # Within lease + grace + one tick of the kill, on the database's clock: a tick
            # that begins past the lease's expiry records the crash, and one that begins a
            # grace after the crash fails the run ...
            if began >= lease_expiry:
                assert attempt.error_class == "crash", f"a tick at {began} left {attempt}"
            if attempt.error_class == "crash" and began >= attempt.ended_at + grace:
                assert failed, f"a tick at {began}, a grace after the crash, left the run"
            # ... and not sooner: the grace is the run worker's to retry the step itself.
            if failed:
                assert database_now(engine) >= attempt.ended_at + grace
            return failed

        wait_for(tick_until_the_run_failed, timeout=30, interval=0.5, what="the run to be failed")

    history = orders_attempts(pg_platform_env)
    assert [row.error_class for row in history] == ["crash"]

    rerun = start_run(pg_platform_env, PARTITION, chunk_rows=CHUNK_ROWS, in_process=True)
    assert finish(rerun) == 0
    assert_tables_equal_one_clean_run(pg_platform_env)
    with dg.DagsterInstance.get() as instance:
        (metadata,) = materializations_metadata(instance, "orders", PARTITION)
    assert (metadata["chunks_resumed"], metadata["chunks_written"]) == (2, 2)
