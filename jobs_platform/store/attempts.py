"""The attempt history: every attempt at a partition, kept, never only the last.

Attempts are counted per partition and episode across runs, processes and hosts, so op
retries, run retries, re-launches and crashes all draw from one ceiling.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.errors import Classification
from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import attempts, circuit_failures


class AttemptOutcome(enum.StrEnum):
    """Where an attempt stands."""

    RUNNING = "running"  # a worker took the lease and started; no result yet
    SUCCEEDED = "succeeded"  # the finalize transaction committed
    FAILED = "failed"  # it ended with an error_class (a crash is found by the next worker)


# Classes that spend an attempt. Losing the lease or being shut down says nothing
# about the input, so those attempts are recorded but not counted.
COUNTED_CLASSES = frozenset(
    {
        Classification.RETRYABLE,
        Classification.TERMINAL,
        Classification.CRASH,
        Classification.UNKNOWN,
    }
)


@dataclass(frozen=True)
class AttemptFailure:
    error_class: Classification
    error_type: str
    message: str
    traceback: str | None = None
    rule: str | None = None  # the signature of the taught rule that decided the class


class Attempts:
    """The attempt history's writes that stamp a time, on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def start(
        self,
        connection: sa.Connection,
        *,
        asset: str,
        partition: str,
        episode: int,
        run_id: str | None,
        step_retry: int | None,
        token: int,
        holder: str,
        correlation_id: str | None,
        code_version: str | None = None,
        first: bool = False,
    ) -> tuple[int, int]:
        """Record a started attempt; returns (attempt id, attempt number in the episode).

        `first` says the partition has no attempt yet (`leases.Grant.first`): it is number 1.
        Its times are the database's: another host ends it when it crashes, and its duration
        is read across both.
        """
        number = 1 if first else next_attempt_number(connection, asset, partition, episode)
        attempt_id = connection.execute(
            sa.insert(attempts)
            .values(
                asset=asset,
                partition=partition,
                episode=episode,
                attempt=number,
                run_id=run_id,
                step_retry=step_retry,
                token=token,
                holder=holder,
                correlation_id=correlation_id,
                code_version=code_version or None,
                outcome=AttemptOutcome.RUNNING,
                started_at=now_in_statement(self.clock, connection),
            )
            .returning(attempts.c.id)
        ).scalar_one()
        return attempt_id, number

    def finish(
        self, connection: sa.Connection, attempt_id: int, failure: AttemptFailure | None = None
    ) -> None:
        """Record how an attempt ended (its own worker knows best, so it may correct a crash)."""
        values: dict[str, object] = {"ended_at": now_in_statement(self.clock, connection)}
        if failure is None:
            # A crash recorded by someone else is corrected entirely, not only its class.
            values.update(
                outcome=AttemptOutcome.SUCCEEDED,
                error_class=None,
                error_type=None,
                message=None,
                traceback=None,
                rule=None,
            )
        else:
            values.update(
                outcome=AttemptOutcome.FAILED,
                error_class=failure.error_class,
                error_type=failure.error_type,
                message=failure.message,
                traceback=failure.traceback,
                rule=failure.rule,
            )
        connection.execute(sa.update(attempts).where(attempts.c.id == attempt_id).values(**values))

    def record_abandoned(
        self, connection: sa.Connection, asset: str, partition: str, before_token: int
    ) -> int:
        """Mark attempts whose lease was taken over without a result as crashes."""
        return connection.execute(
            sa.update(attempts)
            .where(
                attempts.c.asset == asset,
                attempts.c.partition == partition,
                attempts.c.outcome == AttemptOutcome.RUNNING,
                attempts.c.token < before_token,
            )
            .values(**crash_values(now_in_statement(self.clock, connection)))
        ).rowcount


def next_attempt_number(connection: sa.Connection, asset: str, partition: str, episode: int) -> int:
    """The number the episode's next attempt gets (1 for its first)."""
    previous = connection.execute(
        sa.select(sa.func.max(attempts.c.attempt)).where(
            attempts.c.asset == asset,
            attempts.c.partition == partition,
            attempts.c.episode == episode,
        )
    ).scalar_one()
    return (previous or 0) + 1


def record_fingerprint(connection: sa.Connection, attempt_id: int, fingerprint: str) -> None:
    """Record the input an attempt read: a redrive compares it with the input of today."""
    connection.execute(
        sa.update(attempts).where(attempts.c.id == attempt_id).values(fingerprint=fingerprint)
    )


def crash_values(now: dt.datetime | sa.ColumnElement[dt.datetime]) -> dict[str, object]:
    """The columns of an attempt whose worker died without reporting."""
    return {
        "outcome": AttemptOutcome.FAILED,
        "error_class": Classification.CRASH,
        "error_type": "WorkerLost",
        "message": "the worker stopped (killed, out of memory or hung) without reporting a "
        "result, and its lease expired or was taken over",
        # The database's clock: the rescuer compares it with the database's clock later.
        "ended_at": now,
    }


@dataclass(frozen=True)
class BudgetState:
    """How much of its attempt budget an episode has spent, and how its last failure ended."""

    counted_failures: int  # failed attempts since the last success whose class spends budget
    last_class: Classification | None  # the class of the latest of them, counted or not


def budget_state(
    connection: sa.Connection, asset: str, partition: str, episode: int
) -> BudgetState:
    """The episode's budget since the partition last succeeded, in one query.

    The only count of the budget: the engine decides from it (`engine.settle.settle`) and
    the quarantine entry records it. A failure the circuit breaker forgave
    (`steering.circuits`) is not counted.
    """
    streak = (
        sa.select(attempts.c.id, attempts.c.error_class)
        .where(*_failing_streak(asset, partition, episode))
        .subquery()
    )
    # A failure the circuit breaker forgave was an outage's, not the partition's.
    forgiven = sa.exists().where(
        circuit_failures.c.attempt_id == streak.c.id, circuit_failures.c.forgiven
    )
    counted = sa.and_(streak.c.error_class.in_([str(c) for c in COUNTED_CLASSES]), ~forgiven)
    last_class = (
        sa.select(streak.c.error_class).order_by(streak.c.id.desc()).limit(1).scalar_subquery()
    )
    row = connection.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(sa.case((counted, 1), else_=0)), 0), last_class
        ).select_from(streak)
    ).one()
    return BudgetState(int(row[0]), Classification(row[1]) if row[1] is not None else None)


def failing_streak(
    connection: sa.Connection, asset: str, partition: str, episode: int
) -> list[TableRow]:
    """The failed attempts of this episode since the partition last succeeded, oldest first."""
    return list(
        connection.execute(
            sa.select(attempts)
            .where(*_failing_streak(asset, partition, episode))
            .order_by(attempts.c.id)
        )
    )


def _failing_streak(asset: str, partition: str, episode: int) -> list[sa.ColumnElement[bool]]:
    of_episode = [
        attempts.c.asset == asset,
        attempts.c.partition == partition,
        attempts.c.episode == episode,
    ]
    last_success = (
        sa.select(sa.func.coalesce(sa.func.max(attempts.c.id), 0))
        .where(*of_episode, attempts.c.outcome == AttemptOutcome.SUCCEEDED)
        .scalar_subquery()
    )
    return [*of_episode, attempts.c.outcome == AttemptOutcome.FAILED, attempts.c.id > last_success]


def attempt_history(
    connection: sa.Connection, asset: str, partition: str, episode: int | None = None
) -> list[TableRow]:
    """Every attempt at the partition (or one episode of it), oldest first."""
    query = sa.select(attempts).where(attempts.c.asset == asset, attempts.c.partition == partition)
    if episode is not None:
        query = query.where(attempts.c.episode == episode)
    return list(connection.execute(query.order_by(attempts.c.id)))


def partitions_attempted_in_run(connection: sa.Connection, asset: str, run_id: str) -> list[str]:
    """The partitions of `asset` that the run started an attempt at (a ranged run has many)."""
    return list(
        connection.execute(
            sa.select(attempts.c.partition)
            .where(attempts.c.asset == asset, attempts.c.run_id == run_id)
            .distinct()
            .order_by(attempts.c.partition)
        ).scalars()
    )
