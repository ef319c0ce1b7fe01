"""What a team installs: the built wheel holds the framework and nothing else, and works.

The wheel is built as `pip wheel .` builds it, in an isolated build environment, from a
copy of the sources (a build writes `build/` and `*.egg-info` beside them). One test reads
its file list. The other installs it, not editable, into a fresh virtual environment
beside a small user package, as a team does after `pip install jobs_platform`: a backfill,
a quarantine, `dead-letter list`, and the user's type checker reading the package's
annotations from the installed wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from jobs_platform_tests.commands import REPO_ROOT

# What a wheel of the project may hold: the package and the wheel's own metadata.
PACKAGE = "jobs_platform/"
METADATA_SUFFIX = ".dist-info/"
# The files a user's install needs that are not Python modules.
DATA_FILES = {
    "jobs_platform/py.typed",
    "jobs_platform/store/migrations/script.py.mako",
}

USER_PACKAGE = '''
"""A team's own code location: one daily backfill whose second day is poison."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, TerminalError, backfill_asset, platform_definitions

metadata = sa.MetaData()
shop_events = sa.Table(
    "shop_events",
    metadata,
    sa.Column("event_id", sa.Integer, primary_key=True),
    sa.Column("day", sa.Date, nullable=False),
)
days = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-03-04")
POISON = "2024-03-02"


def events_of_day(table: sa.Table, day: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(day)


@backfill_asset(table=shop_events, partitions_def=days, partition_scope=events_of_day)
def events_backfill(source: PartitionInput) -> Iterator[pd.DataFrame]:
    """Three events a day."""
    if source.partition_key == POISON:
        raise TerminalError("no input for the day")
    day = dt.date.fromisoformat(source.partition_key)
    ids = [day.toordinal() * 10 + n for n in range(3)]
    yield pd.DataFrame({"event_id": ids, "day": [day] * 3})


defs = platform_definitions([events_backfill])
'''

# A misuse the user's type checker must report from the installed wheel's annotations.
USER_MISUSE = """
from jobs_platform import PartitionInput

def key_length(source: PartitionInput) -> int:
    day: int = source.partition_key  # a str: mypy reports this line
    return day
"""

# A user's settings: strict, but for Dagster's own generics; pandas ships no types (the
# user did not install pandas-stubs).
USER_MYPY_INI = """\
[mypy]
strict = True
allow_any_generics = True

[mypy-pandas.*]
ignore_missing_imports = True
"""


def build_wheel(folder: Path) -> Path:
    """The project's wheel, built from a copy of its sources into `folder`."""
    sources = folder / "sources"
    sources.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, sources / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "jobs_platform", sources / "jobs_platform", ignore=ignore)
    # uv (bin/setup installs it) builds as pip does: in an isolated environment.
    built = subprocess.run(
        [str(Path(sys.executable).with_name("uv")), "build", "--wheel", "--quiet",
         "--out-dir", str(folder / "dist"), str(sources)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (folder / "dist").glob("jobs_platform-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_framework_and_its_metadata_only(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()

    outside = [
        name
        for name in names
        if not name.startswith(PACKAGE) and METADATA_SUFFIX not in name.split("/", 1)[0] + "/"
    ]
    assert outside == [], outside
    assert set(names) >= DATA_FILES
    assert any(name.startswith("jobs_platform/store/migrations/versions/") for name in names)
    for lab in ("jobs_platform_tests/", "benchmarks/", "orders_example/", "deploy/"):
        assert not any(name.startswith(lab) for name in names), lab
    for lab in ("jobs_platform/bench/", "jobs_platform/examples/", "jobs_platform/deploy/"):
        assert not any(name.startswith(lab) for name in names), lab


def fresh_environment(folder: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed (not editable): its python."""
    environment = folder / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(environment)], check=True, timeout=120
    )
    python = environment / "bin" / "python"
    # uv (bin/setup installs it) resolves the wheel's dependencies from its cache.
    installed = subprocess.run(
        [str(Path(sys.executable).with_name("uv")), "pip", "install", "--quiet",
         "--python", str(python), str(wheel)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def user_environment(folder: Path, python: Path) -> dict[str, str]:
    """A shell of the user's: the fresh environment first on the PATH, nothing of the repo."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("JOBS_PLATFORM_", "PYTHON", "VIRTUAL_ENV"))
        and name != "DAGSTER_HOME"
    }
    home = folder / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env.update(
        PATH=f"{python.parent}{os.pathsep}/usr/bin:/bin",
        DAGSTER_HOME=str(home),
        JOBS_PLATFORM_DATABASE_URL=f"sqlite:///{folder / 'warehouse.db'}",
        JOBS_PLATFORM_RETRY_DELAY_SECONDS="0.05",
    )
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_a_team_runs_a_backfill_from_the_installed_wheel(wheel, tmp_path):
    python = fresh_environment(tmp_path, wheel)
    project = tmp_path / "project"
    (project / "shopco").mkdir(parents=True)
    (project / "shopco" / "__init__.py").write_text("")
    (project / "shopco" / "defs.py").write_text(textwrap.dedent(USER_PACKAGE))
    env = user_environment(tmp_path, python)
    bin_dir = python.parent

    where = run(
        [str(python), "-c", "import jobs_platform; print(jobs_platform.__file__)"], env, project
    )
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    upgraded = run(
        [str(bin_dir / "jobs-platform"), "db", "upgrade", "-m", "shopco.defs"], env, project
    )
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    materialize = [str(bin_dir / "dagster"), "asset", "materialize", "-m", "shopco.defs",
                   "--select", "events_backfill", "--partition"]  # fmt: skip
    good = run([*materialize, "2024-03-01"], env, project)
    poison = run([*materialize, "2024-03-02"], env, project)
    listed = run(
        [str(bin_dir / "jobs-platform"), "dead-letter", "list", "-m", "shopco.defs", "--json"],
        env,
        project,
    )

    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    assert poison.returncode == 1, poison.stdout[-3000:] + poison.stderr[-3000:]
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(e["asset"], e["partition"], e["error_class"]) for e in entries] == [
        ("events_backfill", "2024-03-02", "terminal")
    ]
    import sqlalchemy as sa

    engine = sa.create_engine(env["JOBS_PLATFORM_DATABASE_URL"])
    with engine.connect() as connection:
        days = connection.execute(sa.text("SELECT day, count(*) FROM shop_events GROUP BY day"))
        assert [(str(day), count) for day, count in days] == [("2024-03-01", 3)]
    engine.dispose()

    # The user's type checker reads the installed wheel's annotations (py.typed).
    (project / "misuse.py").write_text(textwrap.dedent(USER_MISUSE))
    (project / "mypy.ini").write_text(USER_MYPY_INI)
    checked = run(
        [str(Path(sys.executable).with_name("mypy")), "--python-executable", str(python),
         "--config-file", "mypy.ini", "--no-incremental", "shopco/defs.py", "misuse.py"],
        {**env, "MYPYPATH": ""}, project,
    )  # fmt: skip
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[:2] for line in errors] == [["misuse.py", "5"]], checked.stdout
