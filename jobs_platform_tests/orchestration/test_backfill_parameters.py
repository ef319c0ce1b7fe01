"""What a reader and its fingerprint may declare, as an `@dg.asset` function may: resources
(`ConfigurableResource` parameters) and `config` (a `dg.Config`, filled from run config
next to the framework's own `chunk_rows`)."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.tenant_tables import PARTITION, partitions, rows_of_tenant
from jobs_platform_tests.tenant_tables import tenant_table as tenant_table_of

parameters_metadata = sa.MetaData()


def tenant_table(name: str) -> sa.Table:
    return tenant_table_of(parameters_metadata, name)


class Extract(dg.Config):
    """A user's own run config for one backfill."""

    rows: int = 3
    label: str = "default"


SEEN_CONFIGS: list[Extract] = []
SEEN_CHUNK_ROWS: list[int] = []


@backfill_asset(
    table=tenant_table("configured_rows"),
    partitions_def=partitions,
    partition_scope=rows_of_tenant,
)
def configured_rows(source: PartitionInput, config: Extract) -> Iterator[pd.DataFrame]:
    """`config.rows` rows labelled `config.label`, in chunks of `source.chunk_rows`."""
    SEEN_CONFIGS.append(config)
    SEEN_CHUNK_ROWS.append(source.chunk_rows)
    for start in range(0, config.rows, source.chunk_rows):
        numbers = range(start, min(start + source.chunk_rows, config.rows))
        yield pd.DataFrame({"tenant": source.partition_key, "n": numbers, "label": config.label})


class SourceSystem(dg.ConfigurableResource):
    """A source whose version the fingerprint reads (say, a table's last-modified stamp)."""

    version: str


READS: list[str] = []


def source_version(source: PartitionInput, source_system: SourceSystem) -> str:
    return f"{source_system.version}/{source.partition_key}"


@backfill_asset(
    table=tenant_table("fingerprinted_rows"),
    partitions_def=partitions,
    partition_scope=rows_of_tenant,
    fingerprint=source_version,
)
def fingerprinted_rows(source: PartitionInput) -> Iterator[pd.DataFrame]:
    """Two rows; each call of the reader is counted."""
    READS.append(source.partition_key)
    yield pd.DataFrame({"tenant": source.partition_key, "n": [1, 2], "label": "read"})


def run(
    asset: dg.AssetsDefinition, run_config=None, instance=None, **resources
) -> dg.ExecuteInProcessResult:
    from orders_example.definitions import defs

    return dg.materialize(
        [asset],
        partition_key=PARTITION,
        instance=instance or dg.DagsterInstance.get(),
        resources={**defs.resources, **resources},
        run_config=run_config or {},
        raise_on_error=False,
    )


def test_a_reader_gets_its_config_from_run_config_and_chunk_rows_still_applies(
    pg_platform_env,
):
    SEEN_CONFIGS.clear()
    config = {"rows": 5, "label": "configured", "chunk_rows": 2}

    result = run(configured_rows, {"ops": {"configured_rows": {"config": config}}})

    assert result.success
    assert [(c.rows, c.label) for c in SEEN_CONFIGS] == [(5, "configured")]
    assert isinstance(SEEN_CONFIGS[0], Extract)
    assert SEEN_CHUNK_ROWS[-1] == 2
    (materialization,) = result.asset_materializations_for_node("configured_rows")
    assert materialization.metadata["chunks_written"].value == 3  # 5 rows, 2 per chunk
    rows = table_snapshot(engine_from(pg_platform_env), "configured_rows")
    assert [(row[1], row[2]) for row in rows] == [(n, "configured") for n in range(5)]


def test_a_reader_config_left_out_of_run_config_takes_its_defaults(pg_platform_env):
    SEEN_CONFIGS.clear()

    result = run(configured_rows)

    assert result.success
    assert [(c.rows, c.label) for c in SEEN_CONFIGS] == [(3, "default")]
    assert SEEN_CHUNK_ROWS[-1] == 10_000


def test_a_run_config_field_the_config_lacks_is_refused_by_dagster():
    config = {"ops": {"configured_rows": {"config": {"limit": 1}}}}

    with (
        dg.DagsterInstance.ephemeral() as instance,
        pytest.raises(dg.DagsterInvalidConfigError, match="limit"),
    ):
        run(configured_rows, config, instance)


class SourceVersion(dg.Config):
    version: str = "v1"


def test_a_fingerprint_and_its_reader_may_declare_configs_of_their_own_and_share_one():
    def versioned(source: PartitionInput, config: SourceVersion) -> str:
        return config.version

    @backfill_asset(
        table=tenant_table("two_config_rows"),
        partitions_def=partitions,
        partition_scope=rows_of_tenant,
        fingerprint=versioned,
    )
    def two_config_rows(source: PartitionInput, config: Extract):
        yield from ()

    fields = two_config_rows.op.config_schema.as_field().config_type.fields
    assert set(fields) == {"rows", "label", "version", "chunk_rows"}


def test_a_config_parameter_that_is_not_a_dg_config_is_refused():
    with pytest.raises(TypeError, match=r"`config` parameter must be annotated with a dg\.Config"):

        @backfill_asset(
            table=tenant_table("refused_config_rows"),
            partitions_def=partitions,
            partition_scope=rows_of_tenant,
        )
        def refused_config_rows(source: PartitionInput, config: dict):
            yield from ()


def test_a_fingerprint_gets_its_resources_and_they_are_required_by_the_asset(
    pg_platform_env,
):
    READS.clear()
    assert "source_system" in fingerprinted_rows.op.required_resource_keys

    first = run(fingerprinted_rows, source_system=SourceSystem(version="v1"))
    unchanged = run(fingerprinted_rows, source_system=SourceSystem(version="v1"))
    changed = run(fingerprinted_rows, source_system=SourceSystem(version="v2"))

    assert first.success and unchanged.success and changed.success
    # Read for v1, skipped while the fingerprint stayed v1, read again for v2.
    assert READS == [PARTITION, PARTITION]
    (skipped,) = unchanged.asset_materializations_for_node("fingerprinted_rows")
    assert skipped.metadata["chunks_written"].value == 0
    assert table_snapshot(engine_from(pg_platform_env), "fingerprinted_rows") == [
        (PARTITION, 1, "read"),
        (PARTITION, 2, "read"),
    ]


def test_a_fingerprint_parameter_that_is_not_a_resource_is_refused():
    def salted(source: PartitionInput, salt: str) -> str:
        return salt

    with pytest.raises(TypeError, match=r"salted: .*\['salt'\] are not"):

        @backfill_asset(
            table=tenant_table("refused_fingerprint_rows"),
            partitions_def=partitions,
            partition_scope=rows_of_tenant,
            fingerprint=salted,
        )
        def refused_fingerprint_rows(source: PartitionInput):
            yield from ()
