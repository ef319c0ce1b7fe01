"""Classification a person teaches, from two teams' own code locations on one warehouse.

Each team's package is written to a temporary folder, as each team writes its own, built
with `platform_definitions(..., location=...)`; both raise the same error of their vendor's
(the same signature). An `unknown` error failing identically on three partitions is shown
`looks_permanent`; after `dead-letter classify … terminal` the next failure of that cause
in that location is quarantined at once and its history names the rule, while the other
location keeps retrying; `dead-letter rules --json` lists the rule; `--remove` restores
the table's verdict.
"""

from __future__ import annotations

import getpass
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.store.attempts import attempt_history
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_user_tables
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.environments import platform_environment
from jobs_platform_tests.store.factories import a_quarantine_entry

# (location name, package, backfill asset, its table)
VENDOR = ("vendor", "vendor_team", "vendor_spend", "vendor_spend")
PARTNER = ("partner", "partner_team", "partner_spend", "partner_spend")
MAX_ATTEMPTS = 3  # TEST_ENV_DEFAULTS

LOCATION_SOURCE = """
import dagster as dg
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset, platform_definitions


class VendorQuirk(Exception):
    \"\"\"What the vendor's export does that no table of the framework knows.\"\"\"


metadata = sa.MetaData()
table = sa.Table(
    TABLE,
    metadata,
    sa.Column("region", sa.String(32), primary_key=True),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


def rows_of_region(table: sa.Table, region: str) -> sa.ColumnElement[bool]:
    return table.c.region == region


@backfill_asset(
    name=ASSET,
    table=table,
    partitions_def=dg.StaticPartitionsDefinition(["r1", "r2", "r3", "r4", "r5"]),
    partition_scope=rows_of_region,
)
def backfill(source: PartitionInput):
    raise VendorQuirk(f"vendor export {source.partition_key} has an unreadable header")


defs = platform_definitions([backfill], executor=dg.in_process_executor, location=LOCATION)
"""


def write_location(project: Path, location: tuple[str, str, str, str]) -> None:
    name, package, asset, table = location
    folder = project / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    names = f"LOCATION, ASSET, TABLE = {name!r}, {asset!r}, {table!r}\n"
    (folder / "defs.py").write_text(names + LOCATION_SOURCE)


@pytest.fixture
def workspace(upgraded_pg_url, tmp_path, monkeypatch) -> Iterator[dict[str, str]]:
    """Both packages importable here, the warehouse deployed for them."""
    project = tmp_path / "project"
    for location in (VENDOR, PARTNER):
        write_location(project, location)
    env = platform_environment(
        upgraded_pg_url,
        tmp_path,
        PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]),
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(tmp_path)
    engine = warehouse_engine(upgraded_pg_url)
    create_user_tables(engine, *(module(location).table for location in (VENDOR, PARTNER)))
    yield env
    for name in [n for n in sys.modules if n.split(".")[0] in ("vendor_team", "partner_team")]:
        del sys.modules[name]


@pytest.fixture
def engine(workspace) -> sa.Engine:
    return warehouse_engine(workspace["JOBS_PLATFORM_DATABASE_URL"])


def module(location):
    return importlib.import_module(f"{location[1]}.defs")


def run(location, partition: str) -> None:
    """One run of the partition in this process, its step retries included."""
    defs = module(location).defs
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [defs.get_assets_def(location[2])],
            partition_key=partition,
            instance=instance,
            resources=dict(defs.resources),
            raise_on_error=False,
        )
    assert not result.success


def cli(*args: str, location=VENDOR):
    return jobs_platform_in_process(
        ["dead-letter", *args[:1], "-m", f"{location[1]}.defs", *args[1:]]
    )


def attempts_of(engine, location, partition: str) -> list[tuple[str, str | None]]:
    """(class, rule) of each attempt of the partition's latest episode."""
    with engine.connect() as connection:
        history = attempt_history(connection, location[2], partition)
    episode = max(row.episode for row in history)
    return [(row.error_class, row.rule) for row in history if row.episode == episode]


def test_a_taught_rule_quarantines_its_cause_at_once_in_its_location_only(workspace, engine):
    for partition in ("r1", "r2", "r3"):
        run(VENDOR, partition)
    assert attempts_of(engine, VENDOR, "r1") == [("unknown", None)] * MAX_ATTEMPTS

    grouped = cli("groups", "--json")
    assert grouped.returncode == 0, grouped.stderr
    [group] = json.loads(grouped.stdout)
    signature = group["signature"]
    assert (group["count"], group["error_class"], group["hint"]) == (
        3,
        "unknown",
        "looks_permanent",
    )
    assert group["teach"] == (
        f"jobs-platform dead-letter classify -m vendor_team.defs --group {signature} terminal"
    )
    assert group["rule"] is None
    assert f"looks_permanent: teach it with {group['teach']}" in cli("groups").stdout

    # The printed signature's prefix is enough when it names one cause.
    taught = cli("classify", "--group", signature[:6], "terminal", "--reason", "header never fixed")
    assert taught.returncode == 0, taught.stderr
    assert "is recorded terminal from now on" in taught.stdout
    assert "Its 3 open entries stay quarantined as they are" in taught.stdout
    assert f"jobs-platform dead-letter requeue -m vendor_team.defs --group {signature}" in (
        taught.stdout
    )

    run(VENDOR, "r4")
    assert attempts_of(engine, VENDOR, "r4") == [("terminal", signature)]  # no retry
    with engine.connect() as connection:
        entry = latest_entry(connection, VENDOR[2], "r4")
    assert (entry.status, entry.attempts, entry.signature) == ("quarantined", 1, signature)
    shown = cli("show", VENDOR[2], "r4", "--json")
    assert [record["rule"] for record in json.loads(shown.stdout)["history"]] == [signature]

    # The partner's location raises the same error, with the same signature: not taught there.
    run(PARTNER, "r1")
    assert attempts_of(engine, PARTNER, "r1") == [("unknown", None)] * MAX_ATTEMPTS
    with engine.connect() as connection:
        assert latest_entry(connection, PARTNER[2], "r1").signature == signature

    listed = cli("rules", "--json")
    [rule] = json.loads(listed.stdout)
    assert {k: rule[k] for k in ("signature", "classification", "reason", "location")} == {
        "signature": signature,
        "classification": "terminal",
        "reason": "header never fixed",
        "location": "vendor_team.defs",
    }
    assert (rule["set_by"], rule["assets"], rule["error_class"]) == (
        getpass.getuser(),
        ["vendor_spend"],
        "unknown",
    )
    assert "has an unreadable header" in rule["sample_message"]
    [taught_group] = [g for g in json.loads(cli("groups", "--json").stdout) if g["count"] == 4]
    assert (taught_group["hint"], taught_group["rule"]["classification"]) == (None, "terminal")
    assert json.loads(cli("rules", "--json", location=PARTNER).stdout) == []

    removed = cli("classify", "--group", signature, "--remove")
    assert removed.returncode == 0, removed.stderr
    assert "classified by the built-in table again (unknown)" in removed.stdout
    with engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, VENDOR[2], "r4")
    run(VENDOR, "r4")
    assert attempts_of(engine, VENDOR, "r4") == [("unknown", None)] * MAX_ATTEMPTS


def test_classify_refuses_a_signature_no_entry_of_its_location_has(workspace, engine):
    run(PARTNER, "r1")  # the cause exists, in the other location only
    with engine.connect() as connection:
        signature = latest_entry(connection, PARTNER[2], "r1").signature

    refused = cli("classify", "--group", signature, "terminal")

    assert refused.returncode == 2
    assert "no dead-letter entry or rule of code location vendor_team.defs" in refused.stderr
    assert json.loads(cli("rules", "--json", location=VENDOR).stdout) == []


def test_classify_refuses_an_ambiguous_prefix_and_a_cause_no_rule_can_change(workspace, engine):
    with engine.begin() as connection:
        for partition, signature in (("r1", "abc000000001"), ("r2", "abc000000002")):
            a_quarantine_entry(
                connection, asset=VENDOR[2], partition=partition, signature=signature
            )
        a_quarantine_entry(
            connection,
            asset=VENDOR[2],
            partition="r3",
            error_class="crash",
            error_type="WorkerLost",
        )
        crash = latest_entry(connection, VENDOR[2], "r3").signature

    ambiguous = cli("classify", "--group", "abc", "terminal")
    assert ambiguous.returncode == 2
    assert "ambiguous" in ambiguous.stderr
    assert "abc000000001, abc000000002" in ambiguous.stderr

    refused = cli("classify", "--group", crash, "retryable")
    assert refused.returncode == 2
    assert f"signature {crash} is a crash: a rule cannot change it" in refused.stderr

    assert cli("classify", "--group", "abc000000002", "terminal").returncode == 0
    assert [r["signature"] for r in json.loads(cli("rules", "--json").stdout)] == ["abc000000002"]
