"""Where a backfill's spec lives: beside its op, not in a process-wide registry.

What a code location serves is what its `Definitions` hold: the spec of each backfill is
found from the asset definition `backfill_asset` (or a chain, `chain_backfills`) built,
so two locations in one process, a module imported twice or a test's own backfill never
see each other's.

The specs sit in a weak table keyed by the asset's op, Dagster's `OpDefinition` (the
public `AssetsDefinition.node_def`). It is read only from an asset definition and never
listed, and an entry goes when its op does. Dagster keeps the op object when it copies an
asset definition: `with_attributes` (a key prefix, a policy), `with_resources`, a
`Definitions.merge`, the repository's and the asset graph's definitions, a chain's subset,
`map_asset_specs` of owners or tags (`test_specs.py` checks each). A copy that rebuilds
the op, such as new deps through `map_asset_specs`, is no backfill to the framework:
declare a backfill's deps with `backfill_asset(deps=...)`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence

import dagster as dg

from jobs_platform.engine.spec import BackfillSpec

_specs_by_op: weakref.WeakKeyDictionary[dg.OpDefinition, tuple[BackfillSpec, ...]] = (
    weakref.WeakKeyDictionary()
)


def attach_specs(asset: dg.AssetsDefinition, specs: Sequence[BackfillSpec]) -> dg.AssetsDefinition:
    """Mark `asset`'s op as computing `specs`; `asset` itself."""
    _specs_by_op[asset.op] = tuple(specs)
    return asset


def specs_of(asset: object) -> tuple[BackfillSpec, ...]:
    """The backfills an asset definition computes; () for any other definition."""
    if not isinstance(asset, dg.AssetsDefinition) or not asset.is_executable:
        return ()
    op = asset.node_def
    return _specs_by_op.get(op, ()) if isinstance(op, dg.OpDefinition) else ()


def backfill_specs(assets: Iterable[object]) -> dict[str, BackfillSpec]:
    """The backfills among `assets`, by asset key (user string), in their order."""
    return {spec.asset: spec for asset in assets for spec in specs_of(asset)}
