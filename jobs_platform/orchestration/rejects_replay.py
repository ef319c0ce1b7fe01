"""Replay rejected rows when a backfill's code changes (`rejects_replayed`).

A partition that set rows aside under `bad_rows=RejectRows(...)` keeps, with each, the
`code_version` that rejected it (`writer.rejects`). Once the backfill's `code_version` is
another (a validator fixed), the requeue sensor launches a run of each such done
partition, a contiguous range of them per run as a requeue does. The run reads the input
again under the new code: the rows it accepts leave `dead-letter rows`, each with its
journey kept (`dead-letter rows --journeys`); a row still rejected is kept under the new
version, so it is not replayed again. Nothing is asked of the user beyond the bump.

Once per version: each run's key names the backfill, the version and its range, and an
asset with a replay run still going gets no other until it ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import served_backfills, with_downstream_backfills
from jobs_platform.orchestration.specs import backfill_specs
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.writer.rejects import partitions_to_replay

__all__ = ["REPLAY_REASON", "REPLAY_TAG", "replay_requests"]

REPLAY_REASON = "rejects_replayed"
# On each replay run: the asset whose rejects it replays; its reason and version beside it.
REPLAY_TAG = "jobs_platform/rejects_replayed"
REPLAY_VERSION_TAG = "jobs_platform/replayed_for_code_version"
REPLAYS_PER_TICK = 100  # partitions per asset per tick; the rest follow next tick
_GOING = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def replay_requests(
    repository: dg.RepositoryDefinition, instance: dg.DagsterInstance, store: Warehouse
) -> list[dg.RunRequest]:
    """The runs that replay the rejects of this location's backfills, not launched yet."""
    served = set(served_backfills(repository))
    specs = [
        spec
        for name, spec in backfill_specs(repository.assets_defs_by_key.values()).items()
        if name in served and spec.redrive and spec.bad_rows is not None and spec.version
    ]
    if not specs:
        return []
    with store.connect() as connection:
        todo = {
            spec.asset: partitions_to_replay(
                connection, spec.asset, spec.version, limit=REPLAYS_PER_TICK
            )
            for spec in specs
        }
    requests: dict[str, dg.RunRequest] = {}
    for spec in specs:
        if todo[spec.asset] and not _replay_going(instance, spec.asset):
            for request in _requests_of(repository.asset_graph, instance, spec, todo[spec.asset]):
                requests[str(request.run_key)] = request
    launched = launched_runs(instance, list(requests), {})
    return [request for key, request in requests.items() if key not in launched]


def _replay_going(instance: dg.DagsterInstance, asset: str) -> bool:
    """Whether a replay run of `asset` has not ended: its partitions are not done yet."""
    going = instance.get_run_records(
        dg.RunsFilter(tags={REPLAY_TAG: asset}, statuses=_GOING), limit=1
    )
    return bool(going)


def _requests_of(
    graph, instance: dg.DagsterInstance, spec: BackfillSpec, partitions: Sequence[str]
) -> list[dg.RunRequest]:
    """One run per contiguous range of `partitions`, at most the policy's per run."""
    from jobs_platform.dead_letter.requeue_plan import partitions_per_run

    key = dg.AssetKey.from_user_string(spec.asset)
    selection = with_downstream_backfills(graph, key)
    limit = partitions_per_run(graph, selection) or len(partitions)
    definition = graph.get(key).partitions_def
    order = {
        k: n for n, k in enumerate(definition.get_partition_keys(dynamic_partitions_store=instance))
    }
    ranges: list[list[str]] = []
    for partition in sorted(partitions, key=lambda p: order.get(p, -1)):
        current = ranges[-1] if ranges else None
        follows = (
            current is not None
            and partition in order
            and current[-1] in order
            and order[partition] == order[current[-1]] + 1
            and len(current) < limit
        )
        if follows:
            current.append(partition)  # type: ignore[union-attr]
        else:
            ranges.append([partition])
    tags = {REPLAY_TAG: spec.asset, REPLAY_VERSION_TAG: spec.version}
    requests = []
    for run in ranges:
        first, last = run[0], run[-1]
        run_key = f"{REPLAY_REASON}:{spec.asset}:{spec.version}:{first}:{last}"
        if first == last:
            requests.append(
                dg.RunRequest(
                    run_key=run_key, partition_key=first, asset_selection=selection, tags=tags
                )
            )
        else:
            range_tags = {PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last}
            requests.append(
                dg.RunRequest(
                    run_key=run_key, asset_selection=selection, tags={**tags, **range_tags}
                )
            )
    return requests
