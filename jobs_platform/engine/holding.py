"""The steering gate: whether a backfill's steering holds a partition back before its attempt.

After the quarantine and upstream gates, `begin_attempt` asks `hold_back`: a paused
backfill holds every partition, and a backfill declared with `ready=` holds a partition
whose input is not ready. A held partition records no attempt and spends no budget; its
hold is recorded (`steering.holds`) so that the holds sensor launches it again once the
backfill is resumed or the input is ready.

The pause is read from the warehouse on every attempt, so it holds on every host and every
launch path (a Dagster backfill, `dagster job execute`, a requeue, the outbox). An attempt
already past this gate finishes its partition: a pause never interrupts one.
"""

from __future__ import annotations

import logging

from jobs_platform.engine.outcomes import Held
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import JobsPlatformError
from jobs_platform.steering.holds import HoldReason
from jobs_platform.steering.pauses import Pause

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


class HeldBack(JobsPlatformError):
    """Its backfill is paused, or its input is not ready: not attempted, nothing spent."""


def hold_back(
    spec: BackfillSpec,
    store: Warehouse,
    log: Log,
    partition: str,
    *,
    run_id: str | None,
    paused: Pause | None,
) -> Held | None:
    """Hold `partition` back when its backfill is `paused` (as the gate read it, with the
    quarantine and the upstream) or its input is not ready (the hold recorded), or None:
    the attempt may go on."""
    asset = spec.asset
    if paused is not None:
        reason = HoldReason.PAUSED
        why = (
            f"{asset}/{partition} not attempted: {asset} is {paused.describe()}; "
            "resuming it launches this partition again (jobs-platform backfill resume)"
        )
    elif spec.ready is not None and not spec.ready(_input(spec, store, log, partition)):
        reason = HoldReason.NOT_READY
        why = (
            f"{asset}/{partition} not attempted: its input is not ready; it is launched "
            "again once it is"
        )
    else:
        return None
    with store.begin() as connection:
        hold = store.holds.hold(connection, asset, partition, reason, run_id=run_id)
    return Held(asset, partition, HeldBack(why), reason=reason, since=hold.since)


def _input(spec: BackfillSpec, store: Warehouse, log: Log, partition: str) -> PartitionInput:
    """What `ready` is asked about: the partition's `PartitionInput`, as the reader gets it."""
    return PartitionInput(
        asset=spec.asset,
        partition_key=partition,
        chunk_rows=DEFAULT_CHUNK_ROWS,
        warehouse=store.engine,
        log=log,
        bad_rows=spec.bad_rows,
    )
