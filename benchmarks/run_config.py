"""The run config the benchmarks give the backfills they launch, as a user writes it."""

from __future__ import annotations

from collections.abc import Sequence

from jobs_platform.location import load_definitions
from jobs_platform.orchestration.chains import backfill_run_config


def chunk_rows_config(module: str | None, assets: Sequence[str], chunk_rows: int) -> dict:
    """Run config giving each of the backfills `assets` of the code location `module`
    `chunk_rows`, where its run config goes: its own op's, or its name in its chain's op
    (in the bundled location `orders` and `daily_revenue` are one chain)."""
    definitions = load_definitions(module)
    return backfill_run_config(
        [definitions.get_assets_def(asset) for asset in assets],
        {asset: {"chunk_rows": chunk_rows} for asset in assets},
    )
