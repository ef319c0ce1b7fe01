"""Helpers the tests share: environments, runs in-process and in subprocesses, snapshots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import sqlalchemy as sa

from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine

REPO_ROOT = Path(__file__).resolve().parents[1]

# Small numbers so that retries and leases play out in seconds, not minutes.
TEST_ENV_DEFAULTS = {
    "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.05",
    "JOBS_PLATFORM_MAX_ATTEMPTS": "3",
    "JOBS_PLATFORM_LEASE_SECONDS": "10",
}


def platform_environment(warehouse_url: str, folder: Path, **overrides: str) -> dict[str, str]:
    """Variables for a run against `warehouse_url`, with everything else under `folder`."""
    dagster_home = folder / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        "JOBS_PLATFORM_DATABASE_URL": warehouse_url,
        "JOBS_PLATFORM_LANDING": str(folder / "landing"),
        "DAGSTER_HOME": str(dagster_home),
        **TEST_ENV_DEFAULTS,
    }
    env.update(overrides)
    return env


def settings_from(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


def engine_from(env: dict[str, str]) -> sa.Engine:
    return warehouse_engine(env["JOBS_PLATFORM_DATABASE_URL"])


def materialize(
    assets,
    partition: str,
    *,
    chunk_rows: int | None = None,
    instance: dg.DagsterInstance | None = None,
    raise_on_error: bool = False,
    tags: dict[str, str] | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize `assets` for one partition in this process, with the framework resource."""
    from jobs_platform.definitions import defs

    run_config = {}
    if chunk_rows is not None:
        run_config = {
            "ops": {
                asset.key.to_python_identifier(): {"config": {"chunk_rows": chunk_rows}}
                for asset in assets
            }
        }
    return dg.materialize(
        assets,
        partition_key=partition,
        instance=instance or dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        run_config=run_config,
        raise_on_error=raise_on_error,
        tags=tags,
    )


def run_cli(
    args: list[str], env: dict[str, str], *, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run a command in a real subprocess with the platform environment."""
    full_env = {**os.environ, **env}
    return subprocess.run(
        args, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def dagster_job_execute(
    env: dict[str, str], partition: str, *, job: str = "orders_backfill", config: dict | None = None
) -> subprocess.CompletedProcess:
    """`dagster job execute -m jobs_platform.definitions -j JOB` for one partition."""
    args = [
        str(Path(sys.executable).with_name("dagster")),
        "job",
        "execute",
        "-m",
        "jobs_platform.definitions",
        "-j",
        job,
        "--tags",
        json.dumps({"dagster/partition": partition}),
    ]
    if config is not None:
        args += ["--config-json", json.dumps(config)]
    return run_cli(args, env)


def table_snapshot(engine: sa.Engine, table_name: str) -> list[tuple]:
    """Every row of a table, ordered, for exact comparisons."""
    table = sa.Table(table_name, sa.MetaData(), autoload_with=engine)
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(sa.select(table).order_by(*table.c))]


def row_versions(engine: sa.Engine, table_name: str) -> list[str]:
    """PostgreSQL's xmin of every row: unchanged when no row was rewritten."""
    with engine.connect() as connection:
        xmin = sa.literal_column("xmin::text")
        query = sa.select(xmin).select_from(sa.table(table_name)).order_by(xmin)
        return list(connection.execute(query).scalars())


def metadata_of(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        if event.asset_key.to_user_string() == asset:
            return {k: v.value for k, v in event.materialization.metadata.items()}
    raise AssertionError(f"no materialization of {asset}")
