"""Which partitions of its upstream backfills a partition reads: Dagster's partition mappings.

A backfill may read another partitioned alike (day for day) or differently (a day of 24
hours, a month of days, a static tenant of a multi-partitioned key), through the mapping
Dagster infers for the pair or the `AssetDep`'s `partition_mapping`. The engine's gate
gets the pairs each partition reads (`UpstreamReads`) and refuses to compute a partition
from partial input; the requeue relaunches what reads a fixed partition. One home for
both directions, so the gate and the relaunch can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from jobs_platform.engine.spec import UpstreamReads, reads_nothing
from jobs_platform.orchestration.tags import BACKFILL_TAG


def reads_alike(
    partitions_def: dg.PartitionsDefinition | None,
    upstream_partitions_def: dg.PartitionsDefinition | None,
    mapping: dg.PartitionMapping | None,
) -> bool:
    """Whether each partition reads the upstream partition of the same key, and only it.

    Such backfills can run as one step (`chain_backfills`) and one run (the requeue's and
    the outbox's selections).
    """
    if partitions_def is None or partitions_def != upstream_partitions_def:
        return False
    if mapping is None or isinstance(mapping, dg.IdentityPartitionMapping):
        return True
    return (
        isinstance(mapping, dg.TimeWindowPartitionMapping)
        and mapping.start_offset == 0
        and mapping.end_offset == 0
    )


def is_backfill(graph, key: dg.AssetKey) -> bool:
    return graph.has(key) and graph.get(key).tags.get(BACKFILL_TAG) == "true"


def upstream_backfills(graph, key: dg.AssetKey) -> list[dg.AssetKey]:
    """The backfills `key` reads (its deps that are backfills of the location), in order."""
    return sorted(parent for parent in graph.get(key).parent_keys if is_backfill(graph, parent))


def upstream_reads(
    graph, key: dg.AssetKey, instance: dg.DagsterInstance | None = None
) -> UpstreamReads:
    """For the gate: the (backfill, partition) pairs each partition of `key` reads.

    An upstream partition its mapping names that the upstream definition does not have
    (a day before the hourly backfill's start) is read too, so it counts as missing: such
    a partition is never computed from what happens to exist.
    """
    parents = upstream_backfills(graph, key)
    if not parents:
        return reads_nothing
    node = graph.get(key)

    # A backfill partitioned alike reads the same key, and only it: no mapping is asked
    # (a plan of 8,760 hours would otherwise ask Dagster 8,760 times per parent).
    alike = {
        parent
        for parent in parents
        if reads_alike(
            node.partitions_def,
            graph.get(parent).partitions_def,
            node.partition_mappings.get(parent),
        )
    }

    def reads(partition: str) -> Sequence[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            for parent in parents:
                parent_def = graph.get(parent).partitions_def
                if parent_def is None:
                    continue
                if parent in alike:
                    pairs.append((parent.to_user_string(), partition))
                    continue
                result = graph.get_partition_mapping(
                    key, parent
                ).get_upstream_mapped_partitions_result_for_partitions(
                    node.partitions_def.subset_with_partition_keys([partition]),
                    node.partitions_def,
                    parent_def,
                    dynamic_partitions_store=instance,
                )
                name = parent.to_user_string()
                pairs += [(name, k) for k in result.partitions_subset.get_partition_keys()]
                pairs += [
                    (name, k) for k in result.required_but_nonexistent_subset.get_partition_keys()
                ]
        return pairs

    return reads


def downstream_partitions(
    graph,
    key: dg.AssetKey,
    partitions: Sequence[str],
    instance: dg.DagsterInstance | None = None,
) -> dict[dg.AssetKey, list[str]]:
    """The partitions of the backfills reading `key` differently partitioned that read
    `partitions` (the hour's day, the day's month): what a fixed upstream partition
    relaunches. Backfills reading `key` alike run with it and are not listed."""
    upstream_def = graph.get(key).partitions_def
    found: dict[dg.AssetKey, list[str]] = {}
    if upstream_def is None:
        return found
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        for child in sorted(graph.get(key).child_keys):
            if not is_backfill(graph, child):
                continue
            child_node = graph.get(child)
            explicit = child_node.partition_mappings.get(key)
            if child_node.partitions_def is None or reads_alike(
                child_node.partitions_def, upstream_def, explicit
            ):
                continue
            subset = graph.get_partition_mapping(
                child, key
            ).get_downstream_partitions_for_partitions(
                upstream_def.subset_with_partition_keys(list(partitions)),
                upstream_def,
                child_node.partitions_def,
                dynamic_partitions_store=instance,
            )
            keys = list(subset.get_partition_keys())
            if keys:
                found[child] = keys
    return found
