"""Asset check `no_quarantined_partitions` on every backfill asset: red while any is quarantined."""

from collections.abc import Sequence

import dagster as dg

from jobs_platform.dead_letter.entries import list_entries
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.tags import BACKFILL_TAG

CHECK_NAME = "no_quarantined_partitions"
# Enough to act on in the UI; the CLI lists them all.
LISTED_PARTITIONS = 50


def no_quarantined_partitions_checks(
    assets: Sequence[dg.AssetsDefinition],
) -> list[dg.AssetChecksDefinition]:
    """One check per backfill asset (those tagged `jobs_platform/backfill`) among `assets`."""
    return [
        _no_quarantined_partitions(spec.key)
        for assets_def in assets
        for spec in assets_def.specs
        if spec.tags.get(BACKFILL_TAG) == "true"
    ]


def _no_quarantined_partitions(asset_key: dg.AssetKey) -> dg.AssetChecksDefinition:
    asset = asset_key.to_user_string()

    @dg.asset_check(
        asset=asset_key,
        name=CHECK_NAME,
        description="Fails while any partition of this backfill is quarantined (dead letter).",
    )
    def _check(jobs_platform: JobsPlatformResource) -> dg.AssetCheckResult:
        engine = jobs_platform.ready_warehouse()
        with engine.connect() as connection:
            partitions = sorted(entry.partition for entry in list_entries(connection, asset=asset))
        listed = ", ".join(partitions[:LISTED_PARTITIONS])
        if len(partitions) > LISTED_PARTITIONS:
            listed += f", … ({len(partitions) - LISTED_PARTITIONS} more)"
        return dg.AssetCheckResult(
            passed=not partitions,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                f"{len(partitions)} quarantined partition(s): {listed}; see "
                "`jobs-platform dead-letter list` or the dead_letter asset"
                if partitions
                else "no quarantined partitions"
            ),
            metadata={
                "quarantined_count": len(partitions),
                "quarantined_partitions": listed,
            },
        )

    return _check
