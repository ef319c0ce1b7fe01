"""`backfill_asset`: one decorator turns a chunk reader into a safe partitioned asset."""

import warnings
from collections.abc import Callable, Iterator, Sequence

import dagster as dg
import sqlalchemy as sa
from dagster._core.errors import DagsterExecutionInterruptedError

from jobs_platform.engine.runner import AttemptInfo, PartitionRunner
from jobs_platform.engine.spec import (
    DEFAULT_CHUNK_ROWS,
    BackfillSpec,
    ChunkReader,
    ExampleSeeder,
    Fingerprinter,
    PartitionScope,
)
from jobs_platform.errors import WarehouseNotShared
from jobs_platform.orchestration.executors import runs_remotely
from jobs_platform.orchestration.hooks import quarantine_on_failure
from jobs_platform.orchestration.outcomes import CRASH_RETRY_POLICY, finish_step
from jobs_platform.orchestration.registry import register_backfill, upstream_partitioned_alike
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.tags import BACKFILL_TAG, CORRELATION_TAG, STEP_ASSETS_TAG
from jobs_platform.store.leases import this_holder

RESOURCE_KEY = "jobs_platform"

# Backfills launched from the UI or a schedule put up to 30 partitions in one run. A run
# costs seconds of fixed work before the first row (a run worker, a process per step,
# loading the code location: 6-17 s measured here, docs/BENCHMARKS.md) while a daily
# partition of 10,000-100,000 rows takes 0.1-1.5 s: one run per partition spends most
# of a backfill starting processes. 30 is a month of days per run: fixed cost paid once
# a month instead of daily, a 365-day backfill still spreads over 13 runs (parallel up
# to the run queue's limit), and a run that dies redoes at most 30 partitions' checks
# (committed partitions finish on their fingerprint without reading their input).
# Each partition stays its own unit of checkpoint, attempt count, quarantine and UI
# status inside the run (`run_backfill_step`, `finish_step`).
DEFAULT_BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=30)


class BackfillConfig(dg.Config):
    """Run config every backfill asset takes."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS


def backfill_asset(
    *,
    table: sa.Table,
    partitions_def: dg.PartitionsDefinition,
    partition_scope: PartitionScope,
    key: Sequence[str] | None = None,
    fingerprint: Fingerprinter | None = None,
    seed_example: ExampleSeeder | None = None,
    deps: Sequence[str] = (),
    name: str | None = None,
    group_name: str = "backfills",
    description: str | None = None,
    backfill_policy: dg.BackfillPolicy | None = DEFAULT_BACKFILL_POLICY,
    version: str = "",
) -> Callable[[ChunkReader], dg.AssetsDefinition]:
    """Declare a backfill: the decorated function yields DataFrame chunks of a partition.

    The framework owns the rest: chunk checkpoints, upserts by `key` (the table's primary
    key by default), the sweep of rows no longer in the input, fencing, the error
    taxonomy, bounded retries and quarantine. By default a backfill launched from the UI
    or a schedule runs up to 30 partitions per run (`DEFAULT_BACKFILL_POLICY`), each still
    its own unit of checkpoint, attempt count, quarantine and status in the UI. Pass
    `backfill_policy=BackfillPolicy.multi_run(1)` for one run per partition, or
    `single_run()` for one run over the whole range. Assets of one job should share a
    policy: a job takes the smallest among its assets.
    """

    def decorator(read_chunks: ChunkReader) -> dg.AssetsDefinition:
        asset_name = name or read_chunks.__name__
        spec = BackfillSpec(
            asset=asset_name,
            table=table,
            key=tuple(key) if key else tuple(column.name for column in table.primary_key),
            read_chunks=read_chunks,
            partition_scope=partition_scope,
            fingerprint=fingerprint,
            seed_example=seed_example,
            upstream=tuple(deps),
            version=version,
        )
        register_backfill(spec, partitions_def)

        def _backfill(context: dg.AssetExecutionContext, config: BackfillConfig):
            yield from run_backfill_step(context, [spec], config.chunk_rows)

        # `backfill_policy` is marked beta in Dagster 1.13; every backfill has one by
        # default, so the warning would greet each process that loads the code location.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)
            return dg.asset(
                name=asset_name,
                partitions_def=partitions_def,
                deps=list(deps),
                retry_policy=CRASH_RETRY_POLICY,
                hooks={quarantine_on_failure},
                group_name=group_name,
                description=description or (read_chunks.__doc__ or "").strip() or None,
                kinds={"sql"},
                tags={BACKFILL_TAG: "true"},
                metadata={"table": table.name, "key": ", ".join(spec.key)},
                required_resource_keys={RESOURCE_KEY},
                backfill_policy=backfill_policy,
                op_tags={STEP_ASSETS_TAG: asset_name},
            )(_backfill)

    return decorator


def run_backfill_step(
    context: dg.AssetExecutionContext, specs: Sequence[BackfillSpec], chunk_rows: int
) -> Iterator[dg.MaterializeResult]:
    """One step = one attempt at each partition of each selected asset, upstream first.

    `specs` are the step's backfills in dependency order (one, or a chain of backfills
    partitioned alike: `chain_backfills`). Each partition is its own unit: a downstream
    partition is attempted only once the partitions it reads are done, so a poison
    partition withholds its own downstream and nothing else.
    """
    resource: JobsPlatformResource = getattr(context.resources, RESOURCE_KEY)
    try:
        settings = resource.settings_for_step(remote=runs_remotely(context))
    except WarehouseNotShared as error:
        # Terminal and before any write: nothing to retry, nothing to quarantine, and no
        # warehouse to quarantine it in (the failure hook sees this cause and stands aside).
        raise dg.Failure(
            description=str(error),
            metadata={"error_class": "terminal", "error_type": type(error).__name__},
            allow_retries=False,
        ) from error
    info = AttemptInfo(
        run_id=context.run.run_id,
        step_retry=context.retry_number,
        correlation_id=context.run.tags.get(CORRELATION_TAG),
        holder=this_holder(),
    )
    selected = {key.to_user_string() for key in context.selected_asset_keys}
    chosen = [spec for spec in specs if spec.asset in selected]
    partitions = list(context.partition_keys)
    results = []
    for spec in chosen:
        # A warehouse behind on its schema fails each attempt before it exists (terminal:
        # nothing counted, nothing quarantined, not retried; only a deploy step fixes it).
        runner = PartitionRunner(
            spec,
            settings,
            log=context.log,
            interrupt_types=(DagsterExecutionInterruptedError,),
            upstream=upstream_partitioned_alike(spec),
        )
        for partition in partitions:
            try:
                results.append(runner.attempt(partition, info, chunk_rows=chunk_rows))
            except DagsterExecutionInterruptedError:
                # Shutdown (SIGTERM, or the run terminated from the UI): the runner rolled
                # back the in-flight chunk, recorded the attempt as interrupted and released
                # the lease. Stop; a retry policy must not restart work the operator asked
                # to stop.
                raise dg.Failure(
                    description=f"{spec.asset}/{partition} interrupted by shutdown; committed "
                    "chunks are kept and a re-run finishes the partition",
                    metadata={"error_class": "interrupted"},
                    allow_retries=False,
                ) from None
    yield from finish_step(context, [spec.asset for spec in chosen], results)
