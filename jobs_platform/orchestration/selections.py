"""Asset selections the sensors and the health figures share."""

import dagster as dg

from jobs_platform.orchestration.tags import BACKFILL_TAG

BACKFILL_ASSETS = dg.AssetSelection.tag(BACKFILL_TAG, "true")
"""Every asset `backfill_asset` declared in the code location."""
