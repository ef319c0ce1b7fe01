"""Row factories: put a store table's rows in any state, directly, with sensible defaults.

Each factory inserts one row and returns its key, so a test states only what matters to it
("a lease-lost attempt", "an expired lease") and the store functions under test do the rest.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess

import sqlalchemy as sa

from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.store.attempts import next_attempt_number
from jobs_platform.store.holders import HolderIdentity, this_holder
from jobs_platform.store.schema import attempts, leases, partitions, quarantine

ASSET = "items"
PARTITION = "2024-01-03"

# A fixed moment, so that rows written by factories compare with a test's clock exactly.
AT = dt.datetime(2024, 1, 4, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)

_DEFAULT = object()


def an_attempt(
    connection: sa.Connection,
    *,
    asset: str = ASSET,
    partition: str = PARTITION,
    episode: int = 1,
    attempt: int | None = None,
    outcome: str = "failed",
    error_class: str | object | None = _DEFAULT,
    error_type: str | object | None = _DEFAULT,
    message: str | object | None = _DEFAULT,
    token: int | None = 1,
    holder: str = "worker-a",
    run_id: str | None = "run-1",
    started_at: dt.datetime = AT,
    ended_at: dt.datetime | object | None = _DEFAULT,
) -> int:
    """An attempt row; a failed `retryable` one unless told otherwise. Returns its id.

    Its number defaults to the next in its episode; a failed or succeeded attempt ends a
    second after it started, a running one has not ended.
    """
    failed = outcome == "failed"
    if error_class is _DEFAULT:
        error_class = "retryable" if failed else None
    if error_type is _DEFAULT:
        error_type = _error_type_of(error_class) if error_class else None
    if message is _DEFAULT:
        message = f"a {error_class} failure" if error_class else None
    if ended_at is _DEFAULT:
        ended_at = None if outcome == "running" else started_at + SECOND
    if attempt is None:
        attempt = next_attempt_number(connection, asset, partition, episode)
    return connection.execute(
        sa.insert(attempts)
        .values(
            asset=asset,
            partition=partition,
            episode=episode,
            attempt=attempt,
            run_id=run_id,
            token=token,
            holder=holder,
            outcome=outcome,
            error_class=error_class,
            error_type=error_type,
            message=message,
            started_at=started_at,
            ended_at=ended_at,
        )
        .returning(attempts.c.id)
    ).scalar_one()


def a_lease(connection: sa.Connection, **columns) -> tuple[str, str]:
    """A partition's lease row; held by `worker-a`, live for 30 s from `acquired_at`."""
    row = {
        "asset": ASSET,
        "partition": PARTITION,
        "token": 1,
        "holder": "worker-a",
        "run_id": "run-1",
        "acquired_at": AT,
        **columns,
    }
    row.setdefault("expires_at", (row["acquired_at"] or AT) + 30 * SECOND)
    connection.execute(sa.insert(leases).values(row))
    return row["asset"], row["partition"]


def a_partition(connection: sa.Connection, **columns) -> tuple[str, str]:
    """A partition's state row; `failed` in episode 1 unless told otherwise."""
    row = {
        "asset": ASSET,
        "partition": PARTITION,
        "status": "failed",
        "episode": 1,
        "run_id": "run-1",
        "updated_at": AT,
        **columns,
    }
    connection.execute(sa.insert(partitions).values(row))
    return row["asset"], row["partition"]


def a_quarantine_entry(connection: sa.Connection, **columns) -> int:
    """A quarantine entry; open (`quarantined`) for episode 1 unless told otherwise, signed
    from its class, type and last error."""
    row = {
        "asset": ASSET,
        "partition": PARTITION,
        "episode": 1,
        "status": "quarantined",
        "attempts": 3,
        "error_class": "retryable",
        "error_type": "RetryableError",
        "last_error": "a retryable failure",
        "first_failed_at": AT,
        "last_failed_at": AT,
        "quarantined_at": AT,
        **columns,
    }
    # Signed as `quarantine_partition` signs it, unless the test says otherwise.
    row.setdefault(
        "signature",
        failure_signature(
            row["error_class"],
            row["error_type"],
            row["last_error"],
            asset=row["asset"],
            partition=row["partition"],
        ),
    )
    return connection.execute(
        sa.insert(quarantine).values(row).returning(quarantine.c.id)
    ).scalar_one()


def a_holder(**changes) -> str:
    """A holder id like this process's, with some of its fields changed."""
    here = HolderIdentity.parse(this_holder())
    return str(dataclasses.replace(here, **changes))


def a_dead_holder(**changes) -> str:
    """The holder id of a real process of this host that has exited (with `changes`)."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        with open(f"/proc/{process.pid}/stat", encoding="ascii") as stat:
            start_ticks = stat.read().rsplit(")", 1)[1].split()[19]
    finally:
        process.kill()
        process.wait(timeout=30)
    return a_holder(pid=process.pid, start_ticks=start_ticks, **changes)


def _error_type_of(error_class: str) -> str:
    return "".join(word.title() for word in error_class.split("_")) + "Error"
