"""The failure hook: a partition whose step failed for good ends in the quarantine.

The runner already quarantines what it decides to quarantine; the hook covers a step that
failed some other way (Dagster's own retry budget spent on crashes) and is idempotent, so
both reporting the same failure make one entry. Every partition of the step's assets
that the run attempted is considered, and only those whose budget is spent are
quarantined. The decision stays in the core
(`engine.failure.quarantine_if_spent`, fenced by the partition's lease): an interrupted
attempt, a partition with budget left or one a live worker holds is not quarantined.
"""

from __future__ import annotations

import dagster as dg

from jobs_platform.engine.failure import quarantine_if_spent
from jobs_platform.engine.interrupts import InterruptShield
from jobs_platform.errors import WarehouseNotShared
from jobs_platform.orchestration._compat import failed_step_cause
from jobs_platform.orchestration.tags import STEP_ASSETS_TAG
from jobs_platform.store.attempts import partitions_attempted_in_run
from jobs_platform.store.leases import this_holder
from jobs_platform.store.migrate import SchemaNotReady


@dg.failure_hook(required_resource_keys={"jobs_platform"})
def quarantine_on_failure(context: dg.HookContext) -> None:
    if isinstance(failed_step_cause(context), WarehouseNotShared):
        # The step refused to guess its warehouse; writing the entry would guess it here.
        context.log.error("failure hook: no shared warehouse on this worker; nothing recorded")
        return
    settings = context.resources.jobs_platform.settings()
    try:
        store = context.resources.jobs_platform.ready_store()
    except SchemaNotReady as exc:
        # The step failed on the same check before any attempt: nothing to quarantine.
        context.log.error(str(exc))
        return
    # The backfills the step computes (one, or a chain of them: `chain_backfills`), and of
    # each the partitions this run attempted: a partition the step never reached (blocked
    # behind its upstream, or after the failure) has nothing to quarantine.
    # A shutdown signal (the second of a process group's SIGTERM and the executor's SIGINT)
    # waits until each lease this takes is given back (`InterruptShield`).
    with InterruptShield():
        for asset in context.op.tags[STEP_ASSETS_TAG].split(","):
            with store.connect() as connection:
                partitions = partitions_attempted_in_run(connection, asset, context.run_id)
            for key in partitions:
                entry_id = quarantine_if_spent(store, settings, asset, key, holder=this_holder())
                if entry_id is not None:
                    context.log.warning("%s/%s is quarantined as entry %s", asset, key, entry_id)
