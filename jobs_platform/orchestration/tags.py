"""Every run and asset tag the framework reads or writes, and the run keys it builds.

Dagster's own tags are spelled out here rather than imported from `dagster._core`, which
is private; their values are part of Dagster's documented run tags and do not change.
Plain strings, no `import dagster`: the CLI and the tests use them too.
"""

BACKFILL_TAG = "jobs_platform/backfill"
"""Asset tag (`"true"`) of every asset `backfill_asset` declares."""
STEP_ASSETS_TAG = "jobs_platform/assets"
"""Op tag of a backfill step: the comma-separated backfill assets the step computes."""
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

REQUEUE_RUN_KEY_PREFIX = "requeue-"


def requeue_run_key(entry_id: int) -> str:
    """The run key of the run that relaunches a requeued quarantine entry."""
    return f"{REQUEUE_RUN_KEY_PREFIX}{entry_id}"


def downstream_run_key(entry_id: int, asset: str, partition: str) -> str:
    """The run key of the run that brings a partition reading a requeued one up to date
    (the day of a fixed hour), once that one succeeded."""
    return f"{requeue_run_key(entry_id)}:{asset}:{partition}"
