"""A backfill's open circuits as `plan` reads them, judged by the breaker's own rule.

Once the lease is held, an open circuit of the backfill snoozes every new attempt but one,
its probe (`steering.circuits.Circuits.admit`). Which it does is the breaker's pure rule
(`circuit_rule.snoozes_attempts`): a circuit whose probe is still trying, or whose next
probe is not due, snoozes; when none does, the next attempt is their probe. `plan` reads
the circuits once and asks that rule, writing nothing (no probe is taken, no snooze
counted).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.steering.circuit_report import open_circuits
from jobs_platform.steering.circuit_rule import snoozes_attempts
from jobs_platform.steering.circuits import probe_alive


@dataclass(frozen=True)
class OpenCircuit:
    """One open circuit of the backfill: its cause, and when it is probed."""

    signature: str
    last_error: str | None
    next_probe_at: dt.datetime | None  # None while its probe is trying
    probe_partition: str | None  # the partition probing it now (its lease live), if any
    snoozes: bool  # whether it snoozes a new attempt now (the breaker's rule)


@dataclass(frozen=True)
class CircuitState:
    """The backfill's open circuits, in the order the gate reads them (by signature)."""

    open: tuple[OpenCircuit, ...] = ()

    @property
    def snoozing(self) -> OpenCircuit | None:
        """The circuit that snoozes a new attempt now (the first, as the gate stops at it);
        None when none does: the next attempt is the probe of them all."""
        return next((circuit for circuit in self.open if circuit.snoozes), None)


def read_circuits(connection: sa.Connection, asset: str, now: dt.datetime) -> CircuitState:
    """The open circuits of `asset` at `now` (the database's clock, as the gate's)."""
    found = []
    for row in sorted(open_circuits(connection, [asset]), key=lambda row: row.signature):
        probing = row.probe_partition is not None and probe_alive(connection, row, now)
        found.append(
            OpenCircuit(
                signature=row.signature,
                last_error=row.last_error,
                next_probe_at=row.next_probe_at,
                probe_partition=row.probe_partition if probing else None,
                snoozes=snoozes_attempts(probing, row.next_probe_at, now),
            )
        )
    return CircuitState(tuple(found))
