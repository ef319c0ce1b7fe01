"""The circuit breaker's rule, pure: when a cause's circuit opens, and how often it is probed.

The SQL that applies it is `steering.circuits`; its settings are `Settings.circuit_*`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from jobs_platform.errors import Classification
from jobs_platform.settings import Settings

# The failures that can be one outage's: a terminal failure is the partition's own input.
# A crash counts when its attempt reported it; one found later by the next worker's start
# (`store.attempts.record_abandoned`) has no message to sign and is not counted: a few
# partitions that kill their workers must still reach their ceiling.
TRIPPING_CLASSES = frozenset(
    {Classification.RETRYABLE, Classification.CRASH, Classification.UNKNOWN}
)


@dataclass(frozen=True)
class CircuitRule:
    """The breaker's settings (`Settings.circuit_*`)."""

    partitions: int  # distinct partitions that open it; 0 turns the breaker off
    window_seconds: float
    probe_seconds: float
    probe_max_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> CircuitRule:
        return cls(
            settings.circuit_partitions,
            settings.circuit_window_seconds,
            settings.circuit_probe_seconds,
            settings.circuit_probe_max_seconds,
        )


def opens(distinct_partitions: int, rule: CircuitRule) -> bool:
    """Whether failures of one cause on this many partitions in the window open its circuit."""
    return rule.partitions > 0 and distinct_partitions >= rule.partitions


def probe_interval(probes_failed: int, rule: CircuitRule) -> float:
    """How long after opening (or after the last failed probe) the next probe may try."""
    grown: float = rule.probe_seconds * 2.0 ** max(0, probes_failed)
    return min(rule.probe_max_seconds, grown)


def snoozes_attempts(probing: bool, next_probe_at: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether an open circuit snoozes a new attempt: its probe is still trying (`probing`),
    or the next probe is not due yet. An attempt no open circuit of its backfill snoozes is
    their probe (`Circuits.admit`; `plan` says so too)."""
    return probing or (next_probe_at is not None and next_probe_at > now)
