"""How the framework's own definitions are named in one code location.

Several code locations of one workspace may share a warehouse, each built with
`platform_definitions`: their dead-letter assets, sensors, jobs and schedules must not
collide. Bare by default (`dead_letter`, `dead_letter_sensor`: the bundled location and
a workspace of one); with a location name, asset keys are prefixed by it
(`acme/dead_letter`) and so are definition names (`acme_dead_letter_sensor`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import dagster as dg

# What Dagster accepts in a definition name, and so in an asset key's prefix.
_VALID_LOCATION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class FrameworkNames:
    """The names of one location's framework definitions: bare, or prefixed by `location`."""

    location: str | None = None

    def __post_init__(self) -> None:
        if self.location is not None and not _VALID_LOCATION.match(self.location):
            raise ValueError(
                f"location {self.location!r}: letters, digits and underscores only, not "
                "starting with a digit (it prefixes asset keys and definition names)"
            )

    def asset_key(self, name: str) -> dg.AssetKey:
        """`name`, or `location/name`."""
        return dg.AssetKey([self.location, name] if self.location else [name])

    def definition(self, name: str) -> str:
        """`name`, or `location_name`: a sensor, job, schedule or dynamic partitions set."""
        return f"{self.location}_{name}" if self.location else name


BARE = FrameworkNames()
"""The names of a location built without `location=` (the bundled one)."""
