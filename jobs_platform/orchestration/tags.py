"""Every run and asset tag the framework reads or writes, and the run keys it builds.

Dagster's own tags are spelled out here rather than imported from `dagster._core`, which
is private; their values are part of Dagster's documented run tags and do not change.
Plain strings, no `import dagster`: the CLI and the tests use them too.
"""

import hashlib
from collections.abc import Mapping

BACKFILL_TAG = "jobs_platform/backfill"
"""Asset tag (`"true"`) of every asset `backfill_asset` declares."""
STEP_ASSETS_TAG = "jobs_platform/assets"
"""Op tag of a backfill step: the comma-separated backfill assets the step computes."""
CHAIN_METADATA = "jobs_platform/chain"
"""Asset metadata of a backfill that runs in one step with others (a chain): the chain's
backfills, comma-separated, upstream first."""
STEP_METADATA = "jobs_platform/step"
"""Asset metadata of a chained backfill: the op (the step) that computes it."""
RUN_CONFIG_METADATA = "jobs_platform/run_config"
"""Asset metadata of a chained backfill: where its run config goes
(`ops.chain__orders__daily_revenue.config.daily_revenue`)."""
CORRELATION_TAG = "jobs_platform/correlation_id"
"""Run tag carried into every attempt's history, so a request can be followed end to end."""
REQUEST_ID_TAG = "jobs_platform/request_id"
"""Run tag naming the outbox request a run was launched for."""

PARTITION_TAG = "dagster/partition"
"""The partition of a one-partition run."""
PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
RUN_KEY_TAG = "dagster/run_key"
"""A run's key; a sensor never creates two runs with the same key."""

HELD_ASSET_TAG = "jobs_platform/held_asset"
"""Run tag of a run the holds sensor launches for held partitions: their asset (how such
runs are found again, by their keys `hold-…`)."""

REQUEUE_RUN_KEY_PREFIX = "requeue-"
REQUEUE_ASSET_TAG = "jobs_platform/requeue_asset"
"""Run tag of a run relaunching requeued entries: their asset (how such runs are found)."""
REQUEUE_ENTRIES_TAG = "jobs_platform/requeue_entries"
"""Run tag of a run relaunching requeued entries: their ids (`12-14,19`, ranges of ids), an
entry released again after its first run ended with `#` and the release (`19#2`)."""


def requeue_run_key(entry_id: int, release: int = 1) -> str:
    """The run key of the run that relaunches a requeued quarantine entry: `requeue-<id>`,
    and `requeue-<id>#<release>` for a later release of the same entry (a person requeued
    it again after its run ended without an attempt), so that it gets a run of its own."""
    suffix = f"#{release}" if release > 1 else ""
    return f"{REQUEUE_RUN_KEY_PREFIX}{entry_id}{suffix}"


def requeue_range_run_key(entry_ids: list[int], releases: Mapping[int, int] | None = None) -> str:
    """The run key of a run that relaunches several requeued entries (ids sorted):
    `requeue-<first>..<last>-<digest of every id and release>`, one key per set of entries
    and releases."""
    digest = hashlib.sha1(_entry_tokens(entry_ids, releases or {}).encode()).hexdigest()[:8]
    return f"{REQUEUE_RUN_KEY_PREFIX}{entry_ids[0]}..{entry_ids[-1]}-{digest}"


def _entry_tokens(entry_ids: list[int], releases: Mapping[int, int]) -> str:
    # A first release is the bare id: the keys of runs launched before releases were
    # numbered stay what they were.
    return ",".join(
        f"{entry_id}#{releases[entry_id]}" if releases.get(entry_id, 1) > 1 else str(entry_id)
        for entry_id in entry_ids
    )


def tagged_entry_ids(entry_ids: list[int], releases: Mapping[int, int] | None = None) -> str:
    """Sorted entry ids as a short tag value: runs of consecutive ids in their first release
    as `first-last`, then each later release as `id#release`."""
    releases = releases or {}
    spans: list[list[int]] = []
    for entry_id in entry_ids:
        if releases.get(entry_id, 1) > 1:
            continue
        if spans and entry_id == spans[-1][1] + 1:
            spans[-1][1] = entry_id
        else:
            spans.append([entry_id, entry_id])
    first = [str(a) if a == b else f"{a}-{b}" for a, b in spans]
    later = [f"{i}#{releases[i]}" for i in entry_ids if releases.get(i, 1) > 1]
    return ",".join(first + later)


def entry_ids_of(tag: str) -> list[int]:
    """The entry ids a `tagged_entry_ids` value names (nothing for another value)."""
    return sorted(tagged_releases(tag))


def tagged_releases(tag: str) -> dict[int, int]:
    """The release of each entry a `tagged_entry_ids` value names, by entry id (nothing for
    another value)."""
    releases: dict[int, int] = {}
    for span in filter(None, tag.split(",")):
        span, _, release = span.partition("#")
        first, _, last = span.partition("-")
        numbers = [first, *([last] if last else []), *([release] if release else [])]
        if not all(number.isdigit() for number in numbers) or (release and last):
            return {}
        for entry_id in range(int(first), int(last or first) + 1):
            releases[entry_id] = int(release or 1)
    return releases


def downstream_run_key(entry_id: int, asset: str, partition: str) -> str:
    """The run key of the run that brings a partition reading a requeued one up to date
    (the day of a fixed hour), once that one succeeded."""
    return f"{requeue_run_key(entry_id)}:{asset}:{partition}"
