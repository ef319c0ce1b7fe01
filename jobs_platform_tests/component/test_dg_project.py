"""A backfill declared in YAML, in a project `create-dagster` scaffolds, through `dg` and
`dagster asset materialize`, as a user runs it.

`create-dagster project` writes the project (offline: no `uv sync`, the test's environment
runs it); `dg list components` lists the framework's components from its
`dagster_dg_cli.registry_modules` entry point; `dg scaffold defs` writes the `defs.yaml` of
the framework (once) and of a backfill, filled in here for a SQL source in PostgreSQL
with one poison day. Then, in real processes: a good day materializes, the poison day
is quarantined, and once its source rows are fixed it is requeued and materializes.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from jobs_platform_tests.commands import REPO_ROOT, run_cli
from jobs_platform_tests.dagster_homes import fresh_dagster_home
from jobs_platform_tests.databases import pg_database

BIN = Path(sys.executable).parent
PROJECT = "acme_backfills"
MODULE = f"{PROJECT}.definitions"
ASSET = "orders"
BACKFILL_TYPE = "jobs_platform.component.BackfillComponent"
PLATFORM_TYPE = "jobs_platform.component.JobsPlatformComponent"
GOOD, POISON = "2024-01-01", "2024-01-02"

SOURCE_ROWS = [
    (1, "1200", "2024-01-01T09:00:00+00:00"),
    (2, "350", "2024-01-01T17:30:00+00:00"),
    (3, "990", "2024-01-02T08:00:00+00:00"),
    (4, "twelve", "2024-01-02T10:00:00+00:00"),  # the poison: no integer
    (5, "40", "2024-01-02T23:59:00+00:00"),
]

ATTRIBUTES = {
    "key": ASSET,
    "table": {
        "name": "acme_orders",
        "columns": [
            {"name": "order_id", "type": "bigint"},
            {"name": "amount_cents", "type": "bigint", "nullable": False},
            {"name": "ordered_at", "type": "timestamp"},
        ],
    },
    "natural_key": ["order_id"],
    "partition_column": "ordered_at",
    "partitions": {"type": "daily", "start_date": "2024-01-01", "end_date": "2024-01-08"},
    "source": {
        "kind": "sql",
        "url_env": "ACME_SOURCE_URL",
        "query": (
            "SELECT id AS order_id, amount AS amount_cents, placed_at AS ordered_at\n"
            "FROM raw_orders WHERE placed_at >= :start AND placed_at < :end ORDER BY id\n"
        ),
    },
    "code_version": "1",
}


def registered_entry_points(folder: Path) -> Path:
    """A folder holding the package's metadata with the entry points pyproject.toml declares,
    as an install registers them; first on the path, it is the metadata Python reads (the
    environment may have been installed before the entry point existed)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    groups = {"console_scripts": project["scripts"], **project["entry-points"]}
    dist_info = folder / f"{project['name']}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
            for group, entries in groups.items()
        )
    )
    return folder


@pytest.fixture
def project_env(pg_url, tmp_path) -> dict[str, str]:
    """The shell of the project's user: its source database, the warehouse, a Dagster home."""
    with pg_database() as source_url:
        engine = sa.create_engine(source_url)
        with engine.begin() as connection:
            connection.execute(
                sa.text("CREATE TABLE raw_orders (id int, amount text, placed_at timestamptz)")
            )
            connection.execute(
                sa.text("INSERT INTO raw_orders VALUES (:id, :amount, :placed_at)"),
                [{"id": i, "amount": a, "placed_at": p} for i, a, p in SOURCE_ROWS],
            )
        engine.dispose()
        home = tmp_path / "dagster_home"
        fresh_dagster_home(home)
        path = [
            str(registered_entry_points(tmp_path / "metadata")),
            str(tmp_path / PROJECT / "src"),
            os.environ.get("PYTHONPATH", ""),
        ]
        yield {
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(path),
            "DAGSTER_HOME": str(home),
            "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",  # create-dagster asks PyPI otherwise
            "JOBS_PLATFORM_DATABASE_URL": pg_url,
            "ACME_SOURCE_URL": source_url,
        }


def ok(completed) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def materialize(env: dict[str, str], project: Path, day: str):
    return run_cli(
        [str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", ASSET,
         "--partition", day],
        env, cwd=project,
    )  # fmt: skip


def jobs_platform(env: dict[str, str], project: Path, *args: str) -> str:
    return ok(run_cli([str(BIN / "jobs-platform"), *args], env, cwd=project))


def target_rows(url: str) -> list[tuple]:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT order_id, amount_cents, ordered_at::date::text FROM acme_orders")
        )
        found = sorted(tuple(row) for row in rows)
    engine.dispose()
    return found


@pytest.mark.slow
def test_a_yaml_declared_backfill_materializes_quarantines_and_is_requeued(
    project_env, pg_url, tmp_path
):
    env = project_env
    ok(
        run_cli(
            [str(BIN / "create-dagster"), "project", PROJECT, "--no-uv-sync"], env, cwd=tmp_path
        )
    )
    project = tmp_path / PROJECT

    listed = json.loads(
        ok(run_cli([str(BIN / "dg"), "list", "components", "--json"], env, cwd=project))
    )
    assert {BACKFILL_TYPE, PLATFORM_TYPE} <= {item["key"] for item in listed["items"]}

    ok(
        run_cli(
            [str(BIN / "dg"), "scaffold", "defs", PLATFORM_TYPE, "jobs_platform"], env, cwd=project
        )
    )
    ok(run_cli([str(BIN / "dg"), "scaffold", "defs", BACKFILL_TYPE, ASSET], env, cwd=project))
    defs_yaml = project / "src" / PROJECT / "defs" / ASSET / "defs.yaml"
    scaffolded = yaml.safe_load(defs_yaml.read_text())
    assert scaffolded["type"] == BACKFILL_TYPE and scaffolded["attributes"]["key"] == ASSET
    defs_yaml.write_text(yaml.safe_dump({"type": BACKFILL_TYPE, "attributes": ATTRIBUTES}))

    # Deploy: the framework's tables, then the declared table.
    assert "acme_orders" in jobs_platform(env, project, "db", "upgrade", "-m", MODULE)

    ok(materialize(env, project, GOOD))
    assert target_rows(pg_url) == [(1, 1200, GOOD), (2, 350, GOOD)]

    poisoned = materialize(env, project, POISON)
    assert poisoned.returncode == 1, poisoned.stdout[-3000:] + poisoned.stderr[-3000:]
    [entry] = json.loads(jobs_platform(env, project, "dead-letter", "list", "-m", MODULE, "--json"))
    assert (entry["asset"], entry["partition"], entry["error_class"]) == (ASSET, POISON, "terminal")
    assert "row 2, column 'amount_cents'" in entry["last_error"], entry["last_error"]
    assert "'twelve'" in entry["last_error"]
    assert [row[0] for row in target_rows(pg_url)] == [1, 2]  # nothing of the poison day

    # The source is fixed; the day is requeued and, no daemon running, its run is executed
    # by the command itself (`--wait`).
    source = sa.create_engine(env["ACME_SOURCE_URL"])
    with source.begin() as connection:
        connection.execute(sa.text("UPDATE raw_orders SET amount = '12' WHERE id = 4"))
    source.dispose()
    jobs_platform(env, project, "dead-letter", "requeue", "-m", MODULE, ASSET, POISON, "--wait")
    assert (
        json.loads(jobs_platform(env, project, "dead-letter", "list", "-m", MODULE, "--json")) == []
    )
    assert target_rows(pg_url) == [
        (1, 1200, GOOD), (2, 350, GOOD), (3, 990, POISON), (4, 12, POISON), (5, 40, POISON)
    ]  # fmt: skip
