"""Backfill chains: backfills that read each other partition for partition run as one step.

Why: Dagster runs each asset of a run as its own step, and a step that fails skips every
downstream step of its run for every partition — Dagster cannot fail one partition of a
ranged step and go on with the others (dagster-io/dagster#17836). A job over `orders` and
`daily_revenue` launched over a month from the job page, by a schedule or by `dagster job
execute` would write 29 good days of orders and no revenue at all because of one poison
day. In a chain the backfills share one step (a multi-asset that can be subset) in which
each partition is its own unit: upstream partitions first, then each downstream partition
whose inputs are done. A poison partition is quarantined and withholds its own downstream
partition and nothing else, whichever way the run was launched. Dagster still sees each
asset on its own (lineage, partitions, status in the UI, selection of one of them).
"""

# No `from __future__ import annotations`: Dagster reads the step's config annotation.

import warnings
from collections.abc import Sequence

import dagster as dg

from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.orchestration.backfill_asset import (
    RESOURCE_KEY,
    run_backfill_step,
    run_config_class,
)
from jobs_platform.orchestration.hooks import quarantine_on_failure
from jobs_platform.orchestration.specs import attach_specs, specs_of
from jobs_platform.orchestration.tags import STEP_ASSETS_TAG
from jobs_platform.orchestration.upstream import reads_alike


def chain_backfills(assets: Sequence) -> list:
    """`assets`, with the backfills that read one another partition for partition merged
    into one multi-asset per connected group; everything else as it was."""
    backfills = {name: ad for ad in assets if (name := _backfill_name(ad)) is not None}
    groups = _connected_groups(backfills)
    chained = {name for group in groups for name in group}
    result = [ad for ad in assets if _backfill_name(ad) not in chained]
    for group in groups:
        members = [backfills[name] for name in group]
        result.append(_chain(members, [specs_of(member)[0] for member in members]))
    return result


def _backfill_name(ad) -> str | None:
    """The asset key of a single backfill declared with `backfill_asset`, else None."""
    specs = specs_of(ad)
    return specs[0].asset if len(specs) == 1 and len(ad.keys) == 1 else None


def _reads_alike(ad: dg.AssetsDefinition, upstream: dg.AssetsDefinition) -> bool:
    return reads_alike(
        ad.partitions_def, upstream.partitions_def, ad.get_partition_mapping(upstream.key)
    )


def _connected_groups(backfills: dict[str, dg.AssetsDefinition]) -> list[list[str]]:
    """Groups of two or more backfills linked by reads, each in dependency order."""
    reads = {
        name: [
            up
            for up in specs_of(ad)[0].upstream
            if up in backfills and _reads_alike(ad, backfills[up])
        ]
        for name, ad in backfills.items()
    }
    group_of = {name: {name} for name in backfills}
    for name, ups in reads.items():
        for up in ups:
            merged = group_of[name] | group_of[up]
            for member in merged:
                group_of[member] = merged
    groups, seen = [], set()
    for name in backfills:
        group = group_of[name]
        if len(group) > 1 and name not in seen:
            seen |= group
            groups.append(_dependency_order([n for n in backfills if n in group], reads))
    return groups


def _dependency_order(names: list[str], reads: dict[str, list[str]]) -> list[str]:
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = [n for n in names if n not in ordered and all(u in ordered for u in reads[n])]
        if not ready:
            raise ValueError(f"backfills {names} read one another in a cycle")
        ordered.append(ready[0])
    return ordered


def _chain(members: list[dg.AssetsDefinition], specs: list[BackfillSpec]) -> dg.AssetsDefinition:
    names = [spec.asset for spec in specs]
    pools = {member.op.pool for member in members} - {None}
    retry_policies = {member.op.retry_policy for member in members}
    for what, found in (("pool", pools), ("retry_policy", retry_policies)):
        if len(found) > 1:
            raise ValueError(
                f"backfills {names} read one another partition for partition and so run in "
                f"one step, which has one {what}; they name {sorted(map(str, found))}"
            )

    config_class = run_config_class(specs)

    def _backfill_chain(context: dg.AssetExecutionContext, config: config_class):  # type: ignore[valid-type]
        yield from run_backfill_step(context, specs, config)

    attach_specs(_backfill_chain, specs)

    # Named after the first backfill, so its run config (`ops: {orders: {config: …}}`)
    # still applies; the op's tag lists every backfill it computes.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.multi_asset(
            name=members[0].op.name,
            specs=[next(iter(member.specs)) for member in members],
            partitions_def=members[0].partitions_def,
            can_subset=True,
            retry_policy=next(iter(retry_policies)),
            hooks={quarantine_on_failure},
            required_resource_keys={RESOURCE_KEY}.union(
                *(member.op.required_resource_keys for member in members)
            ),
            backfill_policy=_smallest_policy([member.backfill_policy for member in members]),
            op_tags={STEP_ASSETS_TAG: ",".join(names)},
            pool=next(iter(pools), None),
        )(_backfill_chain)


def _smallest_policy(policies: list[dg.BackfillPolicy | None]) -> dg.BackfillPolicy | None:
    """The policy a job over these assets would take: the fewest partitions per run."""
    given = [policy for policy in policies if policy is not None]
    if not given:
        return None
    return min(given, key=lambda policy: policy.max_partitions_per_run or float("inf"))
