"""What a backfill's author expects one attempt to do to its partition (`expect=`).

A contract bounds the diff of the partition's staged rows against the target
(`gate.diff.ChangeDiff`): rows inserted, the fractions of the partition's current rows
updated and swept, the row count after publish. A contract that holds publishes; one
broken bound refuses the partition (`engine.gated_finalize`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobs_platform.gate.diff import ChangeDiff

__all__ = ["ChangeContract"]


@dataclass(frozen=True)
class ChangeContract:
    """Bounds on what one attempt may do to its partition; None leaves a bound out.

    `max_updated_fraction` and `max_swept_fraction` are fractions of the rows the
    partition holds before the attempt. `row_count_between=(lo, hi)` bounds the rows it
    holds after; `row_count_within=0.05` keeps that count within ±5 % of the count
    before. A first load (the partition holds no row yet) has nothing to compare with:
    `row_count_within` does not apply to it.

    Example: `ChangeContract(max_swept_fraction=0.0, max_updated_fraction=0.02,
    row_count_within=0.05)`.
    """

    max_inserted: int | None = None
    max_updated_fraction: float | None = None
    max_swept_fraction: float | None = None
    row_count_between: tuple[int, int] | None = None
    row_count_within: float | None = None

    def __post_init__(self) -> None:
        if all(getattr(self, name) is None for name in self.__dataclass_fields__):
            raise ValueError(
                "ChangeContract needs a bound: max_inserted, max_updated_fraction, "
                "max_swept_fraction, row_count_between or row_count_within"
            )
        if self.max_inserted is not None and not _whole(self.max_inserted):
            raise ValueError(f"max_inserted must be a whole number >= 0, got {self.max_inserted!r}")
        for name in ("max_updated_fraction", "max_swept_fraction", "row_count_within"):
            value = getattr(self, name)
            if value is not None and not _fraction(value):
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value!r}")
        between = self.row_count_between
        if between is not None and not (
            isinstance(between, tuple)
            and len(between) == 2
            and all(_whole(bound) for bound in between)
            and between[0] <= between[1]
        ):
            raise ValueError(
                "row_count_between must be (lo, hi), whole numbers with 0 <= lo <= hi, "
                f"got {between!r}"
            )

    def broken_bounds(self, diff: ChangeDiff) -> list[str]:
        """Each bound `diff` breaks, as a sentence naming the figure and the bound."""
        broken: list[str] = []
        before, after = diff.rows_before, diff.rows_after
        if self.max_inserted is not None and diff.inserted > self.max_inserted:
            broken.append(
                f"inserted {diff.inserted} rows, more than max_inserted={self.max_inserted}"
            )
        for name, count, verb in (
            ("max_updated_fraction", diff.updated, "updated"),
            ("max_swept_fraction", diff.swept, "swept"),
        ):
            bound = getattr(self, name)
            if bound is not None and count > bound * before:
                broken.append(
                    f"{verb} {count} of {before} rows ({_percent(count, before)}), more than "
                    f"{name}={bound}"
                )
        if self.row_count_between is not None:
            lo, hi = self.row_count_between
            if not lo <= after <= hi:
                broken.append(f"{after} rows after publish, outside row_count_between=({lo}, {hi})")
        within = self.row_count_within
        if within is not None and before > 0 and abs(after - before) > within * before:
            broken.append(
                f"{after} rows after publish against {before} before "
                f"({_signed_percent(after - before, before)}), more than row_count_within={within}"
            )
        return broken

    def describe(self) -> str:
        """The contract as it would be written: `ChangeContract(max_updated_fraction=0.02)`."""
        bounds = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in self.__dataclass_fields__
            if getattr(self, name) is not None
        )
        return f"ChangeContract({bounds})"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fraction(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


def _percent(count: int, total: int) -> str:
    return f"{100 * count / total:.1f}%" if total else "all"


def _signed_percent(change: int, total: int) -> str:
    return f"{100 * change / total:+.1f}%"
