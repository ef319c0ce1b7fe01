"""`plan` on a loaded code location: the keys, what each reads and feeds, its input now.

The pure rows are `steering.plan`'s; this module asks Dagster what only the location knows:
the partition keys of a range, the upstream partitions each key reads (the gate's own
`orchestration.upstream.upstream_reads`), the partitions of other backfills it feeds (the
asset graph's partition mappings) and the backfill policy. What the backfill's own
functions say now (its `fingerprint=`, its `ready=`) is asked by `plan_inputs`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import dagster as dg

from jobs_platform.dead_letter.requeue_plan import partitions_per_run
from jobs_platform.engine.decisions import RetryBudget
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.specs import backfill_specs
from jobs_platform.orchestration.upstream import is_backfill, reads_alike, upstream_reads
from jobs_platform.settings import Settings
from jobs_platform.steering.estimate import estimate, read_history
from jobs_platform.steering.plan import Backfill, noted, plan_rows, with_changes, with_downstream
from jobs_platform.steering.plan_circuits import read_circuits
from jobs_platform.steering.plan_facts import read_facts
from jobs_platform.steering.plan_holds import read_holds
from jobs_platform.steering.plan_inputs import (
    expected_changes,
    fingerprints_now,
    holds_asking_ready,
)
from jobs_platform.steering.plan_readiness import READY_BUDGET_SECONDS
from jobs_platform.steering.plan_row import Action, Plan, Reason
from jobs_platform.store.partitions import PartitionStatus

log = logging.getLogger("jobs_platform.plan")


def plan_keys(
    definitions: dg.Definitions,
    asset: str,
    *,
    first: str | None = None,
    last: str | None = None,
    keys: Sequence[str] = (),
    instance: dg.DagsterInstance | None = None,
) -> list[str]:
    """The partition keys a plan covers: `keys` (each checked), else `first`..`last` in the
    definition's order (either end open: the first or the last key)."""
    graph = definitions.resolve_asset_graph()
    node = graph.get(dg.AssetKey.from_user_string(asset))
    partitions_def = node.partitions_def
    if partitions_def is None:
        raise ValueError(f"backfill {asset!r} has no partitions")
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        if keys:
            every = set(partitions_def.get_partition_keys(dynamic_partitions_store=instance))
            unknown = sorted(set(keys) - every)
            if unknown:
                raise ValueError(f"{asset} has no partition {', '.join(unknown[:5])}")
            return list(dict.fromkeys(keys))
        for bound in (first, last):
            if bound is not None and not partitions_def.has_partition_key(bound):
                raise ValueError(f"{asset} has no partition {bound!r}")
        start = first or partitions_def.get_first_partition_key()
        end = last or partitions_def.get_last_partition_key()
        if start is None or end is None:
            raise ValueError(f"{asset} has no partitions yet")
        # The range alone, never every key: an hourly backfill has 17,000 keys by now.
        chosen = partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(start, end))
    if not chosen:
        raise ValueError(f"--from {first} comes after --to {last}")
    return list(chosen)


def plan_backfill(
    definitions: dg.Definitions,
    store: Warehouse,
    settings: Settings,
    asset: str,
    keys: Sequence[str],
    instance: dg.DagsterInstance | None = None,
) -> Plan:
    """What a launch of `keys` of the backfill `asset` of this location would do now."""
    specs = backfill_specs(definitions.assets or ())
    spec = specs.get(asset)
    if spec is None:
        raise LookupError(
            f"the code location has no backfill {asset!r} (its backfills: "
            f"{', '.join(specs) or 'none'}); pass the location that serves it with -m"
        )
    repository = definitions.get_repository_def()
    graph = repository.asset_graph
    key = dg.AssetKey.from_user_string(asset)
    reads = upstream_reads(graph, key, instance)
    upstream = {partition: reads(partition) for partition in keys}
    budget = RetryBudget.from_settings(settings)
    with store.connect() as connection:
        facts = read_facts(
            connection, store.clock, asset, keys, upstream, max_attempts=budget.max_attempts
        )
        history = read_history(connection, asset)
        holds = read_holds(connection, asset, keys)
        circuits = read_circuits(connection, asset, facts.now)
    notes: list[str] = []
    done = [
        k for k in keys if (state := facts.states.get(k)) and state.status == PartitionStatus.DONE
    ]
    fingerprints = fingerprints_now(spec, repository, done, store, instance, notes)
    backfill = Backfill(
        asset=asset,
        version=spec.version,
        fingerprinted=spec.fingerprint is not None and fingerprints is not None,
        redrive=spec.redrive and settings.max_redrives > 0,
        first_cooldown_seconds=settings.redrive_cooldown_seconds,
        max_redrives=settings.max_redrives,
        budget=budget,
    )
    holds, unasked = holds_asking_ready(
        spec, repository, backfill, keys, facts, fingerprints or {}, holds, store, instance, notes
    )
    rows = plan_rows(backfill, keys, facts, fingerprints or {}, holds, circuits)
    if unasked:
        rows = noted(
            rows, unasked, f"ready= not asked (the plan's {READY_BUDGET_SECONDS:g} s spent)"
        )
    # Only what runs recomputes anything: its downstream is asked of the graph alone.
    runs = [row.partition for row in rows if row.action is Action.RUN]
    rows = with_downstream(rows, downstream_of_each(graph, key, runs, instance))
    rows = with_changes(rows, expected_changes(spec, repository, runs, store, instance, notes))
    to_run = sum(1 for row in rows if row.action is Action.RUN)
    if spec.fingerprint is None and any(row.reason is Reason.NO_FINGERPRINT for row in rows):
        notes.append(
            f"{asset} has no fingerprint=: a launch reads each done partition again (its "
            "unchanged chunks are skipped, so it writes only what changed)"
        )
    return Plan(
        asset,
        tuple(rows),
        estimate(to_run, partitions_per_run(graph, [key]), history),
        tuple(notes),
    )


def downstream_of_each(
    graph, key: dg.AssetKey, keys: Sequence[str], instance: dg.DagsterInstance | None = None
) -> dict[str, list[str]]:
    """Per key of `key`, the partitions of the location's other backfills that read it
    (`name/partition`), through each pair's partition mapping: what recomputing it makes
    stale. A backfill partitioned alike reads the same key (no mapping asked)."""
    upstream_def = graph.get(key).partitions_def
    feeds: dict[str, list[str]] = {k: [] for k in keys}
    if upstream_def is None or not keys:
        return feeds
    for child in sorted(graph.get(key).child_keys):
        if not is_backfill(graph, child):
            continue
        child_node = graph.get(child)
        name = child.to_user_string()
        if child_node.partitions_def is None:
            continue
        mapping = graph.get_partition_mapping(child, key)
        if reads_alike(
            child_node.partitions_def, upstream_def, child_node.partition_mappings.get(key)
        ):
            for k in keys:
                feeds[k].append(f"{name}/{k}")
            continue
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            read_by = _mapped_downstream(
                mapping, upstream_def, child_node.partitions_def, keys, instance
            )
        for k, children in read_by.items():
            feeds[k] += [f"{name}/{child}" for child in children]
    return feeds


def _mapped_downstream(
    mapping: dg.PartitionMapping,
    upstream_def: dg.PartitionsDefinition,
    child_def: dg.PartitionsDefinition,
    keys: Sequence[str],
    instance: dg.DagsterInstance | None,
) -> dict[str, list[str]]:
    """Per upstream key, the child partitions that read it, asking the mapping the fewest
    times: once per child partition when they are fewer than the keys (the days of a year
    of hours: 365 questions, not 8,760), else once per key."""
    children = list(
        mapping.get_downstream_partitions_for_partitions(
            upstream_def.subset_with_partition_keys(list(keys)),
            upstream_def,
            child_def,
            dynamic_partitions_store=instance,
        ).get_partition_keys()
    )
    found: dict[str, list[str]] = {k: [] for k in keys}
    if len(children) < len(keys):
        for child in children:
            read = mapping.get_upstream_mapped_partitions_result_for_partitions(
                child_def.subset_with_partition_keys([child]),
                child_def,
                upstream_def,
                dynamic_partitions_store=instance,
            ).partitions_subset.get_partition_keys()
            for k in read:
                if k in found:
                    found[k].append(child)
        return found
    for k in keys:
        found[k] = list(
            mapping.get_downstream_partitions_for_partitions(
                upstream_def.subset_with_partition_keys([k]),
                upstream_def,
                child_def,
                dynamic_partitions_store=instance,
            ).get_partition_keys()
        )
    return found
