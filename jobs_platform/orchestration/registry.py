"""Every backfill declared in this process, by asset name (for checks, sensors and tests)."""

from __future__ import annotations

import dagster as dg

from jobs_platform.engine.spec import BackfillSpec

_specs: dict[str, BackfillSpec] = {}
_partitions: dict[str, dg.PartitionsDefinition] = {}


def register_backfill(spec: BackfillSpec, partitions_def: dg.PartitionsDefinition) -> None:
    existing = _specs.get(spec.asset)
    if existing is not None and existing is not spec and existing.table.name != spec.table.name:
        raise ValueError(f"two backfills are named {spec.asset!r}")
    _specs[spec.asset] = spec
    _partitions[spec.asset] = partitions_def


def backfill_specs() -> dict[str, BackfillSpec]:
    return dict(_specs)


def upstream_partitioned_alike(spec: BackfillSpec) -> tuple[str, ...]:
    """The backfills `spec` reads partition for partition: its upstream backfills
    partitioned like it. Each of their partitions must be done before the same key of
    `spec` is attempted (the engine's upstream gate)."""
    own = _partitions.get(spec.asset)
    return tuple(name for name in spec.upstream if name in _specs and _partitions.get(name) == own)
