"""Gate each partition before it counts: stage its rows, diff them, publish or refuse.

Pure (SQL over SQLAlchemy, no Dagster): the expected-change contract (`contract`), the
partition's stage (`stage`), the diff of the stage against the target (`diff`), the
audits (`audits`), the publish (`publish`) and the refusals a person reviews
(`reviews`). The engine's gated finalize (`engine.gated_finalize`) runs them in one
fenced transaction; the asset checks are the orchestration's (`orchestration.gate_checks`).

`from jobs_platform import audits` is the `audits` module: `audits.not_null("amount")`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["audits"]


def __getattr__(name: str) -> ModuleType:
    # Imported on first use: the CLI reads refusals (`gate.reviews`) without pandas.
    if name == "audits":
        return importlib.import_module("jobs_platform.gate.audits")
    raise AttributeError(f"module 'jobs_platform.gate' has no attribute {name!r}")
