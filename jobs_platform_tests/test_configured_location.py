"""A code location configures the framework's resources and executor in its own code.

The location (a package written to a temporary folder, as a team writes it) passes a
`JobsPlatformResource(database_url=…)`, an `AlertsResource(webhook_url=…)` and an executor
to `platform_definitions`, while JOBS_PLATFORM_DATABASE_URL names another warehouse: the
steps, the sensors and every `jobs-platform … -m` command use the location's.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.cli.main import main
from jobs_platform.store.holders import HolderIdentity
from jobs_platform_tests.alert_fixtures import HttpReceiver, http_receiver
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.databases import upgraded_warehouse
from jobs_platform_tests.rows import attempts_of

BIN = Path(sys.executable).parent
PACKAGE = "tenants_location"
MODULE = f"{PACKAGE}.defs"
ASSET = "tenant_sales"
POISON = "poison"

LOCATION_SOURCE = """
import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import (
    AlertsResource,
    JobsPlatformResource,
    PartitionInput,
    TerminalError,
    backfill_asset,
    platform_definitions,
)

metadata = sa.MetaData()
tenant_sales_table = sa.Table(
    "tenant_sales",
    metadata,
    sa.Column("tenant", sa.String(32), primary_key=True),
    sa.Column("line", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


def rows_of_tenant(table: sa.Table, tenant: str) -> sa.ColumnElement[bool]:
    return table.c.tenant == tenant


@backfill_asset(
    table=tenant_sales_table,
    partitions_def=dg.StaticPartitionsDefinition(["north", "south", "poison"]),
    partition_scope=rows_of_tenant,
)
def tenant_sales(source: PartitionInput):
    if source.partition_key == "poison":
        raise TerminalError("the poison tenant's export is malformed")
    yield pd.DataFrame(
        {"tenant": [source.partition_key] * 3, "line": [1, 2, 3], "amount_cents": [1, 2, 3]}
    )


defs = platform_definitions(
    [tenant_sales],
    jobs_platform=JobsPlatformResource(database_url=WAREHOUSE_URL, max_attempts=2),
    alerts=AlertsResource(webhook_url=WEBHOOK_URL),
    executor=dg.in_process_executor,
)
"""


def write_location(folder: Path, *, warehouse: str, webhook: str) -> Path:
    """The package `tenants_location` under `folder`; returns the folder for PYTHONPATH."""
    package = folder / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(
        LOCATION_SOURCE.replace("WAREHOUSE_URL", repr(warehouse)).replace(
            "WEBHOOK_URL", repr(webhook)
        )
    )
    return folder


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    with http_receiver() as receiver:
        yield receiver


@pytest.fixture
def location(pg_url, tmp_path, receiver, monkeypatch) -> dict[str, str]:
    """The location on PYTHONPATH, its warehouse in its code, the environment's elsewhere."""
    project = write_location(tmp_path / "project", warehouse=pg_url, webhook=receiver.url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        "PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]),
        # What the location does not use: a warehouse that appears if anything reads it.
        "JOBS_PLATFORM_DATABASE_URL": f"sqlite:///{elsewhere / 'warehouse.db'}",
        "DAGSTER_HOME": str(home),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", raising=False)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(tmp_path)
    yield env
    for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
        del sys.modules[name]


def loaded_definitions() -> dg.Definitions:
    return importlib.import_module(MODULE).defs


def jobs_platform(env, *args: str) -> subprocess.CompletedProcess:
    return run_cli([str(BIN / "jobs-platform"), *args], env)


def ok(completed: subprocess.CompletedProcess) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def materialize(env, partition: str) -> tuple[int, int]:
    """`dagster asset materialize -m` of one partition: (exit code, the command's pid)."""
    command = [
        str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", ASSET,
        "--partition", partition,
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = process.communicate(timeout=300)
    if process.returncode not in (0, 1):
        pytest.fail(f"{command} exited {process.returncode}:\n{output[-3000:]}")
    return process.returncode, process.pid


def tick(sensor_name: str, defs: dg.Definitions) -> dg.SensorResult:
    with dg.DagsterInstance.get() as instance:
        context = dg.build_sensor_context(
            instance=instance,
            instance_ref=instance.get_ref(),
            definitions=defs,
            resources=dict(defs.resources),
        )
        return defs.get_sensor_def(sensor_name).evaluate_tick(context)


def test_the_locations_own_warehouse_alerts_and_executor_serve_its_steps_sensors_and_commands(
    location, pg_url, receiver, tmp_path, capsys
):
    env = location
    assert "tenant_sales" in ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    assert sa.inspect(sa.create_engine(pg_url)).has_table("tenant_sales")

    exit_code, materialize_pid = materialize(env, POISON)

    assert exit_code == 1
    [attempt] = attempts_of(sa.create_engine(pg_url), ASSET, POISON)
    assert attempt.error_class == "terminal"
    # The location's executor ran the step: in_process, inside the command's own process.
    assert HolderIdentity.parse(attempt.holder).pid == materialize_pid

    defs = loaded_definitions()
    [request] = tick("dead_letter_sensor", defs).run_requests
    [alert] = receiver.requests
    assert (alert.json()["asset"], alert.json()["partition"]) == (ASSET, POISON)
    assert alert.json()["error_class"] == "terminal"
    assert request.partition_key == str(alert.json()["entry_id"])

    [entry] = json.loads(ok(jobs_platform(env, "dead-letter", "list", "-m", MODULE, "--json")))
    assert (entry["asset"], entry["partition"], entry["attempts"]) == (ASSET, POISON, 1)
    # The other commands with -m, in this process (the location is importable here too).
    capsys.readouterr()
    assert main(["dead-letter", "show", "-m", MODULE, ASSET, POISON, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [attempt["error_class"] for attempt in shown["history"]] == ["terminal"]
    assert main(["status", "-m", MODULE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assets"][ASSET]["quarantined"] == 1
    assert main(["outbox", "list", "-m", MODULE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["db", "check", "-m", MODULE]) == 0
    assert "every backfill table" in capsys.readouterr().out

    # Nothing ever opened the environment's warehouse.
    assert not (tmp_path / "elsewhere" / "warehouse.db").exists()


def test_the_executor_passed_is_the_one_every_job_of_the_location_runs_on(location):
    defs = loaded_definitions()

    jobs = [
        defs.resolve_implicit_global_asset_job_def(),
        defs.resolve_job_def("requeue_dead_letter"),
    ]
    assert [job.executor_def for job in jobs] == [dg.in_process_executor] * 2


def test_a_resource_of_the_wrong_kind_is_refused_where_the_location_is_built():
    from jobs_platform import AlertsResource, platform_definitions

    with pytest.raises(TypeError, match=r"jobs_platform=...\) takes a JobsPlatformResource"):
        platform_definitions([], jobs_platform=AlertsResource())


def test_a_command_reads_a_resource_field_given_as_an_env_var_and_names_one_left_unset(
    monkeypatch,
):
    from jobs_platform import JobsPlatformResource, platform_definitions
    from jobs_platform.location import location_settings
    from jobs_platform.settings import SettingsError

    defs = platform_definitions(
        [], jobs_platform=JobsPlatformResource(database_url=dg.EnvVar("ACME_WAREHOUSE"))
    )
    monkeypatch.setenv("JOBS_PLATFORM_DATABASE_URL", "sqlite:///not-this-one.db")
    monkeypatch.setenv("ACME_WAREHOUSE", "postgresql+psycopg://acme@db.internal/warehouse")
    assert location_settings(defs).database_url.endswith("@db.internal/warehouse")

    monkeypatch.delenv("ACME_WAREHOUSE")
    with pytest.raises(SettingsError, match='environment variable "ACME_WAREHOUSE" which is not'):
        location_settings(defs)


def test_without_a_named_location_the_listings_read_the_environment_without_dagster(
    sqlite_url, tmp_path, monkeypatch
):
    upgraded_warehouse(sqlite_url).dispose()
    monkeypatch.delenv("JOBS_PLATFORM_MODULE", raising=False)
    code = (
        "import sys\n"
        "from jobs_platform.cli.main import main\n"
        "codes = [main(['dead-letter', 'list', '--json']), main(['outbox', 'list', '--json'])]\n"
        "assert codes == [0, 0], codes\n"
        "assert 'dagster' not in sys.modules, 'dagster was imported'\n"
    )

    finished = run_cli(
        [sys.executable, "-c", code], {"JOBS_PLATFORM_DATABASE_URL": sqlite_url}, cwd=tmp_path
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.split() == ["[]", "[]"]
