"""What `plan` asks of a backfill's own functions, with the location's resources.

- its `fingerprint=` of each done partition (bound as the redrive binds it:
  `dead_letter.redrive_sensor.bound_fingerprints`): whether its input changed;
- its `ready=` of each partition a launch would act on (bound as the holds sensor binds
  it: `orchestration.backfill_asset.ready_in_sensor`), within `READY_BUDGET_SECONDS`;
- under `expect=` or `audits=`, its reader of each partition a launch would run, staged
  and diffed as the gate's finalize diffs it, never published (`steering.plan_diff`),
  within `DIFF_BUDGET_SECONDS`.

Each is asked about the partition's `PartitionInput`, as a reader gets it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import dagster as dg
import sqlalchemy as sa

from jobs_platform.dead_letter.redrive_sensor import bound_fingerprints
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.gate.diff import ChangeDiff
from jobs_platform.orchestration.backfill_asset import (
    declared_config,
    ready_in_sensor,
    resource_parameters,
)
from jobs_platform.steering.plan import Backfill, plan_rows
from jobs_platform.steering.plan_diff import DIFF_BUDGET_SECONDS, expected_change
from jobs_platform.steering.plan_facts import PartitionFacts
from jobs_platform.steering.plan_holds import Holds
from jobs_platform.steering.plan_readiness import READY_BUDGET_SECONDS, ask_readiness
from jobs_platform.steering.plan_row import Action, Reason

log = logging.getLogger("jobs_platform.plan")


def holds_asking_ready(
    spec: BackfillSpec,
    repository: dg.RepositoryDefinition,
    backfill: Backfill,
    keys: Sequence[str],
    facts: PartitionFacts,
    fingerprints: dict[str, str],
    holds: Holds,
    store: Warehouse,
    instance: dg.DagsterInstance | None,
    notes: list[str],
) -> tuple[Holds, frozenset[str]]:
    """`holds` with the partitions not ready as `ready=` says now, asked about each
    partition a launch would run or quarantine (the gate asks before either) within
    `READY_BUDGET_SECONDS`; and the partitions left unasked."""
    if spec.ready is None:
        # The gate asks nothing: a hold left from an older `ready=` holds nothing back.
        return dataclasses.replace(holds, not_ready={}), frozenset()
    with _ready_now(spec, repository, store, instance) as is_ready:
        if is_ready is None:
            notes.append(
                f"{spec.asset}'s ready= cannot be asked here (a resource the location does not "
                "bind): not_ready is what the runs recorded and the holds sensor has not cleared"
            )
            return holds.as_recorded(spec.max_wait, facts.now), frozenset()
        # Asked as if no circuit were open: the gate asks `ready` before the circuits.
        unheld = dataclasses.replace(holds, not_ready={})
        acted_on = [
            row.partition
            for row in plan_rows(backfill, keys, facts, fingerprints, unheld)
            if row.action is Action.RUN or row.reason is Reason.BUDGET_SPENT
        ]
        readiness = ask_readiness(
            acted_on, is_ready, holds.held, max_wait=spec.max_wait, now=facts.now
        )
    if readiness.unasked:
        notes.append(
            f"ready= not asked about {len(readiness.unasked)} partition(s): the plan's "
            f"{READY_BUDGET_SECONDS:g} s for it were spent (a launch asks each before its attempt)"
        )
    return dataclasses.replace(holds, not_ready=readiness.not_ready), readiness.unasked


@contextlib.contextmanager
def _ready_now(
    spec: BackfillSpec,
    repository: dg.RepositoryDefinition,
    store: Warehouse,
    instance: dg.DagsterInstance | None,
) -> Iterator[Callable[[str], bool] | None]:
    """Whether a partition's input is ready now: `spec.ready` with the location's resources,
    bound as the holds sensor binds it; None when a resource it takes is not bound."""
    assert spec.ready is not None
    with _location_resources(resource_parameters(spec.ready), repository, instance) as built:
        if built is None:
            yield None
            return
        ready = ready_in_sensor(spec, SimpleNamespace(**built))
        yield lambda partition: ready(_input(spec, partition, store))


@contextlib.contextmanager
def _location_resources(
    names: Sequence[str], repository: dg.RepositoryDefinition, instance: dg.DagsterInstance | None
) -> Iterator[dict[str, Any] | None]:
    """The location's resources of these `names`, built for the plan; None when one of them
    is not bound."""
    resources = repository.get_top_level_resources()
    if set(names) - set(resources):
        yield None
        return
    # With the instance: without one Dagster makes an ephemeral instance per build.
    with dg.build_resources({name: resources[name] for name in names}, instance=instance) as built:
        yield {name: getattr(built, name) for name in names}


def _input(spec: BackfillSpec, partition: str, store: Warehouse) -> PartitionInput:
    """What `fingerprint` and `ready` are asked about: the partition's input, as a reader
    gets it."""
    return PartitionInput(
        asset=spec.asset,
        partition_key=partition,
        chunk_rows=DEFAULT_CHUNK_ROWS,
        warehouse=store.engine,
        log=log,
        bad_rows=spec.bad_rows,
    )


def fingerprints_now(
    spec: BackfillSpec,
    repository: dg.RepositoryDefinition,
    done: Sequence[str],
    store: Warehouse,
    instance: dg.DagsterInstance | None,
    notes: list[str],
) -> dict[str, str] | None:
    """The input fingerprint now of each done partition, in the stored form; None when the
    backfill has none or it cannot be bound (said in `notes`)."""
    if spec.fingerprint is None:
        return None
    with bound_fingerprints([spec], repository, log, instance) as bound:
        fingerprint = bound.get(spec.asset)
        if fingerprint is None:
            notes.append(
                f"{spec.asset}'s fingerprint= cannot be computed here (it takes run config, or "
                "a resource the location does not bind): done partitions are not compared"
            )
            return None
        found: dict[str, str] = {}
        failed = 0
        for partition in done:
            try:
                found[partition] = spec.stored_fingerprint(
                    fingerprint(_input(spec, partition, store))
                )
            except Exception as error:  # the attempt's own fingerprint would fail too
                failed += 1
                log.debug("%s/%s: fingerprint failed: %s", spec.asset, partition, error)
        if failed:
            notes.append(
                f"{failed} done partition(s): the fingerprint failed now, planned as "
                "input_changed (an attempt computes it first and fails the same way)"
            )
    return found


def expected_changes(
    spec: BackfillSpec,
    repository: dg.RepositoryDefinition,
    partitions: Sequence[str],
    store: Warehouse,
    instance: dg.DagsterInstance | None,
    notes: list[str],
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, dict[str, object]]:
    """For a gated backfill (`expect=`, `audits=`), each of `partitions`' expected change
    (`steering.plan_diff`): its input read with the location's resources, as a step reads
    it, staged and diffed, never published; within `DIFF_BUDGET_SECONDS`."""
    if not spec.gated:
        return {}
    reader = spec.read_chunks
    if declared_config(reader) is not None:
        notes.append(f"{spec.asset}'s reader takes run config: its changes are not diffed")
        return {}
    changes: dict[str, dict[str, object]] = {}
    with _location_resources(resource_parameters(reader), repository, instance) as built:
        if built is None:
            notes.append(
                f"{spec.asset}'s reader takes a resource the location does not bind: its "
                "changes are not diffed"
            )
            return {}
        read = functools.partial(reader, **built)
        deadline = monotonic() + DIFF_BUDGET_SECONDS
        for position, partition in enumerate(partitions):
            if monotonic() > deadline:
                notes.append(
                    f"{len(partitions) - position} partition(s) not diffed: the plan's "
                    f"{DIFF_BUDGET_SECONDS:g} s for reading inputs were spent"
                )
                break
            approved = functools.partial(_approved, store, spec.asset, partition)
            try:
                chunks = read(_input(spec, partition, store))
                with store.connect() as connection:
                    change = expected_change(connection, spec, partition, chunks, approved)
                changes[partition] = change.as_dict()
            except Exception as error:  # the attempt reads the same input and fails so too
                changes[partition] = {"error": f"{type(error).__name__}: {error}"[:300]}
    return changes


def _approved(
    store: Warehouse, asset: str, partition: str, connection: sa.Connection, diff: ChangeDiff
) -> bool:
    """Whether a person accepted exactly this diff of the partition (`accept-change`)."""
    return store.change_reviews.approval_of(connection, asset, partition, diff.digest()) is not None
