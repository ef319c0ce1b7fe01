"""The outbox in Dagster: `backfill_request_sensor` turns requests into runs; `outbox_health`.

A tick claims pending requests (a short warehouse transaction), validates each against
this code location outside any transaction (the asset, its partitions, the payload
version), then marks each launched or rejected (a second short transaction) and returns
the runs. Short transactions matter on SQLite, where a transaction holds the warehouse's
only write lock. Why nothing launches twice:
- a request leaves `pending` once, under `FOR UPDATE SKIP LOCKED`: two ticks at the same
  moment take different requests;
- a claim whose tick died is taken again after `CLAIM_TIMEOUT_SECONDS` and yields the same
  run keys, which the sensor daemon launches once;
- a marked request is never claimed again.

Run keys: `"{id}"` for a one-partition request, `"{id}:{partition}"` per partition of a
request that names several.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.selections import BACKFILL_ASSETS
from jobs_platform.orchestration.tags import BACKFILL_TAG, CORRELATION_TAG, REQUEST_ID_TAG
from jobs_platform.outbox import payload
from jobs_platform.outbox import store as outbox_store
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_tables

OUTBOX_TICK_SECONDS = 15
# A request may name up to MAX_PARTITIONS_PER_REQUEST partitions, one run each: ten
# requests keep a tick to a few thousand run requests at worst.
REQUESTS_PER_TICK = 10
# The health check warns when the oldest pending request waited longer than this: the
# sensor is off, failing, or cannot keep up.
STALE_PENDING_SECONDS = 600
HEALTH_CHECK_NAME = "outbox_is_draining"
# Dagster refuses these in dynamic partition keys; control characters, which it also
# refuses, never pass the request contract.
_FORBIDDEN_IN_DYNAMIC_KEYS = ("...",)
_LISTED_KEYS = 5


class RequestRejected(Exception):
    """A claimed request that can never run; the message says why."""


@dataclass(frozen=True)
class LaunchPlan:
    """A validated request: its asset, its partitions and the dynamic keys to add first."""

    request: outbox_store.ClaimedRequest
    asset_key: dg.AssetKey
    partitions: tuple[str, ...]
    dynamic_partitions_name: str | None = None
    new_dynamic_keys: tuple[str, ...] = ()

    @property
    def run_key(self) -> str:
        return str(self.request.id)

    @property
    def correlation_id(self) -> str:
        # A request without one still gets an id that leads back to it from every attempt.
        return self.request.correlation_id or f"outbox-{self.request.id}"

    def run_requests(self) -> list[dg.RunRequest]:
        tags = {CORRELATION_TAG: self.correlation_id, REQUEST_ID_TAG: str(self.request.id)}
        single = len(self.partitions) == 1
        return [
            dg.RunRequest(
                run_key=self.run_key if single else f"{self.run_key}:{partition}",
                partition_key=partition,
                asset_selection=[self.asset_key],
                tags=tags,
            )
            for partition in self.partitions
        ]


def plan_launch(
    request: outbox_store.ClaimedRequest,
    repository: dg.RepositoryDefinition,
    instance: dg.DagsterInstance,
) -> LaunchPlan:
    """Validate a stored request as untrusted input; `RequestRejected` says what is wrong."""
    if request.schema_version not in payload.KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in sorted(payload.KNOWN_SCHEMA_VERSIONS))
        raise RequestRejected(
            f"unknown schema_version {request.schema_version!r} (this code location knows {known})"
        )
    try:
        partitions = payload.parse_partitions(request.partitions)
    except payload.InvalidRequest as error:
        raise RequestRejected(f"invalid partitions: {error}") from None
    asset_key = dg.AssetKey.from_user_string(request.asset)
    graph = repository.asset_graph
    if not graph.has(asset_key) or not graph.get(asset_key).is_materializable:
        raise RequestRejected(f"unknown asset {request.asset!r}: not in this code location")
    node = graph.get(asset_key)
    if node.tags.get(BACKFILL_TAG) != "true":
        raise RequestRejected(
            f"asset {request.asset!r} is not a backfill (no tag {BACKFILL_TAG}=true)"
        )
    partitions_def = node.partitions_def
    if partitions_def is None:
        raise RequestRejected(f"asset {request.asset!r} is not partitioned")
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name:
        # New keys of a dynamic definition are valid: the sensor adds them before the runs.
        _reject_keys(
            request.asset,
            [k for k in partitions if any(bad in k for bad in _FORBIDDEN_IN_DYNAMIC_KEYS)],
            partitions,
            "invalid dynamic partition key(s)",
        )
        new = [k for k in partitions if not instance.has_dynamic_partition(partitions_def.name, k)]
        return LaunchPlan(request, asset_key, tuple(partitions), partitions_def.name, tuple(new))
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        unknown = [k for k in partitions if not partitions_def.has_partition_key(k)]
    _reject_keys(request.asset, unknown, partitions, "unknown partition key(s)")
    return LaunchPlan(request, asset_key, tuple(partitions))


@dg.sensor(
    name="backfill_request_sensor",
    asset_selection=BACKFILL_ASSETS,
    minimum_interval_seconds=OUTBOX_TICK_SECONDS,
    # On by default: a request written by application code must launch without anyone
    # first finding and starting a sensor in the UI.
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches the backfills requested through the outbox (request_backfill); "
    "rejects requests that name no backfill or no valid partition.",
)
def backfill_request_sensor(
    context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
) -> dg.SensorResult:
    repository = context.repository_def
    if repository is None:
        return dg.SensorResult(skip_reason="no code location to validate requests against")
    engine = warehouse_engine(jobs_platform.settings().database_url)
    create_tables(engine)
    with engine.begin() as connection:
        claimed = outbox_store.claim_pending(connection, REQUESTS_PER_TICK)
    if not claimed:
        return dg.SensorResult(skip_reason="no pending backfill requests")
    plans, rejections = [], []
    for request in claimed:
        try:
            plans.append(plan_launch(request, repository, context.instance))
        except RequestRejected as rejected:
            rejections.append((request, str(rejected)))
    # Marked before the runs are returned. Should this tick die before it returns, the
    # requests stay claimed and a later tick yields the same run keys.
    with engine.begin() as connection:
        launched = [
            plan
            for plan in plans
            if outbox_store.mark_launched(connection, plan.request.id, plan.run_key)
        ]
        rejected = [
            (request, reason)
            for request, reason in rejections
            if outbox_store.mark_rejected(connection, request.id, reason)
        ]
    for request, reason in rejected:
        context.log.warning(f"backfill request {request.id} ({request.asset}) rejected: {reason}")
    for plan in launched:
        context.log.info(
            f"backfill request {plan.request.id}: {plan.asset_key.to_user_string()} x "
            f"{len(plan.partitions)} partition(s), correlation id {plan.correlation_id}"
        )
    run_requests = [run for plan in launched for run in plan.run_requests()]
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=_add_new_keys(launched),
        skip_reason=None if run_requests else "every claimed request was rejected",
    )


@dg.asset(
    name="outbox_health",
    group_name="outbox",
    description="The backfill request outbox: pending requests and the age of the oldest, "
    "claimed, launched and rejected counts. Materialize to refresh.",
    check_specs=[
        dg.AssetCheckSpec(
            HEALTH_CHECK_NAME,
            asset="outbox_health",
            description=f"Warns when a request has waited over {STALE_PENDING_SECONDS} s.",
        )
    ],
)
def outbox_health(jobs_platform: JobsPlatformResource) -> dg.MaterializeResult:
    engine = warehouse_engine(jobs_platform.settings().database_url)
    create_tables(engine)
    with engine.connect() as connection:
        stats = outbox_store.queue_stats(connection)
    metadata = health_metadata(stats)
    age = stats.oldest_pending_age_seconds
    draining = age is None or age <= STALE_PENDING_SECONDS
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name=HEALTH_CHECK_NAME,
                passed=draining,
                severity=dg.AssetCheckSeverity.WARN,
                description=None
                if draining
                else f"the oldest pending request has waited {age:.0f} s: is "
                "backfill_request_sensor running?",
                metadata=metadata,
            )
        ],
    )


def health_metadata(stats: outbox_store.QueueStats) -> dict:
    age = stats.oldest_pending_age_seconds
    return {
        "pending_count": stats.pending,
        "oldest_pending_age_seconds": dg.MetadataValue.float(round(age, 3))
        if age is not None
        else dg.MetadataValue.null(),
        "claimed_count": stats.claimed,
        "launched_count": stats.launched,
        "rejected_count": stats.rejected,
    }


def _reject_keys(asset: str, bad: Sequence[str], partitions: Sequence[str], what: str) -> None:
    if not bad:
        return
    listed = ", ".join(repr(key) for key in bad[:_LISTED_KEYS])
    more = f" and {len(bad) - _LISTED_KEYS} more" if len(bad) > _LISTED_KEYS else ""
    raise RequestRejected(f"{what} of {asset!r}: {listed}{more} ({len(bad)} of {len(partitions)})")


def _add_new_keys(plans: Sequence[LaunchPlan]) -> list[dg.AddDynamicPartitionsRequest]:
    """One add request per dynamic definition, each new key once (Dagster refuses repeats)."""
    keys_by_name: dict[str, dict[str, None]] = {}
    for plan in plans:
        if plan.dynamic_partitions_name and plan.new_dynamic_keys:
            keys = keys_by_name.setdefault(plan.dynamic_partitions_name, {})
            keys.update(dict.fromkeys(plan.new_dynamic_keys))
    return [
        dg.AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=list(keys))
        for name, keys in keys_by_name.items()
    ]
