"""A chain shows itself: backfills that read one another partition for partition run as
one step whose op is named for them, their asset pages name the step, and each keeps
its own run config under its own name."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset, backfill_chains
from jobs_platform.orchestration.chains import MAX_CHAIN_OP_NAME, chain_backfills, chain_op_name
from jobs_platform.orchestration.tags import (
    CHAIN_METADATA,
    RUN_CONFIG_METADATA,
    STEP_ASSETS_TAG,
    STEP_METADATA,
)
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.tenant_tables import PARTITION, partitions, rows_of_tenant
from jobs_platform_tests.tenant_tables import tenant_table as tenant_table_of

chain_metadata = sa.MetaData()


def tenant_table(name: str) -> sa.Table:
    return tenant_table_of(chain_metadata, name)


class Extract(dg.Config):
    """The upstream backfill's own run config."""

    rows: int = 3


class Labels(dg.Config):
    """The downstream backfill's own run config: a field of the same name, another default."""

    rows: int = 1
    label: str = "default"


SEEN: list[tuple[str, dg.Config, int]] = []


@backfill_asset(
    table=tenant_table("chained_extract"),
    partitions_def=partitions,
    partition_scope=rows_of_tenant,
)
def chained_extract(source: PartitionInput, config: Extract) -> Iterator[pd.DataFrame]:
    SEEN.append(("chained_extract", config, source.chunk_rows))
    yield pd.DataFrame({"tenant": source.partition_key, "n": range(config.rows), "label": "x"})


@backfill_asset(
    table=tenant_table("chained_labels"),
    partitions_def=partitions,
    partition_scope=rows_of_tenant,
    deps=["chained_extract"],
)
def chained_labels(source: PartitionInput, config: Labels) -> Iterator[pd.DataFrame]:
    SEEN.append(("chained_labels", config, source.chunk_rows))
    yield pd.DataFrame(
        {"tenant": source.partition_key, "n": range(config.rows), "label": config.label}
    )


CHAIN_OP = "chain__chained_extract__chained_labels"
(chain,) = chain_backfills([chained_labels, chained_extract])


def run(run_config: dict, instance: dg.DagsterInstance | None = None):
    from orders_example.definitions import defs

    return dg.materialize(
        [chain],
        partition_key=PARTITION,
        instance=instance or dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        run_config=run_config,
        raise_on_error=False,
    )


def test_backfill_chains_names_each_chain_op_for_its_members_upstream_first():
    from orders_example.customers.assets import customer_order_history
    from orders_example.orders.assets import daily_revenue, orders

    assert backfill_chains([chained_labels, chained_extract]) == {
        CHAIN_OP: ("chained_extract", "chained_labels")
    }
    assert backfill_chains([orders, daily_revenue, customer_order_history]) == {
        "chain__orders__daily_revenue": ("orders", "daily_revenue")
    }
    assert backfill_chains([orders]) == {}


def test_the_chain_op_is_named_described_and_tagged_for_its_members_keys_unchanged():
    assert chain.op.name == CHAIN_OP
    assert set(chain.keys) == {dg.AssetKey("chained_extract"), dg.AssetKey("chained_labels")}
    assert chain.op.tags[STEP_ASSETS_TAG] == "chained_extract,chained_labels"
    description = chain.op.description or ""
    assert description.startswith("A chain: the backfills chained_extract, chained_labels")
    assert f"ops.{CHAIN_OP}.config.chained_labels" in description


def test_each_member_asset_names_its_chain_step_and_run_config_path_in_its_metadata():
    for asset in ("chained_extract", "chained_labels"):
        metadata = chain.specs_by_key[dg.AssetKey(asset)].metadata
        assert metadata[CHAIN_METADATA] == "chained_extract, chained_labels"
        assert metadata[STEP_METADATA] == CHAIN_OP
        assert metadata[RUN_CONFIG_METADATA] == f"ops.{CHAIN_OP}.config.{asset}"
    # The member's own metadata is kept.
    assert chain.specs_by_key[dg.AssetKey("chained_labels")].metadata["table"] == "chained_labels"


def test_a_key_prefixed_member_is_configured_under_its_own_op_name():
    @backfill_asset(
        table=tenant_table("prefixed_a"),
        partitions_def=partitions,
        partition_scope=rows_of_tenant,
        key_prefix="acme",
    )
    def prefixed_a(source: PartitionInput):
        yield from ()

    @backfill_asset(
        table=tenant_table("prefixed_b"),
        partitions_def=partitions,
        partition_scope=rows_of_tenant,
        key_prefix="acme",
        deps=["acme/prefixed_a"],
    )
    def prefixed_b(source: PartitionInput):
        yield from ()

    (prefixed,) = chain_backfills([prefixed_a, prefixed_b])

    assert prefixed.op.name == "chain__acme__prefixed_a__acme__prefixed_b"
    fields = prefixed.op.config_schema.as_field().config_type.fields
    assert set(fields) == {"acme__prefixed_a", "acme__prefixed_b"}
    metadata = prefixed.specs_by_key[dg.AssetKey(["acme", "prefixed_b"])].metadata
    assert metadata[RUN_CONFIG_METADATA] == f"ops.{prefixed.op.name}.config.acme__prefixed_b"


def test_a_long_chain_op_name_is_cut_and_ended_by_a_digest_of_the_whole():
    members = [f"backfill_with_a_rather_long_name_{n}" for n in range(4)]
    other = [*members[:3], "backfill_with_a_rather_long_name_9"]

    name = chain_op_name(members)

    assert len(name) == MAX_CHAIN_OP_NAME
    assert name.startswith("chain__backfill_with_a_rather_long_name_0__")
    assert dg.AssetKey(name).to_python_identifier() == name  # a valid op name
    assert chain_op_name(members) == name
    assert chain_op_name(other) != name
    assert chain_op_name(["orders", "daily_revenue"]) == "chain__orders__daily_revenue"


def test_each_member_gets_its_own_run_config_under_its_own_name(pg_platform_env):
    SEEN.clear()
    config = {
        "chained_extract": {"rows": 4, "chunk_rows": 2},
        "chained_labels": {"rows": 2, "label": "configured"},
    }

    result = run({"ops": {CHAIN_OP: {"config": config}}})

    assert result.success
    (extract, extract_chunks), (labels, labels_chunks) = [(c, n) for _, c, n in SEEN]
    assert [name for name, _, _ in SEEN] == ["chained_extract", "chained_labels"]
    assert type(extract) is not type(labels)
    assert isinstance(extract, Extract) and isinstance(labels, Labels)
    assert (extract.rows, extract_chunks) == (4, 2)
    assert (labels.rows, labels.label, labels_chunks) == (2, "configured", 10_000)
    engine = engine_from(pg_platform_env)
    assert len(table_snapshot(engine, "chained_extract")) == 4
    assert table_snapshot(engine, "chained_labels") == [
        (PARTITION, 0, "configured"),
        (PARTITION, 1, "configured"),
    ]


def test_a_member_left_out_of_the_run_config_takes_its_own_defaults(pg_platform_env):
    SEEN.clear()

    result = run({"ops": {CHAIN_OP: {"config": {"chained_labels": {"label": "only"}}}}})

    assert result.success
    (extract, _), (labels, _) = [(c, n) for _, c, n in SEEN]
    assert isinstance(extract, Extract) and extract.rows == 3
    assert isinstance(labels, Labels) and (labels.rows, labels.label) == (1, "only")


def test_run_config_under_a_members_own_name_in_a_job_is_refused_naming_the_chain_op():
    config = {"ops": {"chained_labels": {"config": {"label": "lost"}}}}

    with (
        dg.DagsterInstance.ephemeral() as instance,
        pytest.raises(dg.DagsterInvalidConfigError, match=CHAIN_OP) as refused,
    ):
        run(config, instance)

    assert 'unexpected config entry "chained_labels"' in str(refused.value)


def test_run_config_under_a_members_own_name_in_the_asset_job_fails_before_any_write(
    pg_platform_env,
):
    """Dagster's implicit asset job (the asset graph, `dagster asset materialize`) lets an
    unknown op name through: the step refuses it rather than run unconfigured."""
    from orders_example.definitions import defs

    SEEN.clear()
    location = dg.Definitions(assets=[chain], resources=dict(defs.resources))
    asset_job = location.resolve_implicit_global_asset_job_def()
    config = {"ops": {"chained_labels": {"config": {"label": "lost"}}}}

    result = asset_job.execute_in_process(
        run_config=config,
        partition_key=PARTITION,
        instance=dg.DagsterInstance.get(),
        raise_on_error=False,
    )

    assert not result.success
    assert SEEN == []
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "ops.chained_labels configures nothing" in message
    assert f"ops.{CHAIN_OP}.config.chained_labels" in message
    assert table_snapshot(engine_from(pg_platform_env), "chained_labels") == []
