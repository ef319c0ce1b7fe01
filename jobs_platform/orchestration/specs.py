"""Where a backfill's spec lives: on its asset definition, not in a process-wide registry.

What a code location serves is what its `Definitions` hold: the spec of each backfill is
found from the asset definition `backfill_asset` (or a chain, `chain_backfills`) built,
so two locations in one process, a module imported twice or a test's own backfill never
see each other's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dagster as dg

from jobs_platform.engine.spec import BackfillSpec

_SPECS_ATTRIBUTE = "__jobs_platform_specs__"


def attach_specs(step: Callable[..., Any], specs: Sequence[BackfillSpec]) -> None:
    """Mark a step function as computing `specs` (before Dagster wraps it in an op)."""
    setattr(step, _SPECS_ATTRIBUTE, tuple(specs))


def specs_of(asset: object) -> tuple[BackfillSpec, ...]:
    """The backfills an asset definition computes; () for any other definition."""
    if not isinstance(asset, dg.AssetsDefinition) or asset.computation is None:
        return ()
    op = asset.computation.node_def
    if not isinstance(op, dg.OpDefinition):
        return ()
    step = getattr(op.compute_fn, "decorated_fn", op.compute_fn)
    specs: tuple[BackfillSpec, ...] = getattr(step, _SPECS_ATTRIBUTE, ())
    return specs


def backfill_specs(assets: Iterable[object]) -> dict[str, BackfillSpec]:
    """The backfills among `assets`, by asset key (user string), in their order."""
    return {spec.asset: spec for asset in assets for spec in specs_of(asset)}
