"""A backfill's audits (`audits=`) as Dagster asset checks, one per audit.

Each audit is declared as an `AssetCheckSpec` on the backfill asset, partitioned like it,
and each step yields one `AssetCheckResult` per audit it ran. A step of one partition
records the evaluation for that partition (Dagster 1.12 and 1.13 take the partition from
the step: `AssetCheckResult` has no partition of its own). A ranged step's evaluation
covers its partitions: Dagster records it unpartitioned, and its metadata names each
partition with what the audit found there.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet

import dagster as dg

from jobs_platform.engine.gated_finalize import ChangeRefused
from jobs_platform.engine.outcomes import Failed, Outcome, PartitionReport
from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.gate.audits import Audit, AuditResult

__all__ = ["audit_check_results", "audit_check_specs"]


def audit_check_specs(
    asset_key: dg.AssetKey, audits: Sequence[Audit], partitions_def: dg.PartitionsDefinition
) -> list[dg.AssetCheckSpec]:
    """One check per audit; a blocking audit's check blocks the asset's downstream too."""
    with warnings.catch_warnings():
        # A partitioned check is a preview in Dagster 1.12 and 1.13; it is what shows each
        # partition's evaluation on the asset's Checks tab.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [
            dg.AssetCheckSpec(
                audit.name,
                asset=asset_key,
                description=f"audit of each partition's staged rows: {audit.description}",
                blocking=audit.blocking,
                partitions_def=partitions_def,
            )
            for audit in audits
        ]


def audit_check_results(
    specs: Sequence[BackfillSpec],
    outcomes: Sequence[Outcome],
    declared: AbstractSet[dg.AssetCheckKey],
) -> Iterator[dg.AssetCheckResult]:
    """The step's audit results: per backfill and audit, over the partitions it ran on;
    only those of the `declared` checks (a chain's members declare none)."""
    for spec in specs:
        ran: dict[str, list[tuple[str, AuditResult]]] = {}
        for outcome in outcomes:
            if outcome.asset != spec.asset:
                continue
            for result in _audits_of(outcome):
                ran.setdefault(result.name, []).append((outcome.partition, result))
        asset_key = dg.AssetKey.from_user_string(spec.asset)
        for name, results in ran.items():
            if dg.AssetCheckKey(asset_key, name) in declared:
                yield _check_result(asset_key, name, results)


def _audits_of(outcome: Outcome) -> tuple[AuditResult, ...]:
    match outcome:
        case PartitionReport(audits=audits):
            return audits
        case Failed(error=ChangeRefused() as refused):
            return refused.audits
        case _:
            return ()


def _check_result(
    asset_key: dg.AssetKey, name: str, results: list[tuple[str, AuditResult]]
) -> dg.AssetCheckResult:
    first = results[0][1]
    failed = [(partition, result) for partition, result in results if not result.passed]
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=name,
        passed=not failed,
        severity=dg.AssetCheckSeverity.ERROR if first.blocking else dg.AssetCheckSeverity.WARN,
        description=first.description,
        metadata={
            "partitions": ", ".join(partition for partition, _ in results),
            "failed_partitions": ", ".join(partition for partition, _ in failed) or "none",
            "offending_rows": sum(result.offending for _, result in failed),
            "blocking": first.blocking,
            "sample": dg.MetadataValue.json(
                {partition: list(result.sample) for partition, result in failed[:5]}
            ),
            "results": json.dumps({partition: result.offending for partition, result in results}),
        },
    )
