"""What asset checks on a backfill show after a ranged run with a poison partition.

Dagster cannot fail one partition of a step (dagster-io/dagster#17836): a ranged run with
a poison day fails the backfill's step, and Dagster skips every check on it in that run,
shown "Execution failed" in the UI. The framework's `no_quarantined_partitions` is
therefore evaluated by `platform_health_every_10_minutes`, which runs by default; a
user's own check runs in the next run of the backfill that succeeds, e.g. the requeue's.
docs/dead-letter.md ("Your own asset checks on a backfill") says what these tests show.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg
import sqlalchemy as sa

from jobs_platform import JobsPlatformResource
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import declared_rows
from orders_example.orders.assets import daily_partitions, revenue_of_day
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

FIRST, POISON, LAST = dt.date(2024, 9, 1), dt.date(2024, 9, 2), dt.date(2024, 9, 3)
DAYS = [FIRST.isoformat(), POISON.isoformat(), LAST.isoformat()]
RANGE_TAGS = {PARTITION_RANGE_START_TAG: DAYS[0], PARTITION_RANGE_END_TAG: DAYS[-1]}


@dg.asset_check(asset="orders", description="No order has a non-positive amount (a user's).")
def orders_amounts_are_positive(jobs_platform: JobsPlatformResource) -> dg.AssetCheckResult:
    with jobs_platform.ready_warehouse().connect() as connection:
        bad = connection.execute(
            sa.select(sa.func.count()).where(orders_table.c.amount_cents <= 0)
        ).scalar_one()
    return dg.AssetCheckResult(passed=bad == 0, metadata={"non_positive": bad})


@dg.asset_check(asset="orders", blocking=True, description="Always fails (a user's).")
def orders_blocking_check() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=False)


def chain() -> dg.AssetsDefinition:
    """The bundled `orders` and `daily_revenue`: one multi-asset, one step."""
    from orders_example.definitions import defs

    return defs.get_assets_def(dg.AssetKey("orders"))


def run(checks: list[dg.AssetChecksDefinition], **kwargs) -> dg.ExecuteInProcessResult:
    from orders_example.definitions import defs

    return dg.materialize(
        [chain(), *checks],
        instance=dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        raise_on_error=False,
        **kwargs,
    )


def framework_checks() -> list[dg.AssetChecksDefinition]:
    """The `no_quarantined_partitions` checks of `orders` and `daily_revenue`."""
    from orders_example.definitions import defs

    wanted = {dg.AssetKey("orders"), dg.AssetKey("daily_revenue")}
    return [
        checks
        for checks in defs.asset_checks
        if {key.asset_key for key in checks.check_keys} <= wanted
    ]


def shown_status(check: dg.AssetCheckKey) -> str:
    """The check's latest status as the UI resolves it.

    As Dagster 1.13's `AssetCheckExecutionRecord.resolve_status`: a check planned in a run
    that ended without evaluating it is EXECUTION_FAILED when the run failed, SKIPPED else.
    """
    instance = dg.DagsterInstance.get()
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check]
    if record.status.value != "PLANNED":
        return record.status.value
    finished = instance.get_run_by_id(record.run_id)
    return "EXECUTION_FAILED" if finished.status == dg.DagsterRunStatus.FAILURE else "SKIPPED"


def seed(env, *, poison: bool = True) -> None:
    seed_orders(
        env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=10,
        poison_days=[POISON] if poison else [],
    )  # fmt: skip


def test_the_health_schedule_that_evaluates_the_quarantine_checks_runs_by_default():
    from orders_example.definitions import defs

    schedule = defs.resolve_schedule_def("platform_health_every_10_minutes")

    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_the_health_schedule_turns_a_skipped_quarantine_check_into_a_failed_one_listing_it(
    pg_platform_env,
):
    from orders_example.definitions import defs

    seed(pg_platform_env)
    check = dg.AssetCheckKey(dg.AssetKey("orders"), "no_quarantined_partitions")
    # A backfill from the asset graph plans the assets' checks in each of its runs.
    assert not run(framework_checks(), tags=RANGE_TAGS).success
    assert shown_status(check) == "EXECUTION_FAILED"  # what the UI showed until a tick

    schedule = defs.resolve_schedule_def("platform_health_every_10_minutes")
    ticked = defs.resolve_job_def(schedule.job_name).execute_in_process(
        instance=dg.DagsterInstance.get(), raise_on_error=False
    )

    evaluation = next(e for e in ticked.get_asset_check_evaluations() if e.asset_check_key == check)
    assert shown_status(check) == "FAILED"
    assert not evaluation.passed
    assert evaluation.metadata["quarantined_partitions"].value == POISON.isoformat()
    assert evaluation.description.startswith(f"1 quarantined partition(s): {POISON.isoformat()}")


def test_a_users_check_is_skipped_in_a_ranged_run_with_a_poison_day_and_runs_in_the_requeue(
    pg_platform_env,
):
    from orders_example.definitions import defs

    seed(pg_platform_env)
    check = orders_amounts_are_positive.check_key

    ranged = run([orders_amounts_are_positive], tags=RANGE_TAGS)

    assert not ranged.success
    assert ranged.get_asset_check_evaluations() == []  # not for the good days either
    # Dagster does not start a step whose upstream step failed (it "abandons" it).
    started = {
        e.step_key for e in ranged.all_events if e.event_type == dg.DagsterEventType.STEP_START
    }
    assert started == {chain().node_def.name}
    assert orders_amounts_are_positive.node_def.name not in started
    assert shown_status(check) == "EXECUTION_FAILED"
    instance = dg.DagsterInstance.get()
    for asset in ("orders", "daily_revenue"):
        shown = instance.get_status_by_partition(dg.AssetKey(asset), DAYS, daily_partitions) or {}
        done = [day for day in DAYS if shown.get(day) == dg.AssetPartitionStatus.MATERIALIZED]
        assert done == [FIRST.isoformat(), LAST.isoformat()], asset

    # The input is fixed and the day requeued: the requeue's run selects the backfills,
    # so their checks, and evaluates the check once that run's step succeeds.
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], POISON, POISON, orders_per_day=10)
    config = {"ops": {"requeue_partition": {"config": {"asset": "orders", "partition": DAYS[1]}}}}
    defs.resolve_job_def("requeue_dead_letter").execute_in_process(
        run_config=config, instance=dg.DagsterInstance.get()
    )
    requeued = run([orders_amounts_are_positive], partition_key=POISON.isoformat())

    assert requeued.success
    (evaluation,) = requeued.get_asset_check_evaluations()
    assert evaluation.asset_check_key == check and evaluation.passed
    assert shown_status(check) == "SUCCEEDED"


def test_a_blocking_check_on_a_backfill_does_not_hold_back_the_backfills_of_its_step(
    pg_platform_env,
):
    seed(pg_platform_env, poison=False)

    ranged = run([orders_blocking_check], tags=RANGE_TAGS)

    assert not ranged.success  # the failed blocking check fails the run
    (evaluation,) = ranged.get_asset_check_evaluations()  # once for the range, not per day
    assert not evaluation.passed
    # daily_revenue is computed in the step that computes orders, before any check on it.
    engine = engine_from(pg_platform_env)
    for day in DAYS:
        assert declared_rows(engine, daily_revenue_table, revenue_of_day(daily_revenue_table, day))
