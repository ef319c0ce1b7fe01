"""The change gate end to end: a user's own code location in real processes, on PostgreSQL.

The test writes a package of its own (`ledger_shop/defs.py`, importing only the public
`jobs_platform`) into a temporary folder and drives it with `jobs-platform … -m` and
`dagster asset materialize`: a day loaded, then read again by a reader whose join fans
out, under `ChangeContract(max_updated_fraction=0.02)`; the table must stay byte for byte
as it was, the day quarantined with the diff, and `accept-change` publish that diff once.
A SIGKILL mid-stage must resume and publish exactly once.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import stored_materialization_metadata

BIN = Path(sys.executable).parent
MODULE = "ledger_shop.defs"
ASSET = "ledger_days"
DAY, NEXT_DAY = "2024-01-04", "2024-01-05"
ROWS, CHUNK_ROWS = 1_000, 100

CODE_LOCATION = '''
"""A team's ledger, loaded day by day and gated: a day may change 2 % of its rows at most."""

import datetime as dt
import os
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import ChangeContract, PartitionInput, backfill_asset, platform_definitions

metadata = sa.MetaData()
ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("day", sa.Date, nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),
)


def rows_of_day(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(partition)


@backfill_asset(
    table=ledger,
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
    partition_scope=rows_of_day,
    expect=ChangeContract(max_updated_fraction=0.02, max_swept_fraction=0.0),
)
def ledger_days(source: PartitionInput):
    """The ledger's lines of one day, from the landing folder's CSV."""
    path = Path(os.environ["LEDGER_LANDING"]) / f"{source.partition_key}.csv"
    day = dt.date.fromisoformat(source.partition_key)
    for chunk in pd.read_csv(path, chunksize=source.chunk_rows):
        yield chunk.assign(day=day)


defs = platform_definitions([ledger_days])
'''


@pytest.fixture
def shop(pg_url, tmp_path) -> dict[str, str]:
    package = tmp_path / "project" / "ledger_shop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(CODE_LOCATION)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (tmp_path / "landing").mkdir()
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "LEDGER_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(home),
        "JOBS_PLATFORM_LEASE_SECONDS": "10",
        "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.2",
    }


def write_day(env, day: str, amounts: list[int], first_id: int = 1) -> None:
    lines = ["id,amount", *(f"{first_id + n},{a}" for n, a in enumerate(amounts))]
    (Path(env["LEDGER_LANDING"]) / f"{day}.csv").write_text("\n".join(lines) + "\n")


def amounts() -> list[int]:
    return [10 * (n + 1) for n in range(ROWS)]


def fanned_out() -> list[int]:
    """A join that fans out: two amounts of every five doubled (40 % of the day)."""
    return [a * 2 if n % 5 < 2 else a for n, a in enumerate(amounts())]


def jobs_platform(env, *args: str):
    return run_cli([str(BIN / "jobs-platform"), *args], env)


def materialize(env, day: str, **extra: str):
    config = {"ops": {ASSET: {"config": {"chunk_rows": CHUNK_ROWS}}}}
    return run_cli(
        [
            str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", ASSET,
            "--partition", day, "--config-json", json.dumps(config),
        ],
        {**env, **extra},
    )  # fmt: skip


def ok(completed) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def dump(url: str) -> str:
    """The whole table as PostgreSQL prints it, ordered: compared byte for byte."""
    with sa.create_engine(url).connect() as connection:
        rows = connection.execute(sa.text("SELECT ledger::text FROM ledger ORDER BY id"))
        return "\n".join(rows.scalars())


def gate_stages(url: str) -> list[str]:
    with sa.create_engine(url).connect() as connection:
        return [n for n in sa.inspect(connection).get_table_names() if "_gate_" in n]


@pytest.mark.slow
def test_a_fan_out_is_refused_whole_and_accepting_it_publishes_that_diff_once(shop, pg_url):
    env = shop
    ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    write_day(env, DAY, amounts())
    ok(materialize(env, DAY))
    before = dump(pg_url)
    assert before.count("\n") == ROWS - 1

    write_day(env, DAY, fanned_out())
    assert materialize(env, DAY).returncode == 1

    assert dump(pg_url) == before
    assert gate_stages(pg_url) == []
    shown = json.loads(
        ok(jobs_platform(env, "dead-letter", "show", "-m", MODULE, ASSET, DAY, "--json"))
    )
    assert shown["quarantined"] and shown["entry"]["error_class"] == "terminal"
    assert "more than max_updated_fraction=0.02" in shown["entry"]["last_error"]
    diff = shown["change"]["diff"]
    assert (diff["inserted"], diff["updated"], diff["unchanged"], diff["swept"]) == (0, 400, 600, 0)
    assert diff["samples"]["updated"][:3] == [{"id": 1}, {"id": 2}, {"id": 6}]
    printed = ok(jobs_platform(env, "dead-letter", "show", "-m", MODULE, ASSET, DAY))
    assert "updated 400" in printed and "accept-change" in printed

    accepted = jobs_platform(
        env, "dead-letter", "accept-change", "-m", MODULE, ASSET, DAY, "--wait"
    )
    ok(accepted)

    published = dump(pg_url)
    assert published != before and published.count("\n") == ROWS - 1
    assert "(2,2024-01-04,40)" in published  # id 2: its amount, doubled
    shown = json.loads(
        ok(jobs_platform(env, "dead-letter", "show", "-m", MODULE, ASSET, DAY, "--json"))
    )
    assert shown["status"] == "done"
    assert shown["change"]["accepted_by"].startswith("cli:")
    assert shown["change"]["published_at"] is not None

    # Spent: the same day changed back is a change beyond the contract again.
    write_day(env, DAY, amounts())
    assert materialize(env, DAY).returncode == 1
    assert dump(pg_url) == published


@pytest.mark.slow
def test_a_sigkill_mid_stage_resumes_and_publishes_exactly_once(shop, pg_url):
    env = shop
    ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    write_day(env, NEXT_DAY, amounts(), first_id=5_001)

    # The step process is SIGKILLed right after chunk 3 was staged; its retry resumes.
    ok(materialize(env, NEXT_DAY, JOBS_PLATFORM_FAILPOINTS=f"after_commit@{ASSET}#3=crash*1"))

    history = [
        (r.outcome, r.error_class) for r in attempts_of(sa.create_engine(pg_url), ASSET, NEXT_DAY)
    ]
    assert history == [("failed", "crash"), ("succeeded", None)], history
    with sa.create_engine(pg_url).connect() as connection:
        stored = connection.execute(sa.text("SELECT id, amount FROM ledger ORDER BY id")).all()
    assert stored == [(5_001 + n, a) for n, a in enumerate(amounts())]
    assert gate_stages(pg_url) == []
    metadata = stored_materialization_metadata(env, ASSET, NEXT_DAY)
    assert (metadata["chunks_resumed"], metadata["chunks_written"]) == (4, 6)
    assert metadata["rows_inserted"] == ROWS
