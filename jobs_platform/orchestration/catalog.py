"""The backfill catalog's rows, built from a loaded code location (`store.catalog` writes them).

Written by `jobs-platform db upgrade` (the deploy) and by each `platform_health`
materialization, so that `jobs-platform status` answers without loading the location.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from jobs_platform.orchestration.specs import specs_of
from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.store.catalog import CatalogEntry
from jobs_platform.store.handle import Store


def catalog_entries(
    assets_defs: Iterable[dg.AssetsDefinition], instance: dg.DagsterInstance
) -> list[CatalogEntry]:
    """One entry per partitioned backfill among `assets_defs`, with every partition key it
    has now (dynamic ones read from `instance`, as status reads them), by asset key.

    Sorted, so that every writer (a deploy, a `platform_health` run) writes one order: a
    location's asset graph holds its assets in an order that changes between processes.
    """
    found: list[tuple[dg.AssetSpec, dg.BackfillPolicy | None, dict[str, str]]] = []
    for assets_def in assets_defs:
        tables = {spec.asset: spec.table.fullname for spec in specs_of(assets_def)}
        for spec in assets_def.specs:
            if spec.tags.get(BACKFILL_TAG) == "true" and spec.partitions_def is not None:
                found.append((spec, assets_def.backfill_policy, tables))
    entries = {
        spec.key.to_user_string(): CatalogEntry(
            asset=spec.key.to_user_string(),
            partitions_kind=_kind(spec.partitions_def),
            partition_keys=tuple(
                spec.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
            ),
            max_partitions_per_run=policy.max_partitions_per_run if policy else None,
            target_table=tables.get(spec.key.to_user_string()),
        )
        for spec, policy, tables in found
        if spec.partitions_def is not None
    }
    return [entries[asset] for asset in sorted(entries)]


def location_assets(definitions: dg.Definitions) -> list[dg.AssetsDefinition]:
    """A loaded location's asset definitions, resolved as its runs see them, each once."""
    nodes = definitions.resolve_asset_graph().asset_nodes
    return list({id(node.assets_def): node.assets_def for node in nodes}.values())


def write_location_catalog(
    store: Store,
    location: str,
    assets_defs: Iterable[dg.AssetsDefinition],
    instance: dg.DagsterInstance,
) -> list[CatalogEntry]:
    """Replace `location`'s catalog with what `assets_defs` serve now; returns the entries."""
    entries = catalog_entries(assets_defs, instance)
    store.write_catalog(location, entries)
    return entries


def _kind(partitions_def: dg.PartitionsDefinition | None) -> str:
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        return "time_window"
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return "dynamic"
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return "multi"
    if isinstance(partitions_def, dg.StaticPartitionsDefinition):
        return "static"
    return type(partitions_def).__name__
