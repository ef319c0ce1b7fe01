"""`jobs-platform dead-letter requeue ASSET PARTITION | --group SIG | --asset A [--error-class
C] [--dry-run]`.

A cause fixed, its group requeued: the selection's entries are released and their
partitions launched as ranged runs through the Dagster instance's run queue, which a real
daemon serves; the other cause's entries stay as they were. A dry run changes nothing, a
selection that matches nothing says so (exit 1), and a launch that cannot be submitted
releases nothing (exit 2). One entry takes the same way, a selection of one.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import (
    DeadLetter,
    entries_by_id,
    open_entries,
)
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.errors import Classification
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    REQUEUE_ENTRIES_TAG,
    RUN_KEY_TAG,
    entry_ids_of,
    requeue_run_key,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import attempts, quarantine, requeues
from jobs_platform_tests.alert_fixtures import quarantine_entry
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.commands import ACME, JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import (
    expected_tables_from_landing,
    read_landing_lines,
    write_landing_lines,
)
from jobs_platform_tests.requeued_runs import daemon_running
from jobs_platform_tests.rows import declared_rows
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

MODULE = "orders_example.definitions"
# Two causes over a week: malformed JSON on five days (in two contiguous stretches), an
# unknown currency on two.
MALFORMED = ["2024-08-01", "2024-08-02", "2024-08-03", "2024-08-05", "2024-08-06"]
UNKNOWN_CURRENCY = ["2024-08-04", "2024-08-07"]
ORDERS_PER_DAY = 20
# A daemon, its code server, two ranged runs (a run worker and step processes each).
DAEMON_SECONDS = 300

# The daemon's dead-letter sensor requests a run per entry it has not shown yet (seven
# here) as it starts: they stay queued (limit 0), so that they do not take the CPU the
# requeue's runs, which the tests wait for, need (a run worker and a step process each,
# on two cores). Nothing the tests assert is about them: the dead-letter sensor and its
# runs have tests of their own (dead_letter/test_dead_letter_sensor.py, ui/).
QUEUED_INSTANCE = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 4
    dequeue_interval_seconds: 1
    tag_concurrency_limits:
      - key: dagster/sensor_name
        value: dead_letter_sensor
        limit: 0
telemetry:
  enabled: false
"""


@pytest.fixture
def env(pg_platform_env) -> dict[str, str]:
    """The platform's environment, its Dagster instance queueing runs for a daemon."""
    Path(pg_platform_env["DAGSTER_HOME"], "dagster.yaml").write_text(QUEUED_INSTANCE)
    return pg_platform_env


def requeue(env: dict[str, str], *args: str):
    return run_cli([JOBS_PLATFORM, "dead-letter", "requeue", "-m", MODULE, *args], env)


def requeue_in_this_process(*args: str) -> tuple[int, str, str]:
    """`jobs-platform dead-letter requeue -m MODULE ARGS…` through the CLI's main, in this
    process (whose environment is the test's): (exit status, stdout, stderr)."""
    done = jobs_platform_in_process(["dead-letter", "requeue", "-m", MODULE, *args])
    return done.returncode, done.stdout, done.stderr


def day(key: str) -> dt.date:
    return dt.date.fromisoformat(key)


def quarantine_two_causes(env: dict[str, str]) -> dict[str, str]:
    """Quarantine the week's bad days through one ranged run; each cause's signature."""
    landing = env["JOBS_PLATFORM_LANDING"]
    first, last = day(MALFORMED[0]), day(UNKNOWN_CURRENCY[-1])
    poisoned = [day(key) for key in MALFORMED]
    seed_orders(landing, first, last, orders_per_day=ORDERS_PER_DAY, poison_days=poisoned)
    for key in UNKNOWN_CURRENCY:
        lines = read_landing_lines(landing, key)
        lines[ORDERS_PER_DAY // 2]["currency"] = "JPY"
        write_landing_lines(landing, key, lines)
    from orders_example.definitions import defs

    dg.materialize(
        [orders, daily_revenue],
        instance=dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        tags={PARTITION_RANGE_START_TAG: MALFORMED[0], PARTITION_RANGE_END_TAG: "2024-08-07"},
        raise_on_error=False,
    )
    with engine_from(env).connect() as connection:
        entries = open_entries(connection)
    signatures = {
        cause: {entry.signature for entry in entries if entry.partition in days}
        for cause, days in (("malformed", MALFORMED), ("currency", UNKNOWN_CURRENCY))
    }
    assert sorted(entry.partition for entry in entries) == sorted(MALFORMED + UNKNOWN_CURRENCY)
    assert all(len(found) == 1 for found in signatures.values()), signatures
    return {cause: found.pop() for cause, found in signatures.items()}


def requeue_runs_in(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    runs = instance.get_runs(dg.RunsFilter(tags={REQUEUE_ASSET_TAG: "orders"}))
    return sorted(runs, key=lambda run: run.tags.get(PARTITION_RANGE_START_TAG, ""))


def span(run: dg.DagsterRun) -> tuple[str, str]:
    if PARTITION_TAG in run.tags:
        return run.tags[PARTITION_TAG], run.tags[PARTITION_TAG]
    return run.tags[PARTITION_RANGE_START_TAG], run.tags[PARTITION_RANGE_END_TAG]


def attempts_per_partition(engine: sa.Engine, partitions: list[str]) -> dict[str, int]:
    with engine.connect() as connection:
        return dict(
            connection.execute(
                sa.select(attempts.c.partition, sa.func.count())
                .where(attempts.c.asset == "orders", attempts.c.partition.in_(partitions))
                .group_by(attempts.c.partition)
            ).all()
        )


@pytest.mark.slow
def test_requeuing_a_fixed_causes_group_completes_its_partitions_in_ranged_runs_through_the_queue(
    env, tmp_path
):
    signatures = quarantine_two_causes(env)
    engine = engine_from(env)
    landing = env["JOBS_PLATFORM_LANDING"]
    for key in MALFORMED:  # the malformed files are fixed; the currency ones are not
        seed_orders(landing, day(key), day(key), orders_per_day=ORDERS_PER_DAY)
    untouched_attempts = attempts_per_partition(engine, UNKNOWN_CURRENCY)

    finished = requeue(env, "--group", signatures["malformed"])

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "queued 2 runs" in finished.stdout
    with dg.DagsterInstance.get() as instance:
        queued = requeue_runs_in(instance)
    # Returned once queued: nothing runs them until the daemon does.
    assert [run.status for run in queued] == [dg.DagsterRunStatus.QUEUED] * 2
    assert [span(run) for run in queued] == [
        ("2024-08-01", "2024-08-03"),
        ("2024-08-05", "2024-08-06"),
    ]

    with daemon_running(env, tmp_path, MODULE), dg.DagsterInstance.get() as instance:

        def all_succeeded() -> list[dg.DagsterRun] | None:
            runs = requeue_runs_in(instance)
            done = all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
            return runs if done else None

        runs = wait_for(
            all_succeeded,
            timeout=DAEMON_SECONDS,
            interval=1,
            what=lambda: f"the requeue runs to succeed: {requeue_runs_in(instance)}",
        )

    # Fewer runs than entries, each over a contiguous range, with the backfill it feeds.
    assert len(runs) == 2 < len(MALFORMED)
    assert [span(run) for run in runs] == [
        ("2024-08-01", "2024-08-03"),
        ("2024-08-05", "2024-08-06"),
    ]
    assert all(run.asset_selection == {orders.key, daily_revenue.key} for run in runs)
    assert all(run.tags[RUN_KEY_TAG].startswith("requeue-") for run in runs)
    expected_orders, expected_revenue = [], []
    for key in MALFORMED:
        orders_rows, revenue_rows = expected_tables_from_landing(landing, key)
        expected_orders += orders_rows
        expected_revenue += revenue_rows
    assert declared_rows(engine, orders_table) == sorted(expected_orders)
    assert declared_rows(engine, daily_revenue_table) == sorted(expected_revenue)
    with engine.connect() as connection:
        statuses = dict(
            connection.execute(sa.select(quarantine.c.partition, quarantine.c.status)).all()
        )
        log = connection.execute(sa.select(requeues.c.partition, requeues.c.by)).all()
    assert statuses == {
        **dict.fromkeys(MALFORMED, "resolved"),
        **dict.fromkeys(UNKNOWN_CURRENCY, "quarantined"),
    }
    assert sorted(log) == [(key, "cli") for key in MALFORMED]
    shown = run_cli([JOBS_PLATFORM, "dead-letter", "show", "orders", MALFORMED[0]], env)
    assert "requeued by cli (requested)" in shown.stdout
    # The other cause's entries: no new attempt.
    assert attempts_per_partition(engine, UNKNOWN_CURRENCY) == untouched_attempts


def quarantined_days(env, keys: list[str], error_class=Classification.TERMINAL) -> list[int]:
    engine = engine_from(env)
    return [
        quarantine_entry(
            engine,
            partition=key,
            failures=1,
            error_class=error_class,
            message="unknown currency 'JPY' on line 7",
        )
        for key in keys
    ]


def dead_letter_state(env) -> tuple[list, list]:
    with engine_from(env).connect() as connection:
        entries = connection.execute(sa.select(quarantine).order_by(quarantine.c.id)).all()
        log = connection.execute(sa.select(requeues)).all()
    return [tuple(row) for row in entries], [tuple(row) for row in log]


def all_runs(env) -> list[str]:
    with dg.DagsterInstance.get() as instance:
        return sorted(run.run_id for run in instance.get_runs())


def signature_of(env, entry_id: int) -> str:
    with engine_from(env).connect() as connection:
        return connection.execute(
            sa.select(quarantine.c.signature).where(quarantine.c.id == entry_id)
        ).scalar_one()


def test_dry_run_prints_the_entries_and_ranged_runs_and_changes_nothing(env):
    ids = quarantined_days(env, ["2024-08-01", "2024-08-02", "2024-08-03", "2024-08-09"])
    before = dead_letter_state(env), all_runs(env)

    finished = requeue(env, "--group", signature_of(env, ids[0]), "--dry-run")

    assert finished.returncode == 0, finished.stderr
    assert "would release 4 entries" in finished.stdout
    assert "in 2 ranged runs" in finished.stdout
    assert "orders 2024-08-01..2024-08-03: 3 partitions (with daily_revenue)" in finished.stdout
    assert "orders 2024-08-09: 1 partition (with daily_revenue)" in finished.stdout
    assert "nothing was released or launched" in finished.stdout
    assert (dead_letter_state(env), all_runs(env)) == before


def test_requeue_of_an_assets_terminal_entries_queues_their_runs_and_leaves_the_others(env):
    terminal = quarantined_days(env, ["2024-08-01", "2024-08-02"])
    [retryable] = quarantined_days(env, ["2024-08-03"], Classification.RETRYABLE)

    finished = requeue(env, "--asset", "orders", "--error-class", "terminal")

    assert finished.returncode == 0, finished.stdout + finished.stderr
    with dg.DagsterInstance.get() as instance:
        [run] = requeue_runs_in(instance)
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert span(run) == ("2024-08-01", "2024-08-02")
    assert entry_ids_of(run.tags[REQUEUE_ENTRIES_TAG]) == terminal
    assert run.run_id in finished.stdout
    with engine_from(env).connect() as connection:
        rows = {
            row.id: row
            for row in connection.execute(sa.select(quarantine).order_by(quarantine.c.id))
        }
    assert [rows[i].status for i in terminal] == ["requeued", "requeued"]
    # Marked launched: the requeue sensor leaves them to the queued run.
    assert all(rows[i].requeue_launched_at is not None for i in terminal)
    assert rows[retryable].status == "quarantined"


def test_the_requeue_sensor_finds_the_queued_ranged_run_of_a_selection_and_launches_no_other(
    env,
):
    terminal = quarantined_days(env, ["2024-08-01", "2024-08-02"])
    assert requeue(env, "--asset", "orders").returncode == 0
    engine = engine_from(env)
    with engine.begin() as connection:
        # Past the grace the sensor gives a launch under way: it asks Dagster for the run.
        long_ago = DATABASE_CLOCK.now(connection) - dt.timedelta(hours=1)
        DeadLetter(ManualClock(long_ago)).mark_requeue_launched(connection, terminal)
    from orders_example.definitions import defs

    with dg.DagsterInstance.get() as instance:
        context = dg.build_sensor_context(
            instance=instance, definitions=defs, resources=dict(defs.resources)
        )
        result = requeue_sensor.evaluate_tick(context)

    assert result.run_requests == []
    with engine.connect() as connection:
        marked = [entry.requeue_launched_at for entry in entries_by_id(connection, terminal)]
    assert all(at > long_ago for at in marked)  # found, so marked again


def test_a_selection_that_matches_nothing_says_so_and_exits_1(env):
    [entry] = quarantined_days(env, ["2024-08-01"])
    before = dead_letter_state(env)

    unknown = requeue(env, "--group", "000000000000")
    # The location acme serves no `orders`: a selection acts on its own backfills only.
    elsewhere = run_cli(
        [JOBS_PLATFORM, "dead-letter", "requeue", "-m", ACME, "--group", signature_of(env, entry)],
        env,
    )

    assert unknown.returncode == 1
    assert "matches group 000000000000; nothing to requeue" in unknown.stderr
    assert elsewhere.returncode == 1
    assert f"no open entry of code location {ACME} matches" in elsewhere.stderr
    assert dead_letter_state(env) == before


def test_one_entry_is_a_selection_of_one_queued_under_its_own_run_key(env):
    [entry] = quarantined_days(env, ["2024-08-01"])

    finished = requeue(env, "orders", "2024-08-01")

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"released orders/2024-08-01 (entry {entry}); its attempt count starts over" in (
        finished.stdout
    )
    assert "queued 1 run in the Dagster instance's run queue" in finished.stdout
    with dg.DagsterInstance.get() as instance:
        [run] = requeue_runs_in(instance)
    # Returned once queued, as a selection does: the daemon runs it.
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert (run.tags[RUN_KEY_TAG], run.tags[PARTITION_TAG]) == (
        requeue_run_key(entry),
        "2024-08-01",
    )
    assert run.asset_selection == {orders.key, daily_revenue.key}
    assert run.run_id in finished.stdout
    with engine_from(env).connect() as connection:
        [row] = entries_by_id(connection, [entry])
    assert row.status == "requeued" and row.requeue_launched_at is not None


@pytest.mark.parametrize("form", ["one entry", "group"])
def test_a_launch_the_instance_refuses_releases_nothing(env, tmp_path, form):
    [entry] = quarantined_days(env, ["2024-08-01"])
    selection = (
        ["orders", "2024-08-01"] if form == "one entry" else ["--group", signature_of(env, entry)]
    )
    before = dead_letter_state(env)
    # An instance whose run storage cannot be opened (its folder would be under a file):
    # no run can be created or queued. The CLI meets it where it meets an unreachable
    # PostgreSQL storage, opening the instance, and fails the same way; this one fails at
    # once, where PostgreSQL's fails after Dagster's ~12 s of connection retries.
    not_a_folder = tmp_path / "not_a_folder"
    not_a_folder.write_text("")
    unusable = tmp_path / "unusable_home"
    unusable.mkdir()
    (unusable / "dagster.yaml").write_text(
        f"storage:\n  sqlite:\n    base_dir: {not_a_folder / 'storage'}\n"
        "telemetry:\n  enabled: false\n"
    )

    finished = requeue({**env, "DAGSTER_HOME": str(unusable)}, *selection)

    assert finished.returncode == 2
    assert "the launch cannot be submitted" in finished.stderr
    assert "nothing was released" in finished.stderr
    assert dead_letter_state(env) == before


def test_requeue_takes_one_form_of_selection(env):
    wrong = [
        ("orders",),  # a partition is missing
        ("orders", "2024-08-01", "--group", "abc"),
        ("--error-class", "terminal"),
        ("--group", "abc", "--asset", "orders"),
        (),
    ]
    for arguments in wrong:
        finished = requeue(env, *arguments)
        assert finished.returncode == 2, arguments
        assert "usage:" in finished.stderr, arguments
    assert json.loads(run_cli([JOBS_PLATFORM, "dead-letter", "list", "--json"], env).stdout) == []


@pytest.mark.slow
def test_entries_released_without_a_launch_are_run_by_the_requeue_sensor_in_ranged_runs(
    env, tmp_path
):
    signatures = quarantine_two_causes(env)
    landing = env["JOBS_PLATFORM_LANDING"]
    for key in MALFORMED:
        seed_orders(landing, day(key), day(key), orders_per_day=ORDERS_PER_DAY)

    # Released as the UI job and the redrive release: the sensor is left to launch them.
    # The CLI's own code, in this process: what is tested here is the daemon's sensor (the
    # command's process is tested by the other requeues of this file).
    code, out, err = requeue_in_this_process("--group", signatures["malformed"], "--no-launch")
    assert code == 0, out + err
    assert "the requeue sensor will launch them" in out
    with dg.DagsterInstance.get() as instance:
        assert requeue_runs_in(instance) == []
    with daemon_running(env, tmp_path, MODULE), dg.DagsterInstance.get() as instance:

        def all_succeeded() -> list[dg.DagsterRun] | None:
            runs = requeue_runs_in(instance)
            done = len(runs) == 2 and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
            return runs if done else None

        runs = wait_for(
            all_succeeded,
            timeout=DAEMON_SECONDS,
            interval=1,
            what=lambda: f"the sensor's requeue runs to succeed: {requeue_runs_in(instance)}",
        )

    assert [span(run) for run in runs] == [
        ("2024-08-01", "2024-08-03"),
        ("2024-08-05", "2024-08-06"),
    ]
    assert {run.tags["dagster/sensor_name"] for run in runs} == {"requeue_sensor"}
    expected_orders = []
    for key in MALFORMED:
        expected_orders += expected_tables_from_landing(landing, key)[0]
    assert declared_rows(engine_from(env), orders_table) == sorted(expected_orders)
