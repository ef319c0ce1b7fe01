"""A backfill's spec is found from its asset definition, through every copy Dagster makes.

`specs_of` looks the spec up by the asset's op (`orchestration/specs.py`). That holds only
while Dagster keeps the op object when it copies an asset definition: the copies a code
location goes through are checked here, so a Dagster release that rebuilds the op in one
of them fails this file, naming the copy.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import JobsPlatformResource, PartitionInput, backfill_asset
from jobs_platform.orchestration.chains import chain_backfills
from jobs_platform.orchestration.specs import backfill_specs, specs_of
from jobs_platform_tests.tenant_tables import partitions, rows_of_tenant, tenant_table


def a_backfill(name: str, *, deps: tuple[str, ...] = ()) -> dg.AssetsDefinition:
    """A backfill of its own table (not at module level: no test warehouse gets it)."""

    @backfill_asset(
        table=tenant_table(sa.MetaData(), name),
        partitions_def=partitions,
        partition_scope=rows_of_tenant,
        name=name,
        deps=deps,
    )
    def reader(source: PartitionInput):
        yield from ()

    return reader


def test_a_backfill_asset_names_its_spec_and_any_other_definition_none():
    events = a_backfill("spec_events")

    @dg.asset
    def plain() -> None:
        pass

    [spec] = specs_of(events)
    assert spec.asset == "spec_events" and spec.table.name == "spec_events"
    assert specs_of(plain) == ()
    assert specs_of(dg.AssetSpec("external")) == ()
    assert specs_of("spec_events") == ()


def test_two_backfills_of_one_name_keep_their_own_specs():
    """As two code locations in one process, or a module imported twice."""
    first, second = a_backfill("spec_twice"), a_backfill("spec_twice")

    assert specs_of(first)[0] is not specs_of(second)[0]
    assert specs_of(first)[0].table is not specs_of(second)[0].table


def test_a_chain_names_the_specs_of_its_members_upstream_first():
    upstream = a_backfill("spec_upstream")
    downstream = a_backfill("spec_downstream", deps=("spec_upstream",))

    (chain,) = chain_backfills([downstream, upstream])

    assert [spec.asset for spec in specs_of(chain)] == ["spec_upstream", "spec_downstream"]


def location(*assets: dg.AssetsDefinition | dg.AssetSpec) -> dg.Definitions:
    """A code location of `assets` and the resource every backfill needs."""
    return dg.Definitions(assets=assets, resources={"jobs_platform": JobsPlatformResource()})


# Each copy of an asset definition a code location may make: (name, copy).
COPIES: list[tuple[str, Callable[[dg.AssetsDefinition], dg.AssetsDefinition]]] = [
    (
        "with_attributes(asset_key_replacements=...) (a key prefix)",
        lambda ad: ad.with_attributes(
            asset_key_replacements={ad.key: dg.AssetKey(["acme", *ad.key.path])}
        ),
    ),
    (
        "with_attributes(backfill_policy=...)",
        lambda ad: ad.with_attributes(backfill_policy=dg.BackfillPolicy.single_run()),
    ),
    ("with_hooks", lambda ad: ad.with_hooks(set())),
    (
        "dg.with_resources",
        lambda ad: dg.with_resources([ad], {"jobs_platform": JobsPlatformResource()})[0],
    ),
    (
        "map_asset_specs of owners and tags",
        lambda ad: ad.map_asset_specs(
            lambda spec: spec.replace_attributes(owners=["team:data"]).merge_attributes(
                tags={"tier": "gold"}
            )
        ),
    ),
    (
        "Definitions.merge, then get_assets_def",
        lambda ad: dg.Definitions.merge(
            location(ad), dg.Definitions(assets=[dg.AssetSpec("external")])
        ).get_assets_def(ad.key),
    ),
    (
        "a repository's assets_defs_by_key",
        lambda ad: location(ad).get_repository_def().assets_defs_by_key[ad.key],
    ),
    (
        "an asset graph's node",
        lambda ad: location(ad).resolve_asset_graph().get(ad.key).assets_def,
    ),
]


@pytest.mark.parametrize("copy", [copy for _, copy in COPIES], ids=[name for name, _ in COPIES])
def test_dagster_keeps_a_backfills_op_through_the_copies_a_location_makes(copy):
    events = a_backfill("spec_copied")

    copied = copy(events)

    assert specs_of(copied) == specs_of(events), (
        f"Dagster {dg.__version__} rebuilds the op of an asset definition in this copy: "
        "jobs_platform/orchestration/specs.py finds a backfill's spec by its op"
    )


def test_dagster_keeps_a_chains_op_in_a_subset_of_its_members():
    upstream = a_backfill("spec_subset_up")
    downstream = a_backfill("spec_subset_down", deps=("spec_subset_up",))
    (chain,) = chain_backfills([upstream, downstream])

    subset = chain.subset_for({dg.AssetKey("spec_subset_up")}, None)

    assert specs_of(subset) == specs_of(chain), (
        f"Dagster {dg.__version__} rebuilds the op of a subset of a multi-asset"
    )


def test_a_locations_unexecutable_assets_name_no_spec():
    events = a_backfill("spec_beside_external")
    by_key = location(events, dg.AssetSpec("external")).get_repository_def().assets_defs_by_key

    assert specs_of(by_key[dg.AssetKey("external")]) == ()
    assert list(backfill_specs(by_key.values())) == ["spec_beside_external"]
