"""The examples' `landing` resource: where their input files land, as a user would write it.

The framework hands a reader no paths: a backfill's input is the reader's own business,
reached through its resources (a landing zone here, a database or an API client elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

LANDING_RESOURCE_KEY = "landing"


class LandingZone(dg.ConfigurableResource):
    """The root of the landing zone, a local path or an fsspec URL such as `s3://…`.

    `root` when configured; else `JOBS_PLATFORM_LANDING`, read when a step runs (the
    variable `orders-example seed` and the demo write to); else `.jobs_platform/landing`
    in the working directory.
    """

    root: str | None = None

    def resolved_root(self) -> str:
        return (
            self.root
            or os.environ.get("JOBS_PLATFORM_LANDING")
            or str(Path.cwd() / ".jobs_platform" / "landing")
        )
