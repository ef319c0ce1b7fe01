"""`dagster asset materialize --partition-range` on a team's own code location.

The test writes a package outside the repository — daily events from CSV files and their
daily totals, a backfill downstream of the events partitioned alike, both under the
default backfill policy — and runs the range with the CLI in a real process: the range is
one run, a poison day among it is quarantined alone, and every good day's events and
totals equal a reference computed here from the CSV files. (The bundled location's run of
the same command is in `test_isolation.py`.)
"""

from __future__ import annotations

import csv
import datetime as dt
import os
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.store.schema import partitions, quarantine
from jobs_platform_tests.commands import DAGSTER, JOBS_PLATFORM, run_cli

MODULE = "rangeco.defs"
DAYS = ["2024-02-01", "2024-02-02", "2024-02-03", "2024-02-04"]
POISON = "2024-02-03"
GOOD_DAYS = [day for day in DAYS if day != POISON]

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


class Landing(dg.ConfigurableResource):
    root: str


def of_day(table: sa.Table, day: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(day)


@backfill_asset(table=range_events, partitions_def=days, partition_scope=of_day)
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
    table=range_totals, partitions_def=days, partition_scope=of_day, deps=["events"]
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


defs = dg.Definitions.merge(
    platform_definitions([events, totals]),
    dg.Definitions(resources={"landing": Landing(root=dg.EnvVar("RANGECO_LANDING"))}),
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


@pytest.fixture
def rangeco(pg_url, tmp_path) -> dict[str, str]:
    package = tmp_path / "project" / "rangeco"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(DEFS)
    landing = tmp_path / "landing"
    landing.mkdir()
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


def test_a_partition_range_on_a_user_location_withholds_only_the_poison_days_totals(
    rangeco, pg_url
):
    env = rangeco
    landing = Path(env["RANGECO_LANDING"])
    for day in DAYS:
        write_day(landing, day, poison=day == POISON)
    upgraded = run_cli([JOBS_PLATFORM, "db", "upgrade", "-m", MODULE], env)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr

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
