"""What `plan` asks of a backfill's own functions, with the location's resources.

- its `fingerprint=` of each done partition (bound as the redrive binds it:
  `dead_letter.redrive_sensor.bound_fingerprints`): whether its input changed;
- its `ready=` of each partition a launch would act on (bound as the holds sensor binds
  it: `orchestration.backfill_asset.ready_in_sensor`), within `READY_BUDGET_SECONDS`.

Each is asked about the partition's `PartitionInput`, as a reader gets it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence

import dagster as dg

from jobs_platform.dead_letter.redrive_sensor import bound_fingerprints
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.backfill_asset import ready_in_sensor, resource_parameters
from jobs_platform.steering.plan import Action, Backfill, Reason, plan_rows
from jobs_platform.steering.plan_facts import PartitionFacts
from jobs_platform.steering.plan_holds import Holds
from jobs_platform.steering.plan_readiness import READY_BUDGET_SECONDS, ask_readiness

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
    needed = resource_parameters(spec.ready)
    resources = repository.get_top_level_resources()
    if set(needed) - set(resources):
        yield None
        return
    # With the instance: without one Dagster makes an ephemeral instance per build.
    with dg.build_resources({name: resources[name] for name in needed}, instance=instance) as built:
        ready = ready_in_sensor(spec, built)
        yield lambda partition: ready(_input(spec, partition, store))


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
