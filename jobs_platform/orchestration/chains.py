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

The chain shows itself: its op is named for its members (`chain__orders__daily_revenue`,
`chain_op_name`) and described as a chain, each member asset's metadata names the step,
the chain and where its run config goes (`CHAIN_METADATA`, `STEP_METADATA`,
`RUN_CONFIG_METADATA`), and `backfill_chains` says from the code which backfills a list
of them makes into chains. Each member keeps its own run config, under its own name in
the chain op's config (`ops: {chain__orders__daily_revenue: {config: {daily_revenue:
{chunk_rows: 500}}}}`); config given under a member's old op name (`ops: {daily_revenue:
…}`) fails the step before any write, naming the path it belongs under
(`_refuse_config_under_member_names`).
"""

import hashlib
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from jobs_platform.orchestration.backfill_asset import (
    RESOURCE_KEY,
    run_backfill_step,
    run_config_class,
)
from jobs_platform.orchestration.hooks import quarantine_on_failure
from jobs_platform.orchestration.specs import attach_specs, specs_of
from jobs_platform.orchestration.tags import (
    CHAIN_METADATA,
    RUN_CONFIG_METADATA,
    STEP_ASSETS_TAG,
    STEP_METADATA,
)
from jobs_platform.orchestration.upstream import reads_alike

CHAIN_OP_PREFIX = "chain__"
# Dagster sets no limit on an op's name; this one keeps it readable in the UI's run view
# and in run config. A longer chain's name ends with a digest of the whole one instead.
MAX_CHAIN_OP_NAME = 80


def chain_op_name(member_ops: Sequence[str]) -> str:
    """The op of a chain: `chain__` and its members' own op names, upstream first
    (`chain__orders__daily_revenue`); past `MAX_CHAIN_OP_NAME` characters, cut and ended
    by a digest of the full name, so two chains never share one."""
    name = CHAIN_OP_PREFIX + "__".join(member_ops)
    if len(name) <= MAX_CHAIN_OP_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_CHAIN_OP_NAME - len(digest) - 2]}__{digest}"


@dataclass(frozen=True)
class Chain:
    """Backfills that run as one step: the step's op and its members, upstream first."""

    op: str
    assets: tuple[str, ...]
    """The members' asset keys (user strings: `acme/events`)."""
    member_ops: tuple[str, ...]
    """The op each member has on its own (`acme__events`): its section of the run config."""

    def config_path(self, asset: str) -> str:
        """Where a member's run config goes: `ops.<chain op>.config.<its own op name>`."""
        return f"ops.{self.op}.config.{self.member_ops[self.assets.index(asset)]}"


def backfill_chains(backfills: Sequence[dg.AssetsDefinition]) -> dict[str, tuple[str, ...]]:
    """Which of `backfills` run as one step in `platform_definitions(backfills)`: each
    chain's op name and its backfills' asset keys, upstream first.

        backfill_chains([orders, daily_revenue, customer_order_history])
        == {"chain__orders__daily_revenue": ("orders", "daily_revenue")}
    """
    return {chain.op: chain.assets for chain in _chains(_backfills_by_name(backfills))}


def backfill_run_config(
    assets: Iterable[dg.AssetsDefinition], config: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Run config (`{"ops": …}`) giving each backfill that `assets` compute and `config`
    names (by asset key: `acme/events`) its section where it goes: its own op's config,
    or, in a chain, its own name in the chain op's (`RUN_CONFIG_METADATA`)."""
    ops: dict[str, Any] = {}
    for assets_def in assets:
        for spec in assets_def.specs:
            given = config.get(spec.key.to_user_string())
            if given is None:
                continue
            path = spec.metadata.get(RUN_CONFIG_METADATA)
            if path is None:
                ops.setdefault(assets_def.op.name, {"config": {}})["config"].update(given)
            else:
                _, chain_op, _, member = path.split(".")
                ops.setdefault(chain_op, {"config": {}})["config"][member] = dict(given)
    return {"ops": ops}


def chain_backfills(assets: Sequence) -> list:
    """`assets`, with the backfills that read one another partition for partition merged
    into one multi-asset per connected group (`backfill_chains`); everything else as it was."""
    backfills = _backfills_by_name(assets)
    chains = _chains(backfills)
    chained = {name for chain in chains for name in chain.assets}
    result = [ad for ad in assets if _backfill_name(ad) not in chained]
    for chain in chains:
        result.append(_chain(chain, [backfills[name] for name in chain.assets]))
    return result


def _backfills_by_name(assets: Sequence) -> dict[str, dg.AssetsDefinition]:
    return {name: ad for ad in assets if (name := _backfill_name(ad)) is not None}


def _chains(backfills: dict[str, dg.AssetsDefinition]) -> list[Chain]:
    chains = []
    for group in _connected_groups(backfills):
        member_ops = tuple(backfills[name].op.name for name in group)
        chains.append(
            Chain(op=chain_op_name(member_ops), assets=tuple(group), member_ops=member_ops)
        )
    return chains


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


def _chain(chain: Chain, members: list[dg.AssetsDefinition]) -> dg.AssetsDefinition:
    specs = [specs_of(member)[0] for member in members]
    pools = {member.op.pool for member in members} - {None}
    retry_policies = {member.op.retry_policy for member in members}
    for what, found in (("pool", pools), ("retry_policy", retry_policies)):
        if len(found) > 1:
            raise ValueError(
                f"backfills {list(chain.assets)} read one another partition for partition and "
                f"so run in one step, which has one {what}; they name {sorted(map(str, found))}"
            )

    # Each member's run config, under its own op name: the class its own step would take.
    config_classes = {
        member_op: run_config_class(spec)
        for member_op, spec in zip(chain.member_ops, specs, strict=True)
    }

    def _backfill_chain(
        context: dg.AssetExecutionContext,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        _refuse_config_under_member_names(context, chain)
        op_config = context.op_execution_context.op_config
        configs = {
            asset: config_classes[member_op](**op_config[member_op])
            for asset, member_op in zip(chain.assets, chain.member_ops, strict=True)
        }
        yield from run_backfill_step(context, specs, configs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        chained = dg.multi_asset(
            name=chain.op,
            description=(
                f"A chain: the backfills {', '.join(chain.assets)} read one another partition "
                "for partition and run as this one step, each partition's upstream first, so "
                "a failing partition withholds only its own downstream (dagster-io/dagster"
                "#17836). Each one's run config goes under its own name: "
                + ", ".join(chain.config_path(asset) for asset in chain.assets)
                + "."
            ),
            specs=[
                next(iter(member.specs)).merge_attributes(metadata=_member_metadata(chain, asset))
                for member, asset in zip(members, chain.assets, strict=True)
            ],
            partitions_def=members[0].partitions_def,
            can_subset=True,
            retry_policy=next(iter(retry_policies)),
            hooks={quarantine_on_failure},
            required_resource_keys={RESOURCE_KEY}.union(
                *(member.op.required_resource_keys for member in members)
            ),
            backfill_policy=_smallest_policy([member.backfill_policy for member in members]),
            op_tags={STEP_ASSETS_TAG: ",".join(chain.assets)},
            config_schema={
                member_op: dg.Field(
                    config_class.to_fields_dict(),
                    description=f"Run config of the backfill {asset}.",
                )
                for (member_op, config_class), asset in zip(
                    config_classes.items(), chain.assets, strict=True
                )
            },
            pool=next(iter(pools), None),
        )(_backfill_chain)
    return attach_specs(chained, specs)


def _member_metadata(chain: Chain, asset: str) -> dict[str, str]:
    """What a member's asset page in the UI says of its chain."""
    return {
        CHAIN_METADATA: ", ".join(chain.assets),
        STEP_METADATA: chain.op,
        RUN_CONFIG_METADATA: chain.config_path(asset),
    }


def _refuse_config_under_member_names(context: dg.AssetExecutionContext, chain: Chain) -> None:
    """Fail the step, before any write, when the run config holds a section under a
    member's own op name: it would configure nothing.

    A job built with `define_asset_job` refuses such a section itself (its `ops` lists its
    ops, and a member's own op is not one). Dagster's implicit asset job (what the asset
    graph, `dagster asset materialize` and asset backfills launch) accepts any op name
    under `ops` and ignores the unknown ones: the user's `chunk_rows` would silently not
    apply.
    """
    ops = context.run.run_config.get("ops")
    given = ops if isinstance(ops, Mapping) else {}
    misplaced = [
        (asset, member_op)
        for asset, member_op in zip(chain.assets, chain.member_ops, strict=True)
        if member_op in given and not context.job_def.graph.has_node_named(member_op)
    ]
    if not misplaced:
        return
    raise dg.Failure(
        description="; ".join(
            f"run config under ops.{op} configures nothing: {asset} runs in one step with "
            f"{', '.join(a for a in chain.assets if a != asset)} (a chain, the op {chain.op}), "
            "and its run config goes under its own name in that op's: "
            f"{chain.config_path(asset)}, "
            f"i.e. ops: {{{chain.op}: {{config: {{{op}: {{...}}}}}}}}"
            for asset, op in misplaced
        ),
        metadata={"error_class": "terminal", "error_type": "MisplacedRunConfig"},
        allow_retries=False,
    )


def _smallest_policy(policies: list[dg.BackfillPolicy | None]) -> dg.BackfillPolicy | None:
    """The policy a job over these assets would take: the fewest partitions per run."""
    given = [policy for policy in policies if policy is not None]
    if not given:
        return None
    return min(given, key=lambda policy: policy.max_partitions_per_run or float("inf"))
