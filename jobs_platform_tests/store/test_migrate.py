"""Specifications of the framework's migrations, on real PostgreSQL and SQLite databases."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.settings import embedded_database_url
from jobs_platform.store import migrations
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import (
    BASELINE_REVISION,
    SchemaNotReady,
    alembic_config,
    check_schema,
    ensure_embedded_schema,
    head_revision,
    schema_state,
    upgrade_warehouse,
)
from jobs_platform.store.schema import VERSION_TABLE, framework_metadata, quarantine
from jobs_platform_tests.commands import REPO_ROOT
from jobs_platform_tests.store.schema_0_1_0 import build_0_1_0_warehouse, metadata_0_1_0


def every_row(engine: sa.Engine, metadata: sa.MetaData) -> dict[str, list[tuple]]:
    """Every row of `metadata`'s tables, read through its columns (a later revision's
    columns are left out, so rows read before and after an upgrade compare)."""
    with engine.connect() as connection:
        return {
            name: [
                tuple(row)
                for row in connection.execute(sa.select(table).order_by(*table.primary_key))
            ]
            for name, table in metadata.tables.items()
        }


def run_alembic(engine: sa.Engine, step, revision: str) -> None:
    """`step` (alembic's command.upgrade or .downgrade) to `revision`, in one transaction."""
    with engine.connect() as connection, connection.begin():
        config = alembic_config()
        config.attributes["connection"] = connection
        step(config, revision)


def differences(engine: sa.Engine, metadata: sa.MetaData) -> list:
    """What autogenerate would write to turn the database into `metadata`."""
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "version_table": VERSION_TABLE,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return compare_metadata(context, metadata)


def indexes_of(engine: sa.Engine, table: str) -> set[str]:
    return {index["name"] for index in sa.inspect(engine).get_indexes(table)}


def test_a_0_1_0_warehouse_upgrades_in_place_keeping_every_row(warehouse_url):
    engine = build_0_1_0_warehouse(warehouse_url)
    before = every_row(engine, metadata_0_1_0)
    assert "ix_jp_quarantine_status" not in indexes_of(engine, "jp_quarantine")

    upgrade = upgrade_warehouse(engine)

    assert (upgrade.before, upgrade.after, upgrade.adopted) == (None, head_revision(), True)
    assert "ix_jp_quarantine_status" in indexes_of(engine, "jp_quarantine")
    assert every_row(engine, metadata_0_1_0) == before
    assert all(before.values()), "the fixture must put a row in every table"
    assert differences(engine, framework_metadata) == []
    # Entries quarantined before signatures existed are signed by the upgrade (0004).
    with engine.connect() as connection:
        entries = connection.execute(sa.select(quarantine)).all()
    assert entries
    assert [entry.signature for entry in entries] == [
        failure_signature(
            entry.error_class,
            entry.error_type,
            entry.last_error,
            asset=entry.asset,
            partition=entry.partition,
        )
        for entry in entries
    ]


def test_revision_0001_is_exactly_the_schema_0_1_0_created(warehouse_url):
    engine = warehouse_engine(warehouse_url)

    run_alembic(engine, command.upgrade, BASELINE_REVISION)

    assert differences(engine, metadata_0_1_0) == []


def test_the_migrations_at_head_are_exactly_the_models(warehouse_url):
    """The autogenerate check: a change to the models without a revision fails here."""
    engine = warehouse_engine(warehouse_url)

    upgrade_warehouse(engine)

    assert differences(engine, framework_metadata) == []


def test_the_autogenerate_check_sees_a_model_change_without_a_revision(warehouse_url):
    engine = warehouse_engine(warehouse_url)

    run_alembic(engine, command.upgrade, BASELINE_REVISION)  # the models have indexes it lacks

    found = sorted(map(_named, differences(engine, framework_metadata)))
    assert found == [
        ("add_column", "jp_alert_ledger.next_try_at"),
        ("add_column", "jp_attempts.code_version"),
        ("add_column", "jp_attempts.fingerprint"),
        ("add_column", "jp_attempts.rule"),
        ("add_column", "jp_quarantine.code_version"),
        ("add_column", "jp_quarantine.fingerprint"),
        ("add_column", "jp_quarantine.signature"),
        ("add_index", "ix_jp_alert_notices_raised_at"),
        ("add_index", "ix_jp_backfill_holds_reason"),
        ("add_index", "ix_jp_change_reviews_partition"),
        ("add_index", "ix_jp_circuit_failures_signature"),
        ("add_index", "ix_jp_classification_rules_location"),
        ("add_index", "ix_jp_partitions_status"),
        ("add_index", "ix_jp_quarantine_signature"),
        ("add_index", "ix_jp_quarantine_status"),
        ("add_index", "ix_jp_reject_history_partition"),
        ("add_index", "ix_jp_requeues_partition"),
        ("add_table", "jp_alert_notices"),
        ("add_table", "jp_backfill_catalog"),
        ("add_table", "jp_backfill_holds"),
        ("add_table", "jp_backfill_pauses"),
        ("add_table", "jp_change_reviews"),
        ("add_table", "jp_circuit_failures"),
        ("add_table", "jp_circuits"),
        ("add_table", "jp_classification_rules"),
        ("add_table", "jp_notice_ledger"),
        ("add_table", "jp_reject_history"),
        ("add_table", "jp_rejected_rows"),
        ("add_table", "jp_requeues"),
    ]


def _named(difference: tuple) -> tuple[str, str]:
    """An autogenerate difference as (operation, what it names)."""
    operation = difference[0]
    if operation == "add_column":
        return operation, f"{difference[2]}.{difference[3].name}"
    return operation, difference[1].name


def test_upgrading_a_warehouse_at_head_changes_nothing(warehouse_url):
    engine = warehouse_engine(warehouse_url)
    first = upgrade_warehouse(engine)

    second = upgrade_warehouse(engine)

    assert (first.before, first.after) == (None, head_revision())
    assert (second.before, second.after) == (head_revision(), head_revision())


def test_every_revision_downgrades_and_upgrades_again(warehouse_url):
    engine = warehouse_engine(warehouse_url)
    upgrade_warehouse(engine)

    run_alembic(engine, command.downgrade, "base")
    assert set(sa.inspect(engine).get_table_names()) <= {VERSION_TABLE}
    upgrade_warehouse(engine)

    assert differences(engine, framework_metadata) == []


def test_a_warehouse_with_only_some_framework_tables_is_refused(warehouse_url):
    engine = warehouse_engine(warehouse_url)
    metadata_0_1_0.tables["jp_leases"].create(engine)

    with pytest.raises(SchemaNotReady, match="lacks jp_alert_ledger"):
        upgrade_warehouse(engine)


def test_every_migration_file_ships_in_the_package():
    """Alembic loads revisions by path: a file outside package-data breaks a wheel install."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["jobs_platform.store.migrations"]
    folder = Path(migrations.__file__).parent
    # Setuptools packs the package's own modules (env.py); everything else is data.
    data_files = [
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and (path.suffix != ".py" or path.parent != folder)
    ]

    assert data_files, "the revisions and the script template are data files"
    assert [name for name in data_files if not any(fnmatch(name, p) for p in patterns)] == []


def test_the_schema_check_never_changes_the_warehouse_not_even_the_embedded_default(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    engine = warehouse_engine(embedded_database_url())

    with pytest.raises(SchemaNotReady):
        check_schema(engine)

    assert sa.inspect(engine).get_table_names() == []


def test_only_the_embedded_default_is_made_ready_by_ensure(warehouse_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    embedded = warehouse_engine(embedded_database_url())
    other = warehouse_engine(warehouse_url)
    table = sa.Table("jp_test_items", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))

    assert ensure_embedded_schema(other, [table]) is False
    assert ensure_embedded_schema(embedded, [table]) is True

    assert schema_state(other).revision is None
    assert not sa.inspect(other).has_table("jp_test_items")
    assert schema_state(embedded).revision == head_revision()
    assert sa.inspect(embedded).has_table("jp_test_items")
    check_schema(embedded)


def test_an_upgrade_signs_entries_a_printed_script_left_unsigned(warehouse_url):
    engine = warehouse_engine(warehouse_url)
    upgrade_warehouse(engine)
    with engine.begin() as connection:  # as `db upgrade --sql`, applied by hand, leaves it
        connection.execute(
            sa.insert(quarantine).values(
                asset="orders",
                partition="2024-01-05",
                episode=1,
                status="quarantined",
                attempts=1,
                error_class="terminal",
                error_type="InputValidationError",
                last_error="line 3: not valid JSON",
                quarantined_at=sa.func.now(),
            )
        )

    upgrade_warehouse(engine)  # at head already: only the signing

    with engine.connect() as connection:
        [signature] = connection.execute(sa.select(quarantine.c.signature)).scalars()
    assert signature == failure_signature(
        "terminal",
        "InputValidationError",
        "line 3: not valid JSON",
        asset="orders",
        partition="2024-01-05",
    )
