"""Every backfill declared in this process, by asset name (for checks, sensors and tests)."""

from __future__ import annotations

from jobs_platform.engine.spec import BackfillSpec

_specs: dict[str, BackfillSpec] = {}


def register_backfill(spec: BackfillSpec) -> None:
    existing = _specs.get(spec.asset)
    if existing is not None and existing is not spec and existing.table.name != spec.table.name:
        raise ValueError(f"two backfills are named {spec.asset!r}")
    _specs[spec.asset] = spec


def backfill_specs() -> dict[str, BackfillSpec]:
    return dict(_specs)
