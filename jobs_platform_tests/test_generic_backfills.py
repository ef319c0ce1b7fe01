"""Every backfill in the code location is idempotent and crash-safe, with no test of its own.

The suite enumerates the assets of `orders_example.definitions.defs` tagged as backfills and
is parametrized by their names, so a new job type is covered the day it is declared: it
only has to be given a seeder in `SEEDERS` (it writes a small sample input and returns
its partitions).
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import pytest

from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.settings import Settings
from jobs_platform_tests.commands import dagster_asset_materialize
from jobs_platform_tests.databases import loaded_backfills, sibling_database
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.examples.samples import seed_example_customers, seed_example_orders
from jobs_platform_tests.rows import attempts_of, declared_rows, row_versions, table_snapshot
from jobs_platform_tests.runs import materialize
from orders_example.definitions import defs

CHUNK_ROWS = 7  # small, so that every example spans several chunks where it can

BACKFILL_ASSETS = sorted(
    spec.key.to_user_string()
    for spec in defs.resolve_all_asset_specs()
    if spec.tags.get(BACKFILL_TAG) == "true"
)


def test_the_code_location_declares_backfills():
    assert BACKFILL_ASSETS, "no asset of orders_example.definitions is tagged as a backfill"


# Each takes the landing root (the examples' `landing` resource reads it) and seeds it.
SEEDERS: dict[str, Callable[[str], list[str]]] = {
    "orders": seed_example_orders,
    "daily_revenue": seed_example_orders,
    "customer_order_history": seed_example_customers,
}


def _spec(asset: str) -> BackfillSpec:
    spec = loaded_backfills().get(asset)
    if spec is None:
        pytest.fail(f"asset {asset!r} is tagged {BACKFILL_TAG} but has no registered spec")
    if asset not in SEEDERS:
        pytest.fail(
            f"backfill {asset!r} has no seeder: add one to SEEDERS (write a small sample "
            "input, return its partition keys) so that the generic idempotency suite can "
            "cover it",
            pytrace=False,
        )
    return spec


def _lineage(asset: str) -> list[str]:
    """The asset after its upstream backfills, upstream first (each once)."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        for upstream in _spec(name).upstream:
            visit(upstream)
        if name not in ordered:
            ordered.append(name)

    visit(asset)
    return ordered


def _seed(env: dict[str, str], spec: BackfillSpec) -> list[str]:
    partitions = SEEDERS[spec.asset](Settings.from_env(env).landing_root)
    assert partitions, f"the seeder of {spec.asset!r} returned no partitions"
    return partitions


def _assets_def(name: str) -> dg.AssetsDefinition:
    """The definition computing the asset (a chain of backfills computes several)."""
    for candidate in defs.assets or ():
        if isinstance(candidate, dg.AssetsDefinition) and dg.AssetKey(name) in candidate.keys:
            return candidate
    pytest.fail(f"backfill {name!r} is not among the assets of orders_example.definitions")


def _materialize_all(lineage: list[str], partitions: list[str]) -> None:
    assets = list({id(d): d for d in (_assets_def(name) for name in lineage)}.values())
    for partition in partitions:
        result = materialize(assets, partition, chunk_rows=CHUNK_ROWS)
        assert result.success, f"{lineage} failed for partition {partition}"


def _output(completed) -> str:
    return f"exit {completed.returncode}\n{completed.stdout[-4000:]}\n{completed.stderr[-8000:]}"


@pytest.mark.parametrize("asset", BACKFILL_ASSETS)
def test_backfill_rerun_leaves_an_identical_table(asset, platform_env):
    spec = _spec(asset)
    partitions = _seed(platform_env, spec)
    lineage = _lineage(asset)
    _materialize_all(lineage, partitions)
    engine = engine_from(platform_env)
    first = table_snapshot(engine, spec.table.name)
    assert first, f"the example of {asset!r} wrote no rows to {spec.table.name}"

    _materialize_all(lineage, partitions)

    assert table_snapshot(engine, spec.table.name) == first


@pytest.mark.parametrize("asset", BACKFILL_ASSETS)
def test_backfill_unchanged_rerun_creates_no_new_row_versions(asset, pg_platform_env):
    spec = _spec(asset)
    partitions = _seed(pg_platform_env, spec)
    lineage = _lineage(asset)
    _materialize_all(lineage, partitions)
    engine = engine_from(pg_platform_env)
    versions = row_versions(engine, spec.table.name)

    _materialize_all(lineage, partitions)

    assert row_versions(engine, spec.table.name) == versions


# PostgreSQL only, to keep the suite fast: test_partial_failure_retry kills workers on SQLite.
@pytest.mark.parametrize("asset", BACKFILL_ASSETS)
def test_backfill_killed_mid_partition_resumes_to_the_clean_result(
    asset, pg_platform_env, tmp_path
):
    spec = _spec(asset)
    partitions = _seed(pg_platform_env, spec)
    partition = partitions[0]
    lineage = _lineage(asset)
    _materialize_all(lineage, [partition])
    scope = spec.partition_scope(spec.table, partition)
    clean = declared_rows(engine_from(pg_platform_env), spec.table, scope)
    assert clean, f"the example of {asset!r} wrote no rows for {partition}"

    # Killed after its first chunk; a partition of one chunk commits that chunk with its
    # finalize, so it is killed inside that commit instead.
    point = "after_commit" if len(clean) > CHUNK_ROWS else "before_commit"
    with sibling_database(pg_platform_env["JOBS_PLATFORM_DATABASE_URL"], tmp_path) as fresh_url:
        env = {
            **pg_platform_env,
            "JOBS_PLATFORM_DATABASE_URL": fresh_url,
            "JOBS_PLATFORM_FAILPOINTS": f"{point}@{asset}#0=crash*1",
        }
        completed = dagster_asset_materialize(env, lineage, partition, chunk_rows=CHUNK_ROWS)

        assert completed.returncode == 0, _output(completed)
        fresh = engine_from(env)
        assert declared_rows(fresh, spec.table) == clean
        history = attempts_of(fresh, asset, partition)
        assert [row.error_class for row in history] == ["crash", None]
        fresh.dispose()
