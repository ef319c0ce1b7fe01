"""A range of partitions from the shell, on a team's own code location.

The test writes a package outside the repository — daily events from CSV files and their
daily totals, a backfill downstream of the events partitioned alike, and a job over both —
and runs a range in a real process, on each way the docs name: `dagster job execute` with
Dagster's range tags under the default backfill policy, and `dagster asset materialize
--partition-range` under `single_run()`. Either way the range is one run, a poison day
among it is quarantined alone, and every good day's events and totals equal a reference
computed here from the CSV files. Under the default policy Dagster's CLI refuses
`--partition-range` (its rule, which the docs repeat). (The bundled location's range run
is in `test_isolation.py`.)
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
from pathlib import Path

import dagster as dg
import sqlalchemy as sa

from jobs_platform.store.schema import partitions, quarantine
from jobs_platform_tests.commands import DAGSTER, JOBS_PLATFORM, run_cli

MODULE = "rangeco.defs"
DAYS = ["2024-02-01", "2024-02-02", "2024-02-03", "2024-02-04"]
POISON = "2024-02-03"
GOOD_DAYS = [day for day in DAYS if day != POISON]
RANGE_TAGS = {
    "dagster/asset_partition_range_start": DAYS[0],
    "dagster/asset_partition_range_end": DAYS[-1],
}
SINGLE_RUN = 'POLICY = {"backfill_policy": dg.BackfillPolicy.single_run()}'

DEFS = '''\
import datetime as dt

import dagster as dg
import pandas as pd
import sqlalchemy as sa
from jobs_platform import PartitionInput, TerminalError, backfill_asset, platform_definitions

metadata = sa.MetaData()
range_events = sa.Table(
    "range_events",
    metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)
range_totals = sa.Table(
    "range_totals",
    metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("events", sa.BigInteger, nullable=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)
days = dg.DailyPartitionsDefinition(start_date="2024-01-01")
# The backfills' policy: none given (the default, multi_run(30)) unless the test sets one.
POLICY = {}


class Landing(dg.ConfigurableResource):
    root: str


def of_day(table: sa.Table, day: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(day)


@backfill_asset(table=range_events, partitions_def=days, partition_scope=of_day, **POLICY)
def events(source: PartitionInput, landing: Landing):
    """A day's events, from its CSV file."""
    path = f"{landing.root}/{source.partition_key}.csv"
    for chunk in pd.read_csv(path, chunksize=source.chunk_rows, dtype=str):
        try:
            chunk = chunk.astype({"event_id": "int64", "amount_cents": "int64"})
        except ValueError as exc:
            raise TerminalError(f"{path}: {exc}") from None
        yield chunk.assign(day=dt.date.fromisoformat(source.partition_key))


@backfill_asset(
    table=range_totals, partitions_def=days, partition_scope=of_day, deps=["events"], **POLICY
)
def totals(source: PartitionInput):
    """A day's count and sum of events, from `events`."""
    day = dt.date.fromisoformat(source.partition_key)
    query = sa.select(sa.func.count(), sa.func.sum(range_events.c.amount_cents)).where(
        range_events.c.day == day
    )
    with source.warehouse.connect() as connection:
        count, amount = connection.execute(query).one()
    yield pd.DataFrame({"day": [day], "events": [count], "amount_cents": [amount or 0]})


range_backfill = dg.define_asset_job("range_backfill", selection=[events, totals])

defs = dg.Definitions.merge(
    platform_definitions([events, totals]),
    dg.Definitions(
        jobs=[range_backfill],
        resources={"landing": Landing(root=dg.EnvVar("RANGECO_LANDING"))},
    ),
)
'''


def day_events(day: str) -> list[dict]:
    first_id = int(day.replace("-", "")) * 100
    return [{"event_id": first_id + n, "amount_cents": 50 + 7 * n} for n in range(12)]


def write_day(landing: Path, day: str, *, poison: bool = False) -> None:
    with (landing / f"{day}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["event_id", "amount_cents"])
        writer.writeheader()
        for index, row in enumerate(day_events(day)):
            writer.writerow({**row, "amount_cents": "lots"} if poison and index == 5 else row)


def reference(landing: Path, day: str) -> tuple[list[tuple], list[tuple]]:
    """(events rows, totals rows) of a day's file, read without the framework."""
    with (landing / f"{day}.csv").open(newline="") as handle:
        rows = [(int(r["event_id"]), int(r["amount_cents"])) for r in csv.DictReader(handle)]
    date = dt.date.fromisoformat(day)
    events = sorted((date, event_id, amount) for event_id, amount in rows)
    return events, [(date, len(rows), sum(amount for _, amount in rows))]


def write_location(tmp_path: Path, pg_url: str, policy: str | None = None) -> dict[str, str]:
    """The package `rangeco` (its `POLICY` line replaced by `policy`) with a week's input,
    and the environment that runs it."""
    package = tmp_path / "project" / "rangeco"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    defs = DEFS if policy is None else DEFS.replace("POLICY = {}", policy)
    assert policy is None or policy in defs
    (package / "defs.py").write_text(defs)
    landing = tmp_path / "landing"
    landing.mkdir()
    for day in DAYS:
        write_day(landing, day, poison=day == POISON)
    home = tmp_path / "dagster_home"
    home.mkdir()
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "RANGECO_LANDING": str(landing),
        "DAGSTER_HOME": str(home),
    }


def upgrade(env: dict[str, str]) -> None:
    upgraded = run_cli([JOBS_PLATFORM, "db", "upgrade", "-m", MODULE], env)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr


def assert_range_ran_in_one_run_without_the_poison_day(env: dict[str, str], pg_url: str):
    """Good days equal the reference; the poison day is quarantined alone, its totals never
    computed; the range was one run and Dagster shows the good days materialized."""
    landing = Path(env["RANGECO_LANDING"])
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    with engine.connect() as connection:
        for day in GOOD_DAYS:
            expected_events, expected_totals = reference(landing, day)
            date = dt.date.fromisoformat(day)
            got_events = connection.execute(
                sa.text(
                    "SELECT day, event_id, amount_cents FROM range_events WHERE day = :day "
                    "ORDER BY event_id"
                ),
                {"day": date},
            ).all()
            got_totals = connection.execute(
                sa.text("SELECT day, events, amount_cents FROM range_totals WHERE day = :day"),
                {"day": date},
            ).all()
            assert [tuple(row) for row in got_events] == expected_events, day
            assert [tuple(row) for row in got_totals] == expected_totals, day
        entries = connection.execute(sa.select(quarantine.c.asset, quarantine.c.partition)).all()
        poison_totals = connection.execute(
            sa.text("SELECT count(*) FROM range_totals WHERE day = :day"),
            {"day": dt.date.fromisoformat(POISON)},
        ).scalar_one()
        totals_state = connection.execute(
            sa.select(partitions.c.status).where(
                partitions.c.asset == "totals", partitions.c.partition == POISON
            )
        ).all()
    assert [tuple(entry) for entry in entries] == [("events", POISON)]
    assert poison_totals == 0 and totals_state == []  # blocked: never computed
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (run,) = instance.get_runs()  # the range in one run
        assert run.tags["dagster/asset_partition_range_start"] == DAYS[0]
        assert run.tags["dagster/asset_partition_range_end"] == DAYS[-1]
        for asset in ("events", "totals"):
            shown = instance.get_status_by_partition(
                dg.AssetKey(asset), DAYS, dg.DailyPartitionsDefinition(start_date="2024-01-01")
            )
            done = {
                day
                for day, status in (shown or {}).items()
                if status and status.value == "MATERIALIZED"
            }
            assert done == set(GOOD_DAYS), asset


def test_job_execute_over_a_range_under_the_default_policy_withholds_only_the_poison_days_totals(
    pg_url, tmp_path
):
    env = write_location(tmp_path, pg_url)
    upgrade(env)

    executed = run_cli(
        [
            DAGSTER, "job", "execute", "-m", MODULE, "-j", "range_backfill",
            "--tags", json.dumps(RANGE_TAGS),
        ],
        env,
    )  # fmt: skip

    # The run failed: a day was quarantined.
    assert executed.returncode == 1, executed.stdout[-3000:]
    assert "resulted in failure" in executed.stderr, executed.stderr[-3000:]
    assert_range_ran_in_one_run_without_the_poison_day(env, pg_url)


def test_asset_materialize_over_a_range_under_single_run_withholds_only_the_poison_days_totals(
    pg_url, tmp_path
):
    env = write_location(tmp_path, pg_url, SINGLE_RUN)
    upgrade(env)

    executed = run_cli(
        [
            DAGSTER, "asset", "materialize", "-m", MODULE, "--select", "events,totals",
            "--partition-range", f"{DAYS[0]}...{DAYS[-1]}",
        ],
        env,
    )  # fmt: skip

    # The run failed (a day was quarantined), not the CLI's backfill-policy check.
    assert executed.returncode == 1, executed.stdout[-3000:]
    assert "Materialization failed." in executed.stderr, executed.stderr[-3000:]
    assert_range_ran_in_one_run_without_the_poison_day(env, pg_url)


def test_dagster_refuses_a_partition_range_under_the_default_policy_before_any_run(
    pg_url, tmp_path
):
    """Dagster's rule, which the docs repeat: `--partition-range` needs `single_run()`."""
    env = write_location(tmp_path, pg_url)

    executed = run_cli(
        [
            DAGSTER, "asset", "materialize", "-m", MODULE, "--select", "events,totals",
            "--partition-range", f"{DAYS[0]}...{DAYS[-1]}",
        ],
        env,
    )  # fmt: skip

    assert executed.returncode == 1, executed.stdout[-3000:]
    assert (
        "Partition ranges with the CLI require all selected assets to have a "
        "BackfillPolicy.single_run() policy"
    ) in executed.stderr, executed.stderr[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert instance.get_runs() == []
