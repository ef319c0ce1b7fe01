"""A user's type checker sees the public surface with its real signatures.

mypy runs as a user's would, once, on modules written outside the repository, with the
package found through the editable install bin/setup makes (PEP 561: read only with its
`py.typed` marker); test_wheel checks a user's package against the built wheel. A correct
code location checks clean under `--strict`, and so does the README's; each misuse of
`backfill_asset` is reported on its own line; no name of `jobs_platform.__all__` is `Any`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from filelock import FileLock

import jobs_platform
from jobs_platform_tests.commands import REPO_ROOT
from jobs_platform_tests.test_own_code_location import readme_code_location

MYPY = Path(sys.executable).parent / "mypy"
EXPECTED = "# mypy: error"

COMMON = """
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import (
    DEFAULT_BACKFILL_POLICY,
    PartitionInput,
    TerminalError,
    backfill_asset,
    platform_definitions,
)

metadata = sa.MetaData()
events = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("day", sa.Date, nullable=False),
)
days = dg.DailyPartitionsDefinition(start_date="2024-01-01")


class SourceDatabase(dg.ConfigurableResource):
    url: str


class Limits(dg.Config):
    max_rows: int = 100


def events_of_day(table: sa.Table, day: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(day)
"""

CORRECT = (
    COMMON
    + '''

def source_version(source: PartitionInput, source_db: SourceDatabase) -> str:
    return f"{source_db.url}/{source.partition_key}"


@backfill_asset(
    table=events,
    partitions_def=days,
    partition_scope=events_of_day,
    natural_key=["id"],
    fingerprint=source_version,
    code_version="2",
    backfill_policy=DEFAULT_BACKFILL_POLICY,
    key_prefix=["acme"],
    owners=["team:data-platform"],
    pool="warehouse_writes",
)
def events_backfill(
    source: PartitionInput, source_db: SourceDatabase, config: Limits
) -> Iterator[pd.DataFrame]:
    """Events of one day."""
    source.log.info("reading %s of %s", source.partition_key, source.asset)
    with source.warehouse.connect():
        pass
    if not source_db.url:
        raise TerminalError("no source")
    rows = min(source.chunk_rows, config.max_rows)
    yield pd.DataFrame({"id": range(rows), "day": [dt.date(2024, 1, 1)] * rows})


asset: dg.AssetsDefinition = events_backfill
defs = dg.Definitions.merge(
    platform_definitions([events_backfill]),
    dg.Definitions(resources={"source_db": SourceDatabase(url="postgresql://source")}),
)
'''
)

MISUSES = (
    COMMON
    + f"""

@backfill_asset(
    table="events",  {EXPECTED}: a table name, not a Table
    partitions_def=days,
    partition_scope=events_of_day,
)
def by_name(source: PartitionInput) -> Iterator[pd.DataFrame]:
    yield from ()


@backfill_asset(
    table=events,
    partitions_def=days,
    partition_scope=events_of_day,
    code_version=3,  {EXPECTED}: an int where Dagster takes a str
)
def numbered(source: PartitionInput) -> Iterator[pd.DataFrame]:
    yield from ()


@backfill_asset(  {EXPECTED}: no argument partition_def (mypy names the call's line)
    table=events,
    partitions_def=days,
    partition_scope=events_of_day,
    partition_def=days,
)
def misspelled(source: PartitionInput) -> Iterator[pd.DataFrame]:
    yield from ()


@backfill_asset(  {EXPECTED}: the reader's first parameter is not the PartitionInput
    table=events,
    partitions_def=days,
    partition_scope=events_of_day,
)
def takes_a_day(day: dt.date) -> Iterator[pd.DataFrame]:
    yield from ()


@backfill_asset(
    table=events,
    partitions_def=days,
    partition_scope=events_of_day,
    fingerprint=lambda source: len(source.partition_key),  {EXPECTED}: a fingerprint is a str
)
def counted(source: PartitionInput) -> Iterator[pd.DataFrame]:
    settings = source.settings  {EXPECTED}: a reader gets no framework settings
    day: int = source.partition_key  {EXPECTED}: a partition key is a str
    yield from ()
"""
)


def expected_error_lines(source: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), start=1) if EXPECTED in line]


# A user's settings: strict, but for Dagster's own generics (`dg.ConfigurableResource`
# takes a parameter) and, in the README's module, unannotated returns; pandas ships no
# types (pandas-stubs is a separate install), so a DataFrame is Any.
USER_MYPY_INI = """\
[mypy]
strict = True
allow_any_generics = True

[mypy-readme_defs]
disallow_untyped_defs = False
disallow_incomplete_defs = False

[mypy-pandas.*]
ignore_missing_imports = True
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory, worker_id) -> subprocess.CompletedProcess:
    """One mypy run, as a user runs it, over every module the tests below read.

    Under xdist this module's tests may be sent to both workers; the first to get here
    runs mypy (~12 s with a cold cache) and leaves its result for the other.
    """
    if worker_id == "master":
        return user_mypy(tmp_path_factory.mktemp("user_project"))
    shared = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
    with FileLock(shared / "user_mypy.lock"):
        saved = shared / "user_mypy.json"
        if not saved.exists():
            folder = shared / "user_project"
            folder.mkdir()
            completed = user_mypy(folder)
            fields = ("args", "returncode", "stdout", "stderr")
            saved.write_text(json.dumps({name: getattr(completed, name) for name in fields}))
        return subprocess.CompletedProcess(**json.loads(saved.read_text()))


def user_mypy(folder: Path) -> subprocess.CompletedProcess:
    """mypy over the user's modules, written into `folder` with the user's settings."""
    (folder / "mypy.ini").write_text(USER_MYPY_INI)
    (folder / "correct.py").write_text(CORRECT)
    (folder / "misuses.py").write_text(MISUSES)
    (folder / "reveals.py").write_text(
        "import jobs_platform\n"
        + "".join(f"reveal_type(jobs_platform.{name})\n" for name in jobs_platform.__all__)
    )
    (folder / "readme_defs.py").write_text(textwrap.dedent(readme_code_location()))
    # Found as bin/setup installs it (editable, setuptools' compat mode: a .pth file), as a
    # user's mypy finds it; mypy then reads it only with its py.typed. Nothing else on the
    # path: the repository's root is not the working directory.
    env = {key: value for key, value in os.environ.items() if key not in ("MYPYPATH", "PYTHONPATH")}
    files = ["correct.py", "misuses.py", "reveals.py", "readme_defs.py"]
    return subprocess.run(
        [str(MYPY), "--config-file", "mypy.ini", "--show-error-codes", *files],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def errors_in(completed: subprocess.CompletedProcess, file: str) -> list[str]:
    return [
        line
        for line in completed.stdout.splitlines()
        if line.startswith(f"{file}:") and ": error:" in line
    ]


def test_a_correct_code_location_checks_clean_under_strict(checked):
    assert errors_in(checked, "correct.py") == [], checked.stdout + checked.stderr


def test_each_misuse_of_backfill_asset_is_reported_on_its_line(checked):
    lines = sorted({int(line.split(":")[1]) for line in errors_in(checked, "misuses.py")})

    assert lines == expected_error_lines(MISUSES), checked.stdout + checked.stderr


def test_no_public_name_is_any_to_a_type_checker(checked):
    revealed = re.findall(r'^reveals\.py:\d+: note: Revealed type is "(.*)"$', checked.stdout, re.M)

    assert len(revealed) == len(jobs_platform.__all__), checked.stdout + checked.stderr
    shown = dict(zip(jobs_platform.__all__, revealed, strict=True))
    assert [name for name, type_ in shown.items() if type_ == "Any"] == [], shown
    assert errors_in(checked, "reveals.py") == [], checked.stdout


def test_the_readme_code_location_type_checks(checked):
    assert errors_in(checked, "readme_defs.py") == [], checked.stdout + checked.stderr


def test_the_wheel_ships_the_type_marker():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_data = pyproject["tool"]["setuptools"]["package-data"]

    assert "py.typed" in package_data.get("jobs_platform", [])
    assert (REPO_ROOT / "jobs_platform" / "py.typed").is_file()
