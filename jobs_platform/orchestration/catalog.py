"""The backfill catalog's rows, built from a loaded code location (`store.catalog` writes them).

Written by `jobs-platform db upgrade` (the deploy) and by each `platform_health`
materialization, so that `jobs-platform status` answers without loading the location.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

import dagster as dg

from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.specs import specs_of
from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.store.catalog import CatalogEntry
from jobs_platform.store.health import ExpectedKeys, KeyWindow

# The fields of a key that sorts as its time does: zero-padded, from the year down.
_TIME_FIELDS = ("%Y", "%m", "%d", "%H", "%M", "%S")
_SUB_DAILY = frozenset({"%H", "%M", "%S"})
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z"})


def key_window(
    partitions_def: dg.PartitionsDefinition | None, now: dt.datetime | None = None
) -> KeyWindow | None:
    """The window of a time-window partitions definition whose keys sort as their times
    do and are all of one length (`KeyWindow`), as of `now`; None for any other.

    Its format must be zero-padded fields from the year down with fixed text between
    (`%Y-%m-%d`, `%Y-%m-%d-%H:%M`, `%Y%m`), its clock free of daylight saving time when
    a key names an hour (a repeated hour would repeat a key), with no exclusions. The
    first and last key and the count come from the definition (Dagster's arithmetic),
    not from listing 100,000 keys.
    """
    if not isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        return None
    if getattr(partitions_def, "exclusions", None):
        return None
    fields = re.findall(r"%.", partitions_def.fmt)
    if not fields or fields[0] != "%Y" or any(field not in _TIME_FIELDS for field in fields):
        return None
    order = [_TIME_FIELDS.index(field) for field in fields]
    if order != sorted(set(order)):
        return None  # a field twice, or out of order (`%d-%m-%Y` does not sort as time)
    if _SUB_DAILY & set(fields) and str(partitions_def.timezone) not in _UTC_NAMES:
        return None
    with dg.partition_loading_context(now or dt.datetime.now(dt.UTC)):
        first = partitions_def.get_first_partition_key()
        last = partitions_def.get_last_partition_key()
        count = partitions_def.get_num_partitions()
    if first is None or last is None or count == 0:
        return KeyWindow(first="", last="", count=0)
    if len(first) != len(last):
        return None  # not of one length after all: every key, listed
    return KeyWindow(first, last, count)


def expected_keys(
    partitions_def: dg.PartitionsDefinition, instance: dg.DagsterInstance
) -> ExpectedKeys:
    """Every key a backfill should have as of now: its window when it has one (cheap at
    any length), else every key listed (dynamic ones read from `instance`)."""
    window = key_window(partitions_def)
    if window is not None:
        return window
    return tuple(partitions_def.get_partition_keys(dynamic_partitions_store=instance))


def catalog_entries(
    assets_defs: Iterable[dg.AssetsDefinition], instance: dg.DagsterInstance
) -> list[CatalogEntry]:
    """One entry per partitioned backfill among `assets_defs`, with every partition key it
    has now (dynamic ones read from `instance`, as status reads them) or its window
    (`key_window`), by asset key.

    Sorted, so that every writer (a deploy, a `platform_health` run) writes one order: a
    location's asset graph holds its assets in an order that changes between processes.
    """
    found: list[tuple[dg.AssetSpec, dg.BackfillPolicy | None, dict[str, str]]] = []
    for assets_def in assets_defs:
        tables = {spec.asset: spec.table.fullname for spec in specs_of(assets_def)}
        for spec in assets_def.specs:
            if spec.tags.get(BACKFILL_TAG) == "true" and spec.partitions_def is not None:
                found.append((spec, assets_def.backfill_policy, tables))
    entries = {}
    for spec, policy, tables in found:
        if spec.partitions_def is None:
            continue
        keys = expected_keys(spec.partitions_def, instance)
        asset = spec.key.to_user_string()
        entries[asset] = CatalogEntry(
            asset=asset,
            partitions_kind=_kind(spec.partitions_def),
            partition_keys=() if isinstance(keys, KeyWindow) else tuple(keys),
            max_partitions_per_run=policy.max_partitions_per_run if policy else None,
            target_table=tables.get(asset),
            window=keys if isinstance(keys, KeyWindow) else None,
        )
    return [entries[asset] for asset in sorted(entries)]


def location_assets(definitions: dg.Definitions) -> list[dg.AssetsDefinition]:
    """A loaded location's asset definitions, resolved as its runs see them, each once."""
    nodes = definitions.resolve_asset_graph().asset_nodes
    return list({id(node.assets_def): node.assets_def for node in nodes}.values())


def write_location_catalog(
    store: Warehouse,
    location: str,
    assets_defs: Iterable[dg.AssetsDefinition],
    instance: dg.DagsterInstance,
) -> list[CatalogEntry]:
    """Replace `location`'s catalog with what `assets_defs` serve now; returns the entries."""
    entries = catalog_entries(assets_defs, instance)
    store.catalog.write(location, entries)
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
