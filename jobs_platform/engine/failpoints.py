"""Fault injection at exact points of a partition attempt (`JOBS_PLATFORM_FAILPOINTS`).

Rules: `POINT[@ASSET[/PARTITION]][#CHUNK]=ACTION[*TIMES]`, comma-separated. They exist so
that tests can kill or stall real processes at known instants; unset, they cost nothing.
`*TIMES` counts the partition's attempts recorded in the warehouse before this one, not
an executor's retry number: it means the same under every executor, after a crash and
after a redelivered task.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from jobs_platform.errors import RetryableError, TerminalError


class Point(enum.StrEnum):
    READ = "read"  # before reading a chunk
    BEFORE_COMMIT = "before_commit"  # chunk written, transaction not yet committed
    AFTER_COMMIT = "after_commit"  # chunk committed with its checkpoint
    FINALIZE = "finalize"  # before the finalize transaction commits


class FailpointError(ValueError):
    """A failpoint rule cannot be parsed."""


_RULE = re.compile(
    r"^(?P<point>[a-z_]+)"
    r"(?:@(?P<asset>[^/#=]+)(?:/(?P<partition>[^#=]+))?)?"
    r"(?:#(?P<chunk>\d+))?"
    r"=(?P<action>crash|transient|terminal|sleep:(?P<seconds>\d+(?:\.\d+)?))"
    r"(?:\*(?P<times>\d+))?$"
)


@dataclass(frozen=True)
class Failpoint:
    point: Point
    action: str
    asset: str | None = None
    partition: str | None = None
    chunk: int | None = None
    times: int | None = None
    sleep_seconds: float = 0.0

    def matches(
        self, point: Point, asset: str, partition: str, chunk: int | None, attempts_before: int
    ) -> bool:
        return (
            self.point == point
            and self.asset in (None, asset)
            and self.partition in (None, partition)
            and (self.chunk is None or self.chunk == chunk)
            and (self.times is None or attempts_before < self.times)
        )


def parse_failpoints(text: str | None) -> tuple[Failpoint, ...]:
    """Parse the variable's value; an empty or unset value gives no failpoints."""
    if not text or not text.strip():
        return ()
    rules = []
    for raw in text.split(","):
        rule = raw.strip()
        if not rule:
            continue
        match = _RULE.match(rule)
        if match is None:
            raise FailpointError(
                f"bad failpoint rule {rule!r}: expected POINT[@ASSET[/PARTITION]][#CHUNK]="
                "ACTION[*TIMES] with ACTION crash, transient, terminal or sleep:SECONDS"
            )
        try:
            point = Point(match["point"])
        except ValueError:
            raise FailpointError(
                f"bad failpoint point {match['point']!r}: one of {[p.value for p in Point]}"
            ) from None
        action = match["action"].split(":", 1)[0]
        rules.append(
            Failpoint(
                point=point,
                action=action,
                asset=match["asset"],
                partition=match["partition"],
                chunk=int(match["chunk"]) if match["chunk"] is not None else None,
                times=int(match["times"]) if match["times"] is not None else None,
                sleep_seconds=float(match["seconds"] or 0),
            )
        )
    return tuple(rules)


def trigger_failpoints(
    rules: Sequence[Failpoint],
    point: Point,
    *,
    asset: str,
    partition: str,
    chunk: int | None = None,
    attempts_before: int = 0,
) -> None:
    """Act out every rule matching this instant (callers skip this when `rules` is empty)."""
    for rule in rules:
        if not rule.matches(point, asset, partition, chunk, attempts_before):
            continue
        where = f"failpoint {point}@{asset}/{partition}" + (
            f"#{chunk}" if chunk is not None else ""
        )
        if rule.action == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif rule.action == "transient":
            raise RetryableError(f"{where}: injected transient failure")
        elif rule.action == "terminal":
            raise TerminalError(f"{where}: injected terminal failure")
        elif rule.action == "sleep":
            time.sleep(rule.sleep_seconds)
