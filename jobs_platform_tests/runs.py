"""Runs in the test's process and what Dagster recorded of them."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from jobs_platform.orchestration.chains import backfill_run_config
from jobs_platform.orchestration.tags import PARTITION_TAG, RUN_KEY_TAG


def materialize(
    assets,
    partition: str,
    *,
    chunk_rows: int | None = None,
    instance: dg.DagsterInstance | None = None,
    raise_on_error: bool = False,
    tags: dict[str, str] | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize `assets` for one partition in this process, with the framework resource."""
    from orders_example.definitions import defs

    run_config = {}
    if chunk_rows is not None:
        run_config = chunk_rows_config(assets, chunk_rows)
    return dg.materialize(
        assets,
        partition_key=partition,
        instance=instance or dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        run_config=run_config,
        raise_on_error=raise_on_error,
        tags=tags,
    )


def metadata_of(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        if event.asset_key.to_user_string() == asset:
            return {k: v.value for k, v in event.materialization.metadata.items()}
    raise AssertionError(f"no materialization of {asset}")


def chunk_rows_config(assets: Sequence[str | dg.AssetsDefinition], chunk_rows: int) -> dict:
    """Run config giving each backfill computed by `assets` (definitions, or names of the
    bundled code location's backfills) `chunk_rows`, where its run config goes: under its
    own op, or, in a chain, under its own name in the chain op's config."""
    from orders_example.definitions import defs

    definitions = [defs.get_assets_def(a) if isinstance(a, str) else a for a in assets]
    every_backfill = {
        spec.key.to_user_string(): {"chunk_rows": chunk_rows}
        for assets_def in definitions
        for spec in assets_def.specs
    }
    return backfill_run_config(definitions, every_backfill)


def stored_materialization_metadata(env: dict[str, str], asset: str, partition: str) -> dict:
    """Metadata of the latest materialization of `asset`/`partition` in the env's instance."""
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]),
            limit=1,
        ).records
    if not records:
        raise AssertionError(f"no materialization of {asset}/{partition} in {env['DAGSTER_HOME']}")
    metadata = records[0].asset_materialization.metadata
    return {name: value.value for name, value in metadata.items()}


def materialize_into(
    database_url: str, assets, partition: str, *, chunk_rows: int | None = None
) -> dg.ExecuteInProcessResult:
    """A clean in-process run against another warehouse, on a throwaway Dagster instance."""
    from jobs_platform.orchestration.resources import JobsPlatformResource
    from orders_example.definitions import defs

    run_config = {}
    if chunk_rows is not None:
        run_config = chunk_rows_config(assets, chunk_rows)
    with dg.DagsterInstance.ephemeral() as instance:
        return dg.materialize(
            assets,
            partition_key=partition,
            instance=instance,
            resources={
                **defs.resources,
                "jobs_platform": JobsPlatformResource(database_url=database_url),
            },
            run_config=run_config,
            raise_on_error=True,
        )


def materializations_metadata(
    instance: dg.DagsterInstance, asset: str, partition: str
) -> list[dict]:
    """Metadata of every materialization of one asset partition, oldest first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]),
        limit=100,
        ascending=True,
    ).records
    return [
        {k: v.value for k, v in record.asset_materialization.metadata.items()} for record in records
    ]


def record_requested_run(
    instance: dg.DagsterInstance,
    request: dg.RunRequest,
    status: dg.DagsterRunStatus = dg.DagsterRunStatus.STARTED,
    definitions: dg.Definitions | None = None,
) -> dg.DagsterRun:
    """What the sensor daemon does with a tick's run request: create its run (no work runs).

    The run carries the request's tags, its run key and its partition; `NOT_STARTED` is a
    run created but never submitted. A run of the bundled location unless `definitions`
    name another.
    """
    if definitions is None:
        from orders_example.definitions import defs as definitions

    tags = {**request.tags, RUN_KEY_TAG: request.run_key}
    if request.partition_key:
        tags[PARTITION_TAG] = request.partition_key
    return instance.create_run_for_job(
        definitions.resolve_implicit_global_asset_job_def(), tags=tags, status=status
    )
