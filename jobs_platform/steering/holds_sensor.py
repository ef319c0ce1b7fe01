"""The holds sensor: launches held partitions again once resumed or ready, once each.

A run that reaches a partition of a paused backfill, or one whose input is not ready,
holds it (`engine.holding`) and records the hold (`steering.holds`). At each tick this
sensor, for each backfill of the code location that is not paused:

- forgets the holds whose run it requested and Dagster now has (by run key), and those
  another run has done since they were held;
- asks `ready` about at most `READINESS_CHECKS_PER_TICK` partitions held as not ready,
  the least recently checked first, as the redrive walks its entries, and reports once
  those held longer than the backfill's `max_wait` (a notice, `alerts.notices`, which the
  dead-letter sensor delivers to every sink; never quarantined);
- requests one run per contiguous range of the partitions to launch (a lifted pause's
  holds, the ready ones), at most the backfill policy's partitions per run, with the
  backfills they feed, each under a run key of its own (`hold-…`): the daemon skips a key
  it has seen, so each held partition is launched once, through the run queue.

A paused backfill is left alone: nothing is launched or checked until it is resumed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from jobs_platform.alerts.notices import raise_notice
from jobs_platform.dead_letter.requeue_plan import partitions_per_run
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.backfill_asset import (
    RESOURCE_KEY,
    ready_in_sensor,
    resource_parameters,
)
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import (
    BACKFILL_ASSETS,
    served_backfills,
    with_downstream_backfills,
)
from jobs_platform.orchestration.specs import backfill_specs
from jobs_platform.orchestration.tags import (
    HELD_ASSET_TAG,
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
)
from jobs_platform.steering.holds import Hold, held_partitions
from jobs_platform.steering.pauses import paused_backfills
from jobs_platform.steering.readiness import READINESS_CHECKS_PER_TICK, split_by_readiness

HOLDS_TICK_SECONDS = 30
HOLD_RUN_KEY_PREFIX = "hold-"
NOT_READY_NOTICE = "not_ready"
"""The notice's kind (`alerts.notices`) for a partition not ready past its `max_wait`."""


@dataclass(frozen=True)
class HeldRun:
    """One run launching held partitions of one asset: a contiguous range of its
    partitions, with the backfills it feeds, under its run key."""

    asset: str
    selection: tuple[dg.AssetKey, ...]
    partitions: tuple[str, ...]
    run_key: str

    def run_request(self) -> dg.RunRequest:
        """The run as a sensor asks for it (the daemon turns a partition into its tag)."""
        first, last = self.partitions[0], self.partitions[-1]
        tags = {HELD_ASSET_TAG: self.asset}
        if first != last:
            tags |= {PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last}
        return dg.RunRequest(
            run_key=self.run_key,
            partition_key=first if first == last else None,
            asset_selection=list(self.selection),
            tags=tags,
        )

    def describe(self) -> str:
        first, last = self.partitions[0], self.partitions[-1]
        span = first if first == last else f"{first}..{last}"
        return f"{self.asset} {span} ({len(self.partitions)} held), run key {self.run_key}"


def hold_run_key(asset: str, holds: Sequence[Hold]) -> str:
    """A run key naming these holds as they were held: the same holds give the same key
    (a repeated request is skipped), a partition held again since gives a new one."""
    digest = hashlib.sha256()
    for hold in sorted(holds, key=lambda hold: hold.partition):
        digest.update(f"{asset}\0{hold.partition}\0{hold.held_at.isoformat()}\0".encode())
    first, last = min(h.partition for h in holds), max(h.partition for h in holds)
    span = first if first == last else f"{first}..{last}"
    return f"{HOLD_RUN_KEY_PREFIX}{asset}-{span}-{digest.hexdigest()[:12]}"


def holds_sensor_named(
    names: FrameworkNames = BARE, backfills: Sequence[dg.AssetsDefinition] = ()
) -> dg.SensorDefinition:
    """The holds sensor under one code location's names. It takes the resources the
    `ready=` functions of `backfills` take, as their steps do."""
    ready_resources = {
        name
        for spec in backfill_specs(backfills).values()
        if spec.ready is not None
        for name in resource_parameters(spec.ready)
    }

    @dg.sensor(
        name=names.definition("holds_sensor"),
        asset_selection=BACKFILL_ASSETS,
        minimum_interval_seconds=HOLDS_TICK_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={RESOURCE_KEY, *ready_resources},
        description="Launches the partitions a paused backfill held once it is resumed, and "
        "those held as not ready once their input is (`ready=`), once each.",
    )
    def holds_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return holds_tick(context)

    return holds_sensor


def holds_tick(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """One tick of the holds sensor (see the module's docstring)."""
    repository = context.repository_def
    served = served_backfills(repository)
    if repository is None or not served:
        return dg.SensorResult(skip_reason="this code location serves no backfill")
    specs = backfill_specs(repository.assets_defs_by_key.values())
    store: Warehouse = getattr(context.resources, RESOURCE_KEY).ready_store()
    with store.connect() as connection:
        paused = paused_backfills(connection)
    requests: list[dg.RunRequest] = []
    for asset in served:
        if asset in paused:
            continue
        for run in _held_runs(context, repository.asset_graph, store, asset, specs.get(asset)):
            context.log.info(f"launching {run.describe()}")
            requests.append(run.run_request())
    return dg.SensorResult(
        run_requests=requests,
        skip_reason=None if requests else "no held partition to launch",
    )


def _held_runs(
    context: dg.SensorEvaluationContext,
    graph,
    store: Warehouse,
    asset: str,
    spec: BackfillSpec | None,
) -> list[HeldRun]:
    with store.begin() as connection:
        store.holds.forget_done(connection, asset)
        launched = {
            hold.launch_key for hold in store.holds.to_launch(connection, asset) if hold.launch_key
        }
    found = launched_runs(context.instance, launched, {HELD_ASSET_TAG: asset})
    with store.begin() as connection:
        store.holds.forget_launched(connection, found)
        to_launch = store.holds.to_launch(connection, asset)
    to_launch += _ready_now(context, store, asset, spec)
    key = dg.AssetKey.from_user_string(asset)
    if not graph.has(key):
        return []
    selection = tuple(with_downstream_backfills(graph, key))
    runs: list[HeldRun] = []
    # A request made before and not found yet is asked again under its own key.
    again: dict[str, list[Hold]] = {}
    fresh = []
    for hold in to_launch:
        if hold.launch_key is not None:
            again.setdefault(hold.launch_key, []).append(hold)
        else:
            fresh.append(hold)
    for run_key, holds in again.items():
        runs.append(HeldRun(asset, selection, tuple(sorted(h.partition for h in holds)), run_key))
    positions = _positions(graph.get(key).partitions_def, context.instance)
    new_runs = [
        HeldRun(asset, selection, tuple(h.partition for h in holds), hold_run_key(asset, holds))
        for holds in _contiguous(fresh, positions, partitions_per_run(graph, selection))
    ]
    # Marked before the daemon sees the requests: a tick that fails after this asks again
    # under the same keys at the next one.
    with store.begin() as connection:
        for run in new_runs:
            store.holds.mark_launched(connection, asset, run.partitions, run.run_key)
    return runs + new_runs


def _ready_now(
    context: dg.SensorEvaluationContext, store: Warehouse, asset: str, spec: BackfillSpec | None
) -> list[Hold]:
    """The partitions held as not ready whose input is ready now, of at most
    `READINESS_CHECKS_PER_TICK` asked; those past `max_wait` are reported once."""
    with store.connect() as connection:
        to_check = store.holds.to_check(connection, asset, READINESS_CHECKS_PER_TICK)
    if spec is None or spec.ready is None:
        # Its `ready=` is gone from the code: nothing holds these any more.
        return to_check
    ready = ready_in_sensor(spec, context.resources)

    def is_ready(hold: Hold) -> bool:
        try:
            return ready(_sensor_input(hold))
        except Exception as error:
            # Asked again at a later tick; the others of this tick are still asked.
            context.log.warning(
                f"{asset}/{hold.partition}: ready= raised {type(error).__name__}: {error}; "
                "taken as not ready"
            )
            return False

    def _sensor_input(hold: Hold) -> PartitionInput:
        return PartitionInput(
            asset=asset,
            partition_key=hold.partition,
            chunk_rows=DEFAULT_CHUNK_ROWS,
            warehouse=store.engine,
            log=context.log,
            bad_rows=spec.bad_rows,
        )

    ready_holds, waiting = split_by_readiness(to_check, is_ready)
    overdue: list[str] = []
    with store.begin() as connection:
        store.holds.mark_checked(connection, asset, [hold.partition for hold in waiting])
        if spec.max_wait is not None:
            overdue = store.holds.report_overdue(connection, asset, spec.max_wait)
            # In the transaction that marks them reported: each is alerted once.
            for hold in held_partitions(connection, asset, overdue).values():
                raise_not_ready_notice(connection, store, hold, spec.max_wait)
    if overdue:
        report_not_ready(context, asset, overdue, spec.max_wait)
    return ready_holds


def raise_not_ready_notice(
    connection, store: Warehouse, hold: Hold, max_wait: dt.timedelta
) -> None:
    """The alert, once, that `hold` has waited for its input past `max_wait`: delivered to
    every sink by the location's dead-letter sensor (`alerts.notices`)."""
    raise_notice(
        connection,
        store.clock,
        kind=NOT_READY_NOTICE,
        asset=hold.asset,
        key=f"{hold.partition}@{hold.since.isoformat()}",
        summary=f"partition {hold.partition} not ready for longer than its max_wait "
        f"({max_wait}); held, not quarantined",
        details={"partition": hold.partition, "since": hold.since.isoformat()},
    )


def report_not_ready(
    context: dg.SensorEvaluationContext,
    asset: str,
    partitions: Sequence[str],
    max_wait: dt.timedelta | None,
) -> None:
    """Say once that `partitions` of `asset` have waited for their input past `max_wait`."""
    shown = ", ".join(partitions[:10]) + (
        f", … ({len(partitions)} in all)" if len(partitions) > 10 else ""
    )
    context.log.warning(
        f"{asset}: {len(partitions)} partition(s) not ready for longer than their max_wait "
        f"({max_wait}): {shown}; held, not quarantined: they run once their input is ready"
    )


def _positions(
    partitions_def: dg.PartitionsDefinition | None, instance: dg.DagsterInstance
) -> Mapping[str, int] | None:
    """Each key's position where a range between two keys is every key between them."""
    if partitions_def is None or isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return None
    keys = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    return {key: position for position, key in enumerate(keys)}


def _contiguous(
    holds: Sequence[Hold], positions: Mapping[str, int] | None, limit: int | None
) -> list[list[Hold]]:
    """`holds` as runs: one per contiguous range of keys, at most `limit` keys each; a key
    with no known position is a run of its own."""
    if positions is None:
        return [[hold] for hold in holds]
    ranges: list[list[Hold]] = [[hold] for hold in holds if hold.partition not in positions]
    placed = sorted(
        (hold for hold in holds if hold.partition in positions),
        key=lambda hold: positions[hold.partition],
    )
    current: list[Hold] = []
    for hold in placed:
        if current and (
            positions[hold.partition] != positions[current[-1].partition] + 1
            or (limit is not None and len(current) >= limit)
        ):
            ranges.append(current)
            current = []
        current.append(hold)
    if current:
        ranges.append(current)
    return ranges
