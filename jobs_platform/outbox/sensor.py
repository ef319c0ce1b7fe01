"""The outbox in Dagster: `backfill_request_sensor` turns requests into runs; `outbox_health`.

A tick takes requests in a short warehouse transaction (those earlier ticks claimed whose
runs Dagster does not have yet, then new pending ones), only requests for assets this
code location has: several locations may share the warehouse, and a request for another
location's asset (or for one no location serves yet) stays pending, for that location.
It validates each against this code location outside any transaction (the asset, its
partitions, the payload version), asks
the Dagster instance which of their runs exist, then in a second short transaction marks
the invalid ones rejected and those with every run launched, and returns run requests for
the runs still missing. Short transactions matter on SQLite, where a transaction holds
the warehouse's only write lock.

Launches are at-least-once, and a repeat is harmless:
- a request is marked launched only when a later tick finds its runs in the instance, so
  a tick that dies, times out, or whose result never reaches the daemon loses nothing: the
  next tick requests the same runs again;
- a repeated run request carries the same run key, and the daemon skips a run key this
  sensor has used (a run it created but never submitted is launched, not created again);
- `FOR UPDATE SKIP LOCKED` lets two ticks at the same moment take different new requests;
- a marked request is never claimed again.

Run keys: `"{id}"` for a one-partition request, `"{id}:{partition}"` per partition of a
request that names several.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from jobs_platform.orchestration.launch_sensors import backfill_launching_sensor
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import served_assets, with_downstream_backfills
from jobs_platform.orchestration.tags import BACKFILL_TAG, CORRELATION_TAG, REQUEST_ID_TAG
from jobs_platform.outbox import payload
from jobs_platform.outbox import store as outbox_store
from jobs_platform.outbox.queue import ClaimedRequest
from jobs_platform.store.outbox_backlog import QueueStats

OUTBOX_TICK_SECONDS = 15
# A request may name up to MAX_PARTITIONS_PER_REQUEST partitions, one run each: ten new
# requests and ten claimed earlier keep a tick to a few thousand run requests at worst.
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

    request: ClaimedRequest
    asset_key: dg.AssetKey
    partitions: tuple[str, ...]
    selection: tuple[dg.AssetKey, ...]  # the asset and the backfills it feeds
    dynamic_partitions_name: str | None = None
    new_dynamic_keys: tuple[str, ...] = ()

    @property
    def run_key(self) -> str:
        return str(self.request.id)

    @property
    def correlation_id(self) -> str:
        # A request without one still gets an id that leads back to it from every attempt.
        return self.request.correlation_id or f"outbox-{self.request.id}"

    @property
    def run_tags(self) -> dict[str, str]:
        return {CORRELATION_TAG: self.correlation_id, REQUEST_ID_TAG: str(self.request.id)}

    def run_key_of(self, partition: str) -> str:
        return self.run_key if len(self.partitions) == 1 else f"{self.run_key}:{partition}"

    def missing_partitions(self, instance: dg.DagsterInstance) -> list[str]:
        """The partitions with no launched run of this request in the instance yet."""
        keys = [self.run_key_of(partition) for partition in self.partitions]
        found = launched_runs(instance, keys, {REQUEST_ID_TAG: str(self.request.id)})
        return [p for p in self.partitions if self.run_key_of(p) not in found]

    def run_requests(self, partitions: Sequence[str]) -> list[dg.RunRequest]:
        return [
            dg.RunRequest(
                run_key=self.run_key_of(partition),
                partition_key=partition,
                asset_selection=list(self.selection),
                tags=self.run_tags,
            )
            for partition in partitions
        ]


def plan_launch(
    request: ClaimedRequest,
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
    selection = tuple(with_downstream_backfills(graph, asset_key))
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name:
        # New keys of a dynamic definition are valid: the sensor adds them before the runs.
        _reject_keys(
            request.asset,
            [k for k in partitions if any(bad in k for bad in _FORBIDDEN_IN_DYNAMIC_KEYS)],
            partitions,
            "invalid dynamic partition key(s)",
        )
        new = [k for k in partitions if not instance.has_dynamic_partition(partitions_def.name, k)]
        return LaunchPlan(
            request, asset_key, tuple(partitions), selection, partitions_def.name, tuple(new)
        )
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        unknown = [k for k in partitions if not partitions_def.has_partition_key(k)]
    _reject_keys(request.asset, unknown, partitions, "unknown partition key(s)")
    return LaunchPlan(request, asset_key, tuple(partitions), selection)


@functools.cache
def backfill_request_sensor_named(names: FrameworkNames = BARE) -> dg.SensorDefinition:
    """The outbox sensor under one code location's names."""
    return backfill_launching_sensor(
        names.definition("backfill_request_sensor"),
        OUTBOX_TICK_SECONDS,
        "Launches the backfills of this code location requested through the outbox "
        "(request_backfill); rejects those that name no backfill or no valid partition, and "
        "leaves requests for other locations' assets to them.",
        _outbox_tick,
    )


def _outbox_tick(
    context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
) -> dg.SensorResult:
    repository = context.repository_def
    if repository is None:
        return dg.SensorResult(skip_reason="no code location to validate requests against")
    assets = served_assets(repository)
    store = jobs_platform.ready_store()
    with store.begin() as connection:
        earlier = store.outbox.reclaim_unlaunched(connection, REQUESTS_PER_TICK, assets=assets)
        fresh = store.outbox.claim_pending(connection, REQUESTS_PER_TICK, assets=assets)
    if not earlier and not fresh:
        return dg.SensorResult(skip_reason="no pending backfill requests")
    plans, rejections = [], []
    for request in [*earlier, *fresh]:
        try:
            plans.append(plan_launch(request, repository, context.instance))
        except RequestRejected as refusal:
            rejections.append((request, str(refusal)))
    to_request = [(plan, plan.missing_partitions(context.instance)) for plan in plans]
    with store.begin() as connection:
        launched = [
            plan
            for plan, missing in to_request
            if not missing and store.outbox.mark_launched(connection, plan.request.id, plan.run_key)
        ]
        rejected = [
            (request, reason)
            for request, reason in rejections
            if outbox_store.mark_rejected(connection, request.id, reason)
        ]
    to_request = [(plan, missing) for plan, missing in to_request if missing]
    _log_tick(context.log, {request.id for request in fresh}, to_request, launched, rejected)
    run_requests = [run for plan, missing in to_request for run in plan.run_requests(missing)]
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=_add_new_keys([plan for plan, _ in to_request]),
        skip_reason=None if run_requests else "no backfill request is waiting for a run",
    )


def _log_tick(
    log,
    fresh_ids: set[int],
    to_request: Sequence[tuple[LaunchPlan, Sequence[str]]],
    launched: Sequence[LaunchPlan],
    rejected: Sequence[tuple[ClaimedRequest, str]],
) -> None:
    for request, reason in rejected:
        log.warning(f"backfill request {request.id} ({request.asset}) rejected: {reason}")
    for plan, missing in to_request:
        name = f"backfill request {plan.request.id}: {plan.asset_key.to_user_string()}"
        if plan.request.id in fresh_ids:
            log.info(
                f"{name} x {len(plan.partitions)} partition(s), correlation id "
                f"{plan.correlation_id}"
            )
        else:
            log.warning(
                f"{name}: no run yet for {len(missing)} of {len(plan.partitions)} "
                "partition(s); requesting them again"
            )
    for plan in launched:
        log.info(f"backfill request {plan.request.id}: every run exists, launched")


def outbox_health_asset(
    backfills: Sequence[dg.AssetKey], names: FrameworkNames = BARE
) -> dg.AssetsDefinition:
    """The `outbox_health` asset over the requests for `backfills` (a code location's)."""
    key = names.asset_key("outbox_health")
    assets = sorted(backfill.to_user_string() for backfill in backfills)
    sensor_name = names.definition("backfill_request_sensor")

    @dg.asset(
        key=key,
        group_name="outbox",
        description="The backfill requests for this code location's backfills: pending "
        "requests and the age of the oldest, claimed, launched and rejected counts. "
        "Materialize to refresh.",
        check_specs=[
            dg.AssetCheckSpec(
                HEALTH_CHECK_NAME,
                asset=key,
                description=f"Warns when a request has waited over {STALE_PENDING_SECONDS} s.",
            )
        ],
    )
    def outbox_health(jobs_platform: JobsPlatformResource) -> dg.MaterializeResult:
        store = jobs_platform.ready_store()
        with store.connect() as connection:
            stats = store.outbox_backlog.queue_stats(connection, assets=assets)
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
                    f"{sensor_name} running?",
                    metadata=metadata,
                )
            ],
        )

    return outbox_health


def health_metadata(stats: QueueStats) -> dict:
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


backfill_request_sensor = backfill_request_sensor_named(BARE)
