"""`backfill_asset`: one decorator turns a chunk reader into a safe partitioned asset."""

import dataclasses
import datetime as dt
import functools
import inspect
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Concatenate, ParamSpec, Protocol, TypedDict, TypeVar, Unpack, assert_never

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform.engine.attempt import Attempter
from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.outcomes import (
    Blocked,
    BudgetSpent,
    Busy,
    Failed,
    Held,
    NotDue,
    Outcome,
    PartitionReport,
    Refused,
    Unfinished,
)
from jobs_platform.engine.runner import PartitionRunner
from jobs_platform.engine.spec import (
    DEFAULT_CHUNK_ROWS,
    BackfillSpec,
    Fingerprinter,
    PartitionInput,
    PartitionScope,
    ReadyCheck,
    RejectRows,
)
from jobs_platform.errors import WarehouseNotShared
from jobs_platform.gate.audits import Audit
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.orchestration.dagster_results import CRASH_RETRY_POLICY, finish_step
from jobs_platform.orchestration.executors import retries_wait_in_the_step, runs_remotely
from jobs_platform.orchestration.gate_checks import audit_check_results, audit_check_specs
from jobs_platform.orchestration.hooks import quarantine_on_failure
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.specs import attach_specs
from jobs_platform.orchestration.step_retries import StepTry
from jobs_platform.orchestration.tags import BACKFILL_TAG, CORRELATION_TAG, STEP_ASSETS_TAG
from jobs_platform.orchestration.upstream import upstream_reads
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
# status inside the run (`run_backfill_step`, `finish_step`). Dagster's own rule holds:
# `dagster asset materialize --partition-range` takes only `single_run()` assets, so
# under this policy a range from the shell is `dagster job execute` with the range tags.
DEFAULT_BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=30)


class BackfillConfig(dg.Config):
    """Run config every backfill asset takes."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS


class AssetArguments(TypedDict, total=False):
    """The `@dg.asset` arguments `backfill_asset` passes through as they are (typed, so a
    user's type checker sees a misspelt or mistyped one)."""

    owners: Sequence[str]
    pool: str
    automation_condition: dg.AutomationCondition[Any]
    freshness_policy: dg.FreshnessPolicy
    check_specs: Sequence[dg.AssetCheckSpec]
    resource_defs: Mapping[str, object]


P = ParamSpec("P")
T = TypeVar("T")


class BackfillDecorator(Protocol):
    """What `backfill_asset(...)` returns: it takes a reader whose first parameter is the
    `PartitionInput` (the others are resources and `config`) and yields DataFrames."""

    def __call__(
        self, read_chunks: Callable[Concatenate[PartitionInput, P], Iterable[pd.DataFrame]], /
    ) -> dg.AssetsDefinition: ...


def backfill_asset(
    *,
    table: sa.Table,
    partitions_def: dg.PartitionsDefinition,
    partition_scope: PartitionScope,
    natural_key: Sequence[str] | None = None,
    fingerprint: Fingerprinter | None = None,
    ready: ReadyCheck | None = None,
    max_wait: dt.timedelta | None = None,
    deps: Sequence[dg.AssetKey | str | dg.AssetsDefinition | dg.AssetSpec | dg.AssetDep] = (),
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    key: dg.AssetKey | str | Sequence[str] | None = None,
    code_version: str | None = None,
    backfill_policy: dg.BackfillPolicy | None = DEFAULT_BACKFILL_POLICY,
    bad_rows: RejectRows | None = None,
    expect: ChangeContract | None = None,
    audits: Sequence[Audit] = (),
    retry_policy: dg.RetryPolicy | None = None,
    redrive: bool = True,
    group_name: str = "backfills",
    description: str | None = None,
    tags: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    kinds: AbstractSet[str] | None = None,
    **asset_kwargs: Unpack[AssetArguments],
) -> BackfillDecorator:
    """Declare a backfill: the decorated function yields DataFrame chunks of a partition.

    The framework owns the rest: chunk checkpoints, upserts by `natural_key` (columns of
    `table`; its primary key when omitted), the sweep of rows no longer in the input,
    fencing, the error taxonomy, bounded retries and quarantine. The function's first
    parameter is the `PartitionInput`; each further parameter annotated with a
    `dg.ConfigurableResource` subclass is the resource of that name, and `config:
    <a dg.Config subclass>` is the step's run config, as in an `@dg.asset` function
    (`def events(source: PartitionInput, landing: CsvLanding, config: EventsConfig)`).
    The run config also holds the framework's `chunk_rows` (`run_config_class`). A
    `fingerprint` function takes the same: the `PartitionInput`, resources, `config`.

    `ready` takes the same too and returns whether the partition's input is there yet (a
    file landed, an export finished): a partition not ready is held, not attempted (no
    attempt recorded, no budget spent), and the holds sensor launches it once `ready` says
    so. Held longer than `max_wait`, it is reported once (`status`, an alert), never
    quarantined. `ready=lambda source, landing: landing.exists(source.partition_key)`.

    Dagster's vocabulary: `code_version` (bump it after changing the reader, and done
    partitions are recomputed), `deps` (asset keys, names or assets), and every other
    `@dg.asset` argument passed through (`key`, `key_prefix`, `owners`, `pool`,
    `automation_condition`, …). A backfill is known by its asset key everywhere (framework
    rows, the CLI, metrics, alerts): `key_prefix=["acme"]` makes it `acme/events`. A dep
    may be partitioned differently (an hourly backfill read by a daily one): each
    partition is computed only once every upstream partition its Dagster partition mapping
    names is done (`dg.AssetDep(..., partition_mapping=...)` for another mapping).
    `pool=` bounds how many steps of the backfill run at once across runs (Dagster's pool
    limits: size it to what the downstream system can take). A `retry_policy` sets the
    delay of the step retries Dagster makes after a step process died; the framework keeps
    enough of them for its own cross-run attempt ceiling to be what stops a crash loop.

    `redrive=False` keeps the dead letter's redrive (`dead_letter_redrive_sensor`) off the
    backfill's entries: they wait for a person even once their input or code changed or
    their outage has passed.
    By default one bad row quarantines its partition whole. `bad_rows=RejectRows(max_rows=N,
    max_fraction=F)` keeps aside the rows the warehouse rejects (a data exception, a
    not-null, check or foreign-key violation caused by the row) and those the reader
    rejects (`source.reject(row_number, reason, values)`) and commits the rest; past a
    limit the partition is quarantined as without it (PostgreSQL warehouses only).

    `expect=ChangeContract(...)` gates each partition before it counts: its chunks are
    staged, and the partition is published only if the diff against the table keeps
    within the contract's bounds (rows inserted, fractions updated and swept, the row
    count); otherwise the table is left as it was and the partition quarantined with the
    diff (docs/bad-rows.md). `audits=[audits.not_null("amount"), …]` (`from jobs_platform
    import audits`) checks the staged rows before the publish: a blocking audit that fails
    refuses the partition alike, a non-blocking one is recorded. Each audit is an asset
    check of the backfill, evaluated per partition.

    By default a backfill launched from the UI or a schedule runs up to 30 partitions per
    run (`DEFAULT_BACKFILL_POLICY`), each still its own unit of checkpoint, attempt count,
    quarantine and status in the UI. Pass `backfill_policy=BackfillPolicy.multi_run(1)`
    for one run per partition, or `single_run()` for one run over the whole range. The
    policy is Dagster's as given: `dagster asset materialize --partition-range` accepts
    only `single_run()`; `dagster job execute` with Dagster's range tags takes any.
    """
    for reserved in ("partitions_def", "required_resource_keys", "hooks", "op_tags"):
        if reserved in asset_kwargs:
            raise TypeError(f"backfill_asset() sets {reserved}= itself")
    if key is not None and (name is not None or key_prefix is not None):
        raise TypeError("backfill_asset() takes key= or name=/key_prefix=, not both")
    upstream = tuple(_asset_key(dep).to_user_string() for dep in deps)

    def decorator(read_chunks: Callable[..., Iterable[pd.DataFrame]]) -> dg.AssetsDefinition:
        asset_key = _own_key(key, key_prefix, name or read_chunks.__name__)
        asset_name = asset_key.to_user_string()
        resource_keys = resource_parameters(read_chunks, fingerprint, ready)
        spec = BackfillSpec(
            asset=asset_name,
            table=table,
            key=tuple(natural_key or (column.name for column in table.primary_key)),
            read_chunks=read_chunks,
            partition_scope=partition_scope,
            fingerprint=fingerprint,
            upstream=upstream,
            version=code_version or "",
            redrive=redrive,
            bad_rows=bad_rows,
            ready=ready,
            max_wait=max_wait,
            expect=expect,
            audits=tuple(audits),
        )
        config_class = run_config_class(spec)
        arguments: AssetArguments = {**asset_kwargs}
        if spec.audits:
            # Each audit is an asset check of the backfill, beside the user's own.
            arguments["check_specs"] = [
                *asset_kwargs.get("check_specs", ()),
                *audit_check_specs(asset_key, spec.audits, partitions_def),
            ]

        # Dagster reads the step's config class from this annotation (a class per reader).
        def _backfill(context: dg.AssetExecutionContext, config: config_class):  # type: ignore[valid-type]
            yield from run_backfill_step(context, [spec], {spec.asset: config})

        # `backfill_policy` is marked beta in Dagster 1.13; every backfill has one by
        # default, so the warning would greet each process that loads the code location.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)
            asset = dg.asset(
                key=asset_key,
                partitions_def=partitions_def,
                deps=[dep if isinstance(dep, dg.AssetDep) else _asset_key(dep) for dep in deps],
                code_version=code_version,
                retry_policy=with_crash_retries(retry_policy),
                hooks={quarantine_on_failure},
                group_name=group_name,
                description=description or (read_chunks.__doc__ or "").strip() or None,
                kinds=set(kinds) if kinds is not None else {"sql"},
                tags={**(tags or {}), BACKFILL_TAG: "true"},
                metadata={
                    **(metadata or {}),
                    "table": table.name,
                    "natural_key": ", ".join(spec.key),
                },
                required_resource_keys={RESOURCE_KEY, *resource_keys},
                backfill_policy=backfill_policy,
                op_tags={STEP_ASSETS_TAG: asset_name},
                **arguments,
            )(_backfill)
        return attach_specs(asset, [spec])

    return decorator


CONFIG_PARAMETER = "config"


def resource_parameters(*functions: Callable[..., Any] | None) -> tuple[str, ...]:
    """The resources a reader and its fingerprint take: their parameters after the first
    (the `PartitionInput`) other than `config`, each annotated with a
    `dg.ConfigurableResource` subclass and injected by its name, as in an `@dg.asset`."""
    names: dict[str, None] = {}
    for function in functions:
        if function is None:
            continue
        annotations = _parameters_after_the_input(function)
        parameters = [name for name in annotations if name != CONFIG_PARAMETER]
        wrong = [n for n in parameters if not _is_resource(annotations[n])]
        if wrong:
            raise TypeError(
                f"backfill function {_name(function)}: parameters after the PartitionInput "
                f"must be annotated with a dg.ConfigurableResource subclass (or be `config: "
                f"<a dg.Config subclass>`); {wrong} are not"
            )
        names.update(dict.fromkeys(parameters))
    return tuple(names)


def declared_config(function: Callable[..., Any]) -> type[dg.Config] | None:
    """The `dg.Config` subclass a reader's or fingerprint's `config` parameter names."""
    annotations = _parameters_after_the_input(function)
    if CONFIG_PARAMETER not in annotations:
        return None
    annotation = annotations[CONFIG_PARAMETER]
    if not (isinstance(annotation, type) and issubclass(annotation, dg.Config)):
        raise TypeError(
            f"backfill function {_name(function)}: its `config` parameter must be annotated "
            f"with a dg.Config subclass, not {annotation!r}"
        )
    return annotation


def run_config_class(spec: BackfillSpec) -> type[BackfillConfig]:
    """The run config of a backfill: `chunk_rows` (`BackfillConfig`) plus the fields of
    each `dg.Config` its reader and fingerprint declare as `config`. In a chain each
    backfill keeps its own, under its own name (`chains.chain_backfills`).

    One class extending them all, so the object Dagster builds from the run config is an
    instance of each user class (and of `BackfillConfig`: `chunk_rows` always works).
    """
    declared: list[type[dg.Config]] = []
    for function in (spec.read_chunks, spec.fingerprint, spec.ready):
        found = declared_config(function) if function is not None else None
        if found is not None and found not in declared:
            declared.append(found)
    # A class already extended by another declared one is in the other's bases.
    bases = [c for c in declared if not any(o is not c and issubclass(o, c) for o in declared)]
    if not bases:
        return BackfillConfig
    return typing.cast(
        type[BackfillConfig],
        types.new_class(
            "".join(base.__name__ for base in bases),
            (*bases, BackfillConfig),
            exec_body=lambda namespace: namespace.update(__module__=bases[0].__module__),
        ),
    )


def with_resources(
    spec: BackfillSpec, context: dg.AssetExecutionContext, config: BackfillConfig
) -> BackfillSpec:
    """The spec whose reader and fingerprint get their resources from the step, and the
    step's run config as `config` if they declare it, as an asset function would."""
    fingerprint, ready = spec.fingerprint, spec.ready
    return dataclasses.replace(
        spec,
        read_chunks=_bound(spec.read_chunks, context, config),
        fingerprint=_bound(fingerprint, context, config) if fingerprint is not None else None,
        ready=_bound(ready, context, config) if ready is not None else None,
    )


def _bound(
    function: Callable[..., T], context: dg.AssetExecutionContext, config: BackfillConfig
) -> Callable[..., T]:
    arguments: dict[str, Any] = {
        name: getattr(context.resources, name) for name in resource_parameters(function)
    }
    if declared_config(function) is not None:
        arguments[CONFIG_PARAMETER] = config
    return functools.partial(function, **arguments) if arguments else function


def ready_in_sensor(spec: BackfillSpec, resources: Any) -> Callable[[PartitionInput], bool]:
    """`spec.ready` as the holds sensor asks it: its resources from the sensor's
    `resources`, and, if it declares `config`, that class built from its defaults (a
    sensor has no run config)."""
    ready = spec.ready
    if ready is None:
        raise ValueError(f"backfill {spec.asset!r} declares no ready=")
    arguments: dict[str, Any] = {
        name: getattr(resources, name) for name in resource_parameters(ready)
    }
    config_class = declared_config(ready)
    if config_class is not None:
        arguments[CONFIG_PARAMETER] = config_class()
    return functools.partial(ready, **arguments) if arguments else ready


def _parameters_after_the_input(function: Callable[..., Any]) -> dict[str, Any]:
    """Each parameter after the first, by name, with its (evaluated) annotation."""
    parameters = list(inspect.signature(function, eval_str=True).parameters.values())[1:]
    return {parameter.name: parameter.annotation for parameter in parameters}


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _is_resource(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dg.ConfigurableResource)


def with_crash_retries(policy: dg.RetryPolicy | None) -> dg.RetryPolicy:
    """A user's retry policy, with at least the step retries the framework's ceiling needs."""
    if policy is None:
        return CRASH_RETRY_POLICY
    return dg.RetryPolicy(
        max_retries=max(policy.max_retries, CRASH_RETRY_POLICY.max_retries),
        delay=policy.delay,
        backoff=policy.backoff,
        jitter=policy.jitter,
    )


def _own_key(
    key: dg.AssetKey | str | Sequence[str] | None,
    key_prefix: str | Sequence[str] | None,
    name: str,
) -> dg.AssetKey:
    """The backfill's asset key, as `@dg.asset` makes it from `key` or `key_prefix` + name."""
    if key is not None:
        return _asset_key(key)
    prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix or [])
    return dg.AssetKey([*prefix, name])


def _asset_key(dep) -> dg.AssetKey:
    if isinstance(dep, dg.AssetDep):
        return dep.asset_key
    if isinstance(dep, dg.AssetsDefinition):
        return dep.key
    if isinstance(dep, dg.AssetSpec):
        return dep.key
    if isinstance(dep, str):
        return dg.AssetKey.from_user_string(dep)
    return dg.AssetKey.from_coercible(dep)


# How an upstream partition that did not finish in this step try is named to its downstream.
_AFTER_DECISION = {
    NextStep.QUARANTINE: "quarantined",
    NextStep.RETRY: "failed, retrying",
    NextStep.SNOOZE: "snoozing",
    NextStep.GIVE_UP: "failed before its attempt",
}


def _why_unfinished(outcome: Unfinished) -> str:
    match outcome:
        case Refused() | BudgetSpent():
            return _AFTER_DECISION[NextStep.QUARANTINE]
        case Blocked():
            return "blocked"
        case Held(reason=reason):
            return f"held ({reason})"
        case NotDue():
            return "waiting for its retry"
        case Busy(decision=decision) | Failed(decision=decision):
            return _AFTER_DECISION[decision.next_step]
        case _:
            assert_never(outcome)


def run_backfill_step(
    context: dg.AssetExecutionContext,
    specs: Sequence[BackfillSpec],
    configs: Mapping[str, BackfillConfig],
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """One step = one attempt at each partition of each selected asset, upstream first.

    `specs` are the step's backfills in dependency order (one, or a chain of backfills
    partitioned alike: `chain_backfills`), `configs` each one's run config by its asset
    key. Each partition is its own unit: a downstream
    partition is attempted only once the partitions it reads are done, so a poison
    partition withholds its own downstream and nothing else. When the step retries, each
    partition is attempted again only once its own delay is due, and one an earlier try
    finished is not attempted again (`StepTry`).
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
    attempter = Attempter(
        run_id=context.run.run_id,
        step_retry=context.retry_number,
        correlation_id=context.run.tags.get(CORRELATION_TAG),
        holder=this_holder(),
    )
    selected = {key.to_user_string() for key in context.selected_asset_keys}
    chosen = [spec for spec in specs if spec.asset in selected]
    partitions = list(context.partition_keys)
    # The whole location's graph (with upstream assets the run does not select).
    graph = context.job_def.asset_layer.asset_graph
    step = StepTry.begin(
        context,
        [spec.asset for spec in chosen],
        partitions,
        waits_in_next_try=retries_wait_in_the_step(context),
    )
    try:
        step.sleep_until_due()
    except dg.DagsterExecutionInterruptedError:
        # Terminated while it waited for its retry time: nothing was attempted or held.
        raise dg.Failure(
            description="interrupted by shutdown while waiting for its retry time; nothing "
            "was attempted in this try, a re-run tries again",
            metadata={"error_class": "interrupted"},
            allow_retries=False,
        ) from None
    results: list[Outcome] = []
    # What did not finish in this try, so a downstream partition of the same step is
    # blocked without asking the warehouse (which may be what failed).
    unfinished: dict[tuple[str, str], str] = {}
    for spec in chosen:
        reads = upstream_reads(graph, dg.AssetKey.from_user_string(spec.asset), context.instance)
        config = configs[spec.asset]
        spec = with_resources(spec, context, config)
        # A warehouse behind on its schema fails each attempt before it exists (terminal:
        # nothing counted, nothing quarantined, not retried; only a deploy step fixes it).
        runner = PartitionRunner(
            spec,
            settings,
            log=context.log,
            interrupt_types=(dg.DagsterExecutionInterruptedError,),
            upstream=reads,
        )
        for partition in partitions:
            if (spec.asset, partition) in step.done_before:
                continue  # materialized by an earlier try of this step
            due = step.due(spec.asset, partition)
            this_try = dataclasses.replace(attempter, tries_before=due.tries_before)
            waiting_on = {read: unfinished[read] for read in reads(partition) if read in unfinished}
            if waiting_on or not due.attempt:
                skipped: Blocked | NotDue
                if waiting_on:
                    skipped = runner.blocked(partition, this_try, waiting_on)
                else:
                    skipped = runner.not_due(partition, this_try, step.not_due_decision(due))
                    unfinished[spec.asset, partition] = _why_unfinished(skipped)
                step.ended(skipped, due)
                results.append(skipped)
                continue
            try:
                result = runner.attempt(partition, this_try, chunk_rows=config.chunk_rows)
            except dg.DagsterExecutionInterruptedError:
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
            if not isinstance(result, PartitionReport):
                unfinished[spec.asset, partition] = _why_unfinished(result)
            step.ended(result, due)
            results.append(result)
    # The audits' checks follow the materialization they judge, or precede the failure.
    # Only the checks the step's asset declares (a chain's members declare none).
    checks = list(audit_check_results(chosen, results, context.assets_def.check_keys))
    try:
        yield from finish_step(context, [spec.asset for spec in chosen], results, step)
    except (dg.Failure, dg.RetryRequested):
        yield from checks
        raise
    yield from checks
