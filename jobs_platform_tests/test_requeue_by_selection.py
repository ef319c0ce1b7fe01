"""`jobs-platform dead-letter requeue ASSET PARTITION | --group SIG | --asset A [--error-class
C] [--dry-run] [--wait]`.

A cause fixed, its group requeued: the selection's entries are released, and the code
location's requeue sensor, which a real daemon evaluates, launches their partitions as
ranged runs; `--wait` follows them to their end. The other cause's entries stay as they
were. A dry run changes nothing, a selection that matches nothing says so (exit 1), and a
Dagster instance that cannot be read releases nothing (exit 2). One entry takes the same
way, a selection of one.
"""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import (
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
from jobs_platform.store.schema import attempts, quarantine, requeues
from jobs_platform_tests.alert_fixtures import quarantine_entry
from jobs_platform_tests.commands import ACME, JOBS_PLATFORM, run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import (
    expected_tables_from_landing,
    read_landing_lines,
    write_landing_lines,
)
from jobs_platform_tests.requeued_runs import daemon_running, queueing_for_a_daemon
from jobs_platform_tests.rows import declared_rows
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

MODULE = "orders_example.definitions"
# Two causes over a week: malformed JSON on five days (in two contiguous stretches), an
# unknown currency on two.
MALFORMED = ["2024-08-01", "2024-08-02", "2024-08-03", "2024-08-05", "2024-08-06"]
UNKNOWN_CURRENCY = ["2024-08-04", "2024-08-07"]
ORDERS_PER_DAY = 20


@pytest.fixture
def env(pg_platform_env) -> dict[str, str]:
    """The platform's environment, its Dagster instance queueing runs for a daemon."""
    queueing_for_a_daemon(pg_platform_env["DAGSTER_HOME"])
    return pg_platform_env


def requeue(env: dict[str, str], *args: str):
    return run_cli([JOBS_PLATFORM, "dead-letter", "requeue", "-m", MODULE, *args], env)


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
def test_requeuing_a_fixed_causes_group_waits_for_its_ranged_runs_launched_by_the_sensor(
    env, tmp_path
):
    # The person requeues, not the redrive (which would release the fixed days itself).
    env = {**env, "JOBS_PLATFORM_MAX_REDRIVES": "0"}
    signatures = quarantine_two_causes(env)
    engine = engine_from(env)
    landing = env["JOBS_PLATFORM_LANDING"]
    for key in MALFORMED:  # the malformed files are fixed; the currency ones are not
        seed_orders(landing, day(key), day(key), orders_per_day=ORDERS_PER_DAY)
    untouched_attempts = attempts_per_partition(engine, UNKNOWN_CURRENCY)

    with daemon_running(env, tmp_path, MODULE, sensor_seconds={"requeue_sensor": 1}):
        finished = requeue(env, "--group", signatures["malformed"], "--wait")

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "released 5 entries:" in finished.stdout
    assert "waiting for the requeue sensor's runs" in finished.stdout
    assert "2 runs succeeded" in finished.stdout
    with dg.DagsterInstance.get() as instance:
        runs = requeue_runs_in(instance)
    # Fewer runs than entries, each over a contiguous range, with the backfill it feeds,
    # launched by the sensor; the command followed each to its end.
    assert len(runs) == 2 < len(MALFORMED)
    assert [span(run) for run in runs] == [
        ("2024-08-01", "2024-08-03"),
        ("2024-08-05", "2024-08-06"),
    ]
    assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    assert {run.tags["dagster/sensor_name"] for run in runs} == {"requeue_sensor"}
    assert all(run.asset_selection == {orders.key, daily_revenue.key} for run in runs)
    assert all(f"{run.tags[RUN_KEY_TAG]}: succeeded" in finished.stdout for run in runs)
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
    assert "in 2 runs" in finished.stdout
    assert "orders 2024-08-01..2024-08-03: 3 partitions (with daily_revenue)" in finished.stdout
    assert "orders 2024-08-09: 1 partition (with daily_revenue)" in finished.stdout
    assert "nothing was released or launched" in finished.stdout
    assert (dead_letter_state(env), all_runs(env)) == before


def sensor_requests(instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    """The run requests of one tick of the location's requeue sensor."""
    from orders_example.definitions import defs

    context = dg.build_sensor_context(
        instance=instance, definitions=defs, resources=dict(defs.resources)
    )
    return list(requeue_sensor.evaluate_tick(context).run_requests or [])


def test_requeue_of_an_assets_terminal_entries_releases_them_for_the_sensor_to_launch(env):
    terminal = quarantined_days(env, ["2024-08-01", "2024-08-02"])
    [retryable] = quarantined_days(env, ["2024-08-03"], Classification.RETRYABLE)

    finished = requeue(env, "--asset", "orders", "--error-class", "terminal")

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "released 2 entries:" in finished.stdout
    assert "the code location's requeue sensor launches its run" in finished.stdout
    # No daemon beats on this instance: nothing launches the run until one does.
    assert "warning: no dagster-daemon serves the Dagster instance" in finished.stderr
    assert "add --wait" in finished.stderr
    with engine_from(env).connect() as connection:
        rows = {row.id: row for row in entries_by_id(connection, [*terminal, retryable])}
    assert [rows[i].status for i in terminal] == ["requeued", "requeued"]
    assert rows[retryable].status == "quarantined"
    with dg.DagsterInstance.get() as instance:
        assert requeue_runs_in(instance) == []  # the command creates no run
        [request] = sensor_requests(instance)
    assert (request.tags[PARTITION_RANGE_START_TAG], request.tags[PARTITION_RANGE_END_TAG]) == (
        "2024-08-01",
        "2024-08-02",
    )
    assert entry_ids_of(request.tags[REQUEUE_ENTRIES_TAG]) == terminal
    assert request.run_key in finished.stdout


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


def test_one_entry_is_a_selection_of_one_launched_under_its_own_run_key(env):
    [entry] = quarantined_days(env, ["2024-08-01"])

    finished = requeue(env, "orders", "2024-08-01")

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"released orders/2024-08-01 (entry {entry}); its attempt count starts over" in (
        finished.stdout
    )
    assert "the code location's requeue sensor launches its run" in finished.stdout
    with dg.DagsterInstance.get() as instance:
        assert requeue_runs_in(instance) == []
        [request] = sensor_requests(instance)
    assert (request.run_key, request.partition_key) == (requeue_run_key(entry), "2024-08-01")
    assert request.asset_selection == [orders.key, daily_revenue.key]
    assert request.run_key in finished.stdout
    with engine_from(env).connect() as connection:
        [row] = entries_by_id(connection, [entry])
    assert row.status == "requeued"


@pytest.mark.parametrize("form", ["one entry", "group"])
def test_a_dagster_instance_that_cannot_be_read_releases_nothing(env, tmp_path, form):
    [entry] = quarantined_days(env, ["2024-08-01"])
    selection = (
        ["orders", "2024-08-01"] if form == "one entry" else ["--group", signature_of(env, entry)]
    )
    before = dead_letter_state(env)
    # An instance whose run storage cannot be opened (its folder would be under a file):
    # its runs and daemons cannot be read. The CLI meets it where it meets an unreachable
    # PostgreSQL storage, and fails the same way; this one fails at once, where
    # PostgreSQL's fails after Dagster's ~12 s of connection retries.
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
    assert "cannot read the Dagster instance" in finished.stderr
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
