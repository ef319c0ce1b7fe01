"""The components in a project's defs folder: the framework once around every backfill.

In-process, through Dagster's own sandbox of a defs folder (`create_defs_folder_sandbox`):
the definitions the project loads, and one partition of a files backfill materialized.
"""

from __future__ import annotations

import copy

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster.components.testing import create_defs_folder_sandbox

from jobs_platform import create_user_tables
from jobs_platform.component import BackfillComponent, JobsPlatformComponent
from jobs_platform.orchestration.specs import backfill_specs
from jobs_platform_tests.component.test_declaration import DECLARED
from jobs_platform_tests.databases import upgraded_warehouse


def backfill(key: str, **source) -> dict:
    attributes = copy.deepcopy(DECLARED)
    attributes.update(key=key, table={**attributes["table"], "name": key})
    if source:
        attributes["source"] = source
    return {"type": "jobs_platform.component.BackfillComponent", "attributes": attributes}


PLATFORM = {"type": "jobs_platform.component.JobsPlatformComponent", "attributes": {}}


def declare(sandbox, component: type, name: str, declaration: dict) -> None:
    sandbox.scaffold_component(component, name, defs_yaml_contents=declaration)


def load_error(sandbox) -> str:
    """Why the project does not load: Dagster's error names the component, its cause says why."""
    with pytest.raises(Exception) as refused, sandbox.build_all_defs():
        pass
    return str(refused.value.__cause__)


def test_the_framework_is_added_once_around_every_backfill_of_the_project():
    with create_defs_folder_sandbox() as sandbox:
        declare(sandbox, JobsPlatformComponent, "jobs_platform", PLATFORM)
        for key in ("orders", "refunds"):
            declare(sandbox, BackfillComponent, key, backfill(key))
        with sandbox.build_all_defs() as defs:
            repository = defs.get_repository_def()
            sensors = sorted(sensor.name for sensor in repository.sensor_defs)
            checks = sorted(key.to_user_string() for key in repository.asset_checks_defs_by_key)
            backfills = sorted(backfill_specs(defs.assets or ()))

    assert backfills == ["orders", "refunds"]
    assert sensors.count("dead_letter_sensor") == 1 and "requeue_sensor" in sensors
    assert "orders:no_quarantined_partitions" in checks
    assert "refunds:no_quarantined_partitions" in checks


def test_a_backfill_without_the_framework_says_how_to_declare_it():
    with create_defs_folder_sandbox() as sandbox:
        declare(sandbox, BackfillComponent, "orders", backfill("orders"))
        error = load_error(sandbox)
    assert "the project declares no jobs_platform.component.JobsPlatformComponent" in error
    assert "dg scaffold defs jobs_platform.component.JobsPlatformComponent" in error


def test_the_framework_declared_twice_is_refused():
    with create_defs_folder_sandbox() as sandbox:
        for name in ("jobs_platform", "jobs_platform_again"):
            declare(sandbox, JobsPlatformComponent, name, PLATFORM)
        assert "is declared more than once in the project" in load_error(sandbox)


def test_a_partition_of_a_files_backfill_materializes(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    monkeypatch.setenv("JOBS_PLATFORM_DATABASE_URL", url)
    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    (landing / "2024-01-01.csv").write_text(
        "order_id,amount_cents,ordered_at\n1,100,2024-01-01T01:00:00\n2,250,2024-01-01T20:00:00\n"
    )
    files = {
        "kind": "files",
        "root": str(tmp_path / "landing"),
        "path": "orders/{partition_key}.csv",
    }
    with create_defs_folder_sandbox() as sandbox:
        declare(sandbox, JobsPlatformComponent, "jobs_platform", PLATFORM)
        declare(sandbox, BackfillComponent, "orders", backfill("orders", **files))
        with sandbox.build_all_defs() as defs:
            [spec] = backfill_specs(defs.assets or ()).values()
            engine = upgraded_warehouse(url)
            create_user_tables(engine, spec.table)
            job = defs.resolve_implicit_global_asset_job_def()
            result = job.execute_in_process(
                partition_key="2024-01-01",
                asset_selection=[dg.AssetKey("orders")],
                instance=dg.DagsterInstance.ephemeral(),
            )

    assert result.success
    with engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT order_id, amount_cents FROM orders ORDER BY 1"))
        assert [tuple(row) for row in rows] == [(1, 100), (2, 250)]
    engine.dispose()
