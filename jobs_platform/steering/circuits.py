"""The circuit breaker per cause: one outage is one cause, not thousands of bad partitions.

When retryable, crash or unknown failures of one signature (`dead_letter.signature`) hit
`circuit_partitions` distinct partitions of one backfill within `circuit_window_seconds`,
that backfill's circuit for the signature opens. While it is open:

- a new attempt at any partition of the backfill is not started: the gate snoozes it
  (`CircuitOpen`, a free snooze like a busy lease), except one probe partition at a time,
  which tries once the probe interval has passed (`circuit_probe_seconds`, doubled after
  each failed probe up to `circuit_probe_max_seconds`);
- a failure of that signature is forgiven: recorded in the history, never counted against
  the partition's budget (`store.attempts.budget_state` skips it). So are the failures
  that opened the circuit: the outage is not those partitions' fault, and nothing is
  quarantined because of it. A failed probe re-arms the interval;
- a probe's success closes the circuit, and each snoozed partition proceeds on its next try.

Every decision is a row of `jp_circuits`, locked while it is taken, so it holds across
hosts and launch paths; the failures counted are rows of `jp_circuit_failures`. The rule
itself (`steering.circuit_rule`) is pure; the reads of `status` and `/metrics` are
`steering.circuit_report`. The opening and the closing each raise a
notice (`alerts.notices`) in the transaction that decided them: alerted once each, by
every sink the dead-letter sensor delivers to.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.alerts.notices import raise_notice
from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.errors import JobsPlatformError, Verdict
from jobs_platform.steering.circuit_rule import (
    TRIPPING_CLASSES,
    CircuitRule,
    opens,
    probe_interval,
    snoozes_attempts,
)
from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import circuit_failures, circuits, leases

# The notices (`alerts.notices`) of a circuit's opening and closing: each alerted once.
CIRCUIT_OPENED = "circuit_opened"
CIRCUIT_CLOSED = "circuit_closed"
# A snoozed partition looks again no sooner than this.
MIN_SNOOZE_SECONDS = 0.5
# A snooze ends this long after the probe is due: the step's clock and the database's
# differ by milliseconds, and a partition back a hair early would only snooze again.
_PAST_THE_PROBE_SECONDS = 0.25


class CircuitOpen(JobsPlatformError):
    """Not attempted: the backfill's circuit for a cause is open, and this is not its probe.

    Snoozed for `seconds` (about when the next probe is due), for free.
    """

    def __init__(self, asset: str, signature: str, last_error: str | None, seconds: float):
        self.signature = signature
        self.seconds = seconds
        super().__init__(
            f"{asset}: circuit open for cause {signature} ({(last_error or '')[:200]}); "
            f"not attempted, no attempt spent, tried again in about {seconds:.0f}s"
        )

    @property
    def snooze_seconds(self) -> float:
        """The snooze: until the next probe is due, a little after.

        Not spread at random: every partition a ranged step snoozed is then due at the one
        instant the probe is, so the step comes back once per probe (a probe that succeeds
        first lets the rest through in the same step try), not once per partition.
        """
        return max(MIN_SNOOZE_SECONDS, self.seconds + _PAST_THE_PROBE_SECONDS)


class Transition(enum.StrEnum):
    """What a failure did to its cause's circuit."""

    COUNTED = "counted"  # below the threshold: counted for the circuit, and against the budget
    OPENED = "opened"  # it tripped the circuit: it and the failures before it are forgiven
    FORGIVEN = "forgiven"  # the circuit was open already: forgiven (a failed probe re-arms it)


@dataclass(frozen=True)
class Probe:
    """This attempt is the probe of the backfill's open circuits (`signatures`)."""

    signatures: tuple[str, ...]


class Circuits:
    """The circuits' SQL, stamped and judged on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def admit(
        self, connection: sa.Connection, rule: CircuitRule, asset: str, partition: str, token: int
    ) -> CircuitOpen | Probe | None:
        """At the gate, holding the partition's lease (`token`): may an attempt start?

        None when no circuit of the backfill is open; `Probe` when this attempt is the one
        probe (no other live probe, and the interval has passed); else `CircuitOpen`, the
        snooze. Run it in its own transaction: it locks the backfill's open circuits.
        """
        rows = list(
            connection.execute(
                sa.select(circuits)
                .where(*_open(asset))
                .order_by(circuits.c.signature)
                .with_for_update()
            )
        )
        if not rows:
            return None  # the common case: one indexed read, not even the clock's
        now = self.clock.now(connection)
        for row in rows:
            probing = row.probe_partition is not None and probe_alive(connection, row, now)
            if snoozes_attempts(probing, row.next_probe_at, now):
                wait = (
                    _seconds_until(row.next_probe_at, now)
                    or probe_interval(row.probes_failed, rule) / 2
                )
                connection.execute(
                    sa.update(circuits)
                    .where(circuits.c.asset == asset, circuits.c.signature == row.signature)
                    .values(snoozes=circuits.c.snoozes + 1)
                )
                return CircuitOpen(asset, row.signature, row.last_error, wait)
        connection.execute(
            sa.update(circuits)
            .where(*_open(asset))
            .values(probe_partition=partition, probe_token=token, probe_started_at=now)
        )
        return Probe(tuple(row.signature for row in rows))

    def record_failure(
        self,
        connection: sa.Connection,
        rule: CircuitRule,
        *,
        asset: str,
        partition: str,
        attempt_id: int,
        token: int,
        verdict: Verdict,
        error_type: str,
        message: str,
    ) -> Transition | None:
        """Count a failed attempt for its cause's circuit, in the transaction recording it.

        Before the budget is settled: a forgiven failure is then not counted. Returns what
        it did to the circuit, or None when its class cannot open one (terminal, or not
        about the input) or the breaker is off.
        """
        now = self.clock.now(connection)
        tripping = rule.partitions > 0 and verdict.classification in TRIPPING_CLASSES
        signature = (
            failure_signature(
                str(verdict.classification), error_type, message, asset=asset, partition=partition
            )
            if tripping
            else None
        )
        self._end_failed_probe(connection, rule, asset, partition, token, signature, now)
        if signature is None:
            return None
        upsert_row(
            connection,
            circuits,
            {
                "asset": asset,
                "signature": signature,
                "error_class": str(verdict.classification),
                "error_type": error_type,
                "last_error": message[:2000],
                "partitions": 0,
                "times_opened": 0,
                "probes_failed": 0,
                "snoozes": 0,
            },
        )
        key = (circuits.c.asset == asset, circuits.c.signature == signature)
        # Locked: two workers failing at once count each other's failure, never both miss it.
        circuit = connection.execute(sa.select(circuits).where(*key).with_for_update()).one()
        is_open = circuit.opened_at is not None and circuit.closed_at is None
        connection.execute(
            sa.insert(circuit_failures).values(
                attempt_id=attempt_id,
                asset=asset,
                partition=partition,
                signature=signature,
                failed_at=now,
                forgiven=is_open,
            )
        )
        if is_open:
            return Transition.FORGIVEN
        since = now - dt.timedelta(seconds=rule.window_seconds)
        of_cause = (
            circuit_failures.c.asset == asset,
            circuit_failures.c.signature == signature,
            circuit_failures.c.failed_at >= since,
        )
        distinct = connection.execute(
            sa.select(sa.func.count(sa.distinct(circuit_failures.c.partition))).where(*of_cause)
        ).scalar_one()
        if not opens(distinct, rule):
            return Transition.COUNTED
        connection.execute(
            sa.update(circuits)
            .where(*key)
            .values(
                error_class=str(verdict.classification),
                error_type=error_type,
                last_error=message[:2000],
                opened_at=now,
                closed_at=None,
                partitions=distinct,
                times_opened=circuits.c.times_opened + 1,
                probe_partition=None,
                probe_token=None,
                probe_started_at=None,
                next_probe_at=now + dt.timedelta(seconds=probe_interval(0, rule)),
                probes_failed=0,
                snoozes=0,
                open_alerted_at=now,
                close_alerted_at=None,
            )
        )
        # The failures that opened it were the outage's, not their partitions'.
        connection.execute(sa.update(circuit_failures).where(*of_cause).values(forgiven=True))
        raise_notice(
            connection,
            self.clock,
            kind=CIRCUIT_OPENED,
            asset=asset,
            key=_occurrence(signature, now),
            summary=(
                f"circuit opened: one cause failed {distinct} partitions in "
                f"{rule.window_seconds:g} s; its partitions snooze until a probe succeeds"
            ),
            details={
                "signature": signature,
                "error_class": str(verdict.classification),
                "error": message[:300],
                "partitions": distinct,
                "first_probe_in_seconds": int(probe_interval(0, rule)),
            },
        )
        return Transition.OPENED

    def _end_failed_probe(
        self,
        connection: sa.Connection,
        rule: CircuitRule,
        asset: str,
        partition: str,
        token: int,
        signature: str | None,
        now: dt.datetime,
    ) -> None:
        """A probe failed: the same cause re-arms the interval (the outage goes on); any
        other failure only frees the probe slot for another partition."""
        probe = (
            *_open(asset),
            circuits.c.probe_partition == partition,
            circuits.c.probe_token == token,
        )
        free = {"probe_partition": None, "probe_token": None, "probe_started_at": None}
        # Locked in the gate's order (by signature), so the two never wait on each other.
        probed = sa.select(circuits).where(*probe).order_by(circuits.c.signature)
        for row in connection.execute(probed.with_for_update()):
            values: dict[str, object] = dict(free)
            if row.signature == signature:
                failed = row.probes_failed + 1
                values["probes_failed"] = failed
                values["next_probe_at"] = now + dt.timedelta(seconds=probe_interval(failed, rule))
            connection.execute(
                sa.update(circuits)
                .where(circuits.c.asset == asset, circuits.c.signature == row.signature)
                .values(**values)
            )

    def probe_succeeded(
        self, connection: sa.Connection, asset: str, partition: str, token: int
    ) -> list[str]:
        """In the transaction that commits a partition as done: when it was the probe of
        its backfill's open circuits, they close. Returns their signatures."""
        now = self.clock.now(connection)
        closed = connection.execute(
            sa.update(circuits)
            .where(
                *_open(asset),
                circuits.c.probe_partition == partition,
                circuits.c.probe_token == token,
            )
            .values(
                closed_at=now,
                close_alerted_at=now,
                probe_partition=None,
                probe_token=None,
                probe_started_at=None,
                next_probe_at=None,
            )
            .returning(
                circuits.c.signature,
                circuits.c.opened_at,
                circuits.c.probes_failed,
                circuits.c.snoozes,
            )
        ).all()
        for signature, opened_at, probes_failed, snoozes in closed:
            raise_notice(
                connection,
                self.clock,
                kind=CIRCUIT_CLOSED,
                asset=asset,
                key=_occurrence(signature, opened_at),
                summary=(
                    f"circuit closed: probe {partition} succeeded after "
                    f"{(now - opened_at).total_seconds():.0f} s open; its partitions go on"
                ),
                details={
                    "signature": signature,
                    "opened_at": opened_at.isoformat(),
                    "probe_partition": partition,
                    "probes_failed": probes_failed,
                    "snoozes": snoozes,
                },
            )
        return sorted(signature for signature, *_ in closed)


def _open(asset: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        circuits.c.asset == asset,
        circuits.c.opened_at.is_not(None),
        circuits.c.closed_at.is_(None),
    )


def _occurrence(signature: str, opened_at: dt.datetime) -> str:
    """Which opening of the cause's circuit a notice speaks of: one circuit opens again."""
    return f"{signature}@{opened_at.isoformat()}"


def probe_alive(connection: sa.Connection, row: TableRow, now: dt.datetime) -> bool:
    """Whether the probe's worker still holds its lease: a probe that crashed, or ended
    without a verdict (interrupted, its budget spent), frees the slot with its lease."""
    held = connection.execute(
        sa.select(sa.literal(1)).where(
            leases.c.asset == row.asset,
            leases.c.partition == row.probe_partition,
            leases.c.token == row.probe_token,
            leases.c.expires_at > now,
        )
    ).first()
    return held is not None


def _seconds_until(moment: dt.datetime | None, now: dt.datetime) -> float:
    if moment is None:
        return 0.0
    return max(0.0, (moment - now).total_seconds())
