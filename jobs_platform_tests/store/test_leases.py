"""Specifications of fenced leases: one owner at a time, and a stale owner cannot commit."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import subprocess
import sys
import threading

import pytest
import sqlalchemy as sa

from jobs_platform.errors import LeaseLostError
from jobs_platform.store.clock import DATABASE_CLOCK, Clock
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.holders import HolderIdentity
from jobs_platform.store.leases import (
    Grant,
    LeaseBusy,
    Leases,
    holder_is_dead,
    release_lease,
    this_holder,
)
from jobs_platform.store.schema import leases, utcnow
from jobs_platform_tests.clocks import ManualClock

ASSET, PARTITION = "items", "2024-01-03"
TTL = 30.0
LONG_TTL = 3600.0
SHORT_TTL = 1.0


@pytest.fixture
def warehouse(upgraded_url) -> sa.Engine:
    engine = warehouse_engine(upgraded_url)
    return engine


@pytest.fixture
def clock() -> ManualClock:
    """Lease time that the test moves by hand: expiry without sleeping."""
    return ManualClock()


def acquire(
    engine: sa.Engine,
    holder: str,
    ttl: float = TTL,
    partition=PARTITION,
    clock: Clock = DATABASE_CLOCK,
) -> Grant:
    return Leases(engine, clock).acquire(
        ASSET, partition, holder=holder, run_id=None, ttl_seconds=ttl
    )


def expires_in(engine: sa.Engine) -> float:
    """Seconds until the partition's lease expires, as stored."""
    with engine.connect() as connection:
        expires_at = connection.execute(
            sa.select(leases.c.expires_at).where(leases.c.partition == PARTITION)
        ).scalar_one()
    return (expires_at - utcnow()).total_seconds()


def holder_of(pid: int, start_ticks: str | None = None) -> str:
    """The holder id `this_holder()` gives the process `pid` (started at `start_ticks`)."""
    if start_ticks is None:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            start_ticks = stat.read().rsplit(")", 1)[1].split()[19]
    here = HolderIdentity.parse(this_holder())
    return str(dataclasses.replace(here, pid=pid, start_ticks=start_ticks))


# Tokens and ownership


def test_tokens_strictly_increase_across_acquisitions(warehouse, clock):
    tokens = []
    for _ in range(3):
        grant = acquire(warehouse, this_holder(), clock=clock)
        tokens.append(grant.lease.token)
        with warehouse.begin() as connection:
            release_lease(connection, grant.lease)
    tokens.append(acquire(warehouse, this_holder(), ttl=SHORT_TTL, clock=clock).lease.token)
    clock.advance(SHORT_TTL)
    tokens.append(acquire(warehouse, "other-host:1:1", clock=clock).lease.token)

    assert tokens == sorted(set(tokens))
    assert len(tokens) == 5


def test_tokens_are_counted_per_partition(warehouse):
    first = acquire(warehouse, this_holder(), partition="2024-01-01")

    second = acquire(warehouse, this_holder(), partition="2024-01-02")

    assert first.lease.token == second.lease.token == 1


def test_live_lease_makes_a_second_acquisition_busy(warehouse):
    acquire(warehouse, "worker-a")

    with pytest.raises(LeaseBusy) as busy:
        acquire(warehouse, "worker-b")

    assert busy.value.holder == "worker-a"
    assert 0 < busy.value.seconds_left <= TTL


def test_live_lease_of_this_very_process_is_busy_too(warehouse):
    acquire(warehouse, this_holder())

    with pytest.raises(LeaseBusy):
        acquire(warehouse, this_holder())


def test_expired_lease_is_taken_over_with_a_new_token(warehouse, clock):
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)

    new = acquire(warehouse, "worker-b", clock=clock)

    assert new.lease.token > old.lease.token
    assert new.abandoned_by == "worker-a"


def test_old_token_cannot_commit_after_a_takeover_and_its_writes_roll_back(warehouse, clock):
    notes = sa.Table("notes", sa.MetaData(), sa.Column("text", sa.Text))
    notes.create(warehouse)
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)
    acquire(warehouse, "worker-b", clock=clock)

    with pytest.raises(LeaseLostError, match="lost"), warehouse.begin() as connection:
        connection.execute(sa.insert(notes).values(text="written by the stale worker"))
        Leases(connection.engine, clock).fence(connection, old.lease, TTL)

    with warehouse.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(notes)).scalar() == 0


def test_fence_refuses_an_expired_lease_even_before_a_takeover(warehouse, clock):
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)

    with pytest.raises(LeaseLostError), warehouse.begin() as connection:
        Leases(connection.engine, clock).fence(connection, old.lease, TTL)


def test_fence_succeeds_for_the_owner_and_extends_the_lease(warehouse):
    grant = acquire(warehouse, "worker-a", ttl=TTL)

    with warehouse.begin() as connection:
        Leases(connection.engine, DATABASE_CLOCK).fence(connection, grant.lease, LONG_TTL)

    assert TTL < expires_in(warehouse) <= LONG_TTL


def test_fence_and_release_frees_the_partition_of_its_owner(warehouse):
    first = acquire(warehouse, "worker-a")
    with warehouse.begin() as connection:
        Leases(connection.engine, DATABASE_CLOCK).fence_and_release(connection, first.lease)

    second = acquire(warehouse, "worker-b")

    assert (second.lease.token, second.abandoned_by) == (first.lease.token + 1, None)


def test_fence_and_release_by_a_stale_token_rolls_back_and_frees_nothing(warehouse, clock):
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)
    new = acquire(warehouse, "worker-b", clock=clock)

    with pytest.raises(LeaseLostError, match="lost"), warehouse.begin() as connection:
        Leases(connection.engine, clock).fence_and_release(connection, old.lease)

    with pytest.raises(LeaseBusy):
        acquire(warehouse, "worker-c", clock=clock)
    assert new.lease.token == old.lease.token + 1


def test_renew_extends_the_lease_of_its_owner(warehouse):
    grant = acquire(warehouse, "worker-a", ttl=TTL)

    renewed = Leases(warehouse, DATABASE_CLOCK).renew(grant.lease, LONG_TTL)

    assert renewed is True
    assert TTL < expires_in(warehouse) <= LONG_TTL


def test_renew_does_not_revive_an_expired_lease(warehouse, clock):
    grant = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)

    assert Leases(warehouse, clock).renew(grant.lease, LONG_TTL) is False
    assert acquire(warehouse, "worker-b", clock=clock).lease.token == grant.lease.token + 1


def test_renew_reports_a_lease_lost_to_a_takeover(warehouse, clock):
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)
    acquire(warehouse, "worker-b", clock=clock)

    assert Leases(warehouse, clock).renew(old.lease, TTL) is False


def test_release_lets_another_worker_acquire_at_once(warehouse):
    first = acquire(warehouse, "worker-a")
    with warehouse.begin() as connection:
        release_lease(connection, first.lease)

    second = acquire(warehouse, "worker-b")

    assert second.lease.token == first.lease.token + 1
    assert second.abandoned_by is None


def test_release_by_a_stale_token_does_not_free_the_new_owners_lease(warehouse, clock):
    old = acquire(warehouse, "worker-a", ttl=SHORT_TTL, clock=clock)
    clock.advance(SHORT_TTL)
    acquire(warehouse, "worker-b", clock=clock)

    with warehouse.begin() as connection:
        release_lease(connection, old.lease)

    with pytest.raises(LeaseBusy):
        acquire(warehouse, "worker-c", clock=clock)


def test_unexpired_lease_of_a_dead_process_on_this_host_is_taken_over(warehouse):
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    dead_holder = holder_of(process.pid)
    process.communicate(timeout=30)
    acquire(warehouse, dead_holder)

    grant = acquire(warehouse, "worker-b")

    assert grant.abandoned_by == dead_holder


def test_racing_acquisitions_have_exactly_one_winner(warehouse):
    contenders = 6
    barrier = threading.Barrier(contenders)
    outcomes: list[object] = []
    lock = threading.Lock()

    def contend(number: int) -> None:
        barrier.wait()
        try:
            outcome: object = acquire(warehouse, f"worker-{number}")
        except LeaseBusy as busy:
            outcome = busy
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    grants = [outcome for outcome in outcomes if isinstance(outcome, Grant)]
    assert len(outcomes) == contenders
    assert len(grants) == 1
    assert grants[0].lease.token == 1


def _contend_in_a_process(url: str, holder: str, barrier, results) -> None:
    engine = warehouse_engine(url)
    with engine.connect():
        pass  # connected before the start, so that the race is on the lease alone
    barrier.wait()
    try:
        results.put(acquire(engine, holder).lease.token)
    except LeaseBusy:
        results.put("busy")


def test_racing_processes_on_postgresql_have_exactly_one_winner(upgraded_pg_url):
    context = multiprocessing.get_context("fork")  # fast: the modules are already loaded
    contenders = 4
    barrier, results = context.Barrier(contenders), context.Queue()
    processes = [
        context.Process(
            target=_contend_in_a_process, args=(upgraded_pg_url, f"w{n}", barrier, results)
        )
        for n in range(contenders)
    ]
    for process in processes:
        process.start()

    outcomes = sorted(str(results.get(timeout=60)) for _ in processes)
    for process in processes:
        process.join(timeout=60)

    assert outcomes == ["1", "busy", "busy", "busy"]
    assert [process.exitcode for process in processes] == [0] * contenders


# Who is dead


def test_holder_of_an_exited_process_on_this_host_is_dead():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    holder = holder_of(process.pid)
    assert holder_is_dead(holder) is False  # while it runs

    process.communicate(timeout=30)

    assert holder_is_dead(holder) is True


def test_holder_of_this_process_is_alive():
    assert holder_is_dead(this_holder()) is False


def test_this_holder_names_host_pid_and_start_time():
    assert this_holder() == holder_of(os.getpid())


def test_holder_whose_pid_now_runs_another_process_is_dead():
    recycled = holder_of(os.getpid(), start_ticks="1")

    assert holder_is_dead(recycled) is True


def test_holder_on_another_host_is_never_judged_dead():
    here = HolderIdentity.parse(this_holder())

    elsewhere = dataclasses.replace(here, host="some-other-host", pid=999999, start_ticks="1")

    assert holder_is_dead(str(elsewhere)) is False


@pytest.mark.parametrize("field", ["boot_id", "pid_namespace"])
def test_holder_of_another_boot_or_pid_namespace_is_never_judged_dead(field):
    here = HolderIdentity.parse(this_holder())

    elsewhere = dataclasses.replace(here, pid=999999, start_ticks="1", **{field: "other"})

    assert holder_is_dead(str(elsewhere)) is False


def test_holder_id_without_boot_and_namespace_is_never_judged_dead():
    # Written by an earlier version (host:pid:ticks): not provably here, so it expires.
    assert holder_is_dead(f"{socket.gethostname()}:999999:1") is False


@pytest.mark.parametrize("holder", ["worker-a", "host:not-a-pid:1", ""])
def test_holder_that_is_not_a_process_id_is_never_judged_dead(holder):
    assert holder_is_dead(holder) is False
