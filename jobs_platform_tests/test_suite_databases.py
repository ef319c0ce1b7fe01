"""The suite's own warehouses: a copy of a template is what the upgrade leaves an empty one."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import schema_state
from jobs_platform_tests.databases import prepare_warehouse, upgraded_warehouse


def schema_of(url: str) -> dict[str, tuple]:
    """Every table's columns, primary key, indexes and constraints, comparable across databases."""
    engine = warehouse_engine(url)
    inspector = sa.inspect(engine)
    schema = {}
    for table in inspector.get_table_names():
        schema[table] = (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            inspector.get_pk_constraint(table)["constrained_columns"],
            sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)),
            sorted(str(c["sqltext"]) for c in inspector.get_check_constraints(table)),
            sorted(
                (tuple(f["constrained_columns"]), f["referred_table"])
                for f in inspector.get_foreign_keys(table)
            ),
        )
    return schema


def test_a_copy_of_the_upgraded_template_is_what_the_upgrade_leaves_an_empty_database(
    pg_url, upgraded_pg_url
):
    upgraded_warehouse(pg_url)

    assert schema_of(upgraded_pg_url) == schema_of(pg_url)
    assert schema_state(warehouse_engine(upgraded_pg_url)).at_head


def test_a_copy_of_the_deployed_template_is_what_a_deploy_leaves_an_empty_database(
    pg_url, deployed_pg_url
):
    prepare_warehouse(pg_url)

    assert schema_of(deployed_pg_url) == schema_of(pg_url)
    assert "orders" in schema_of(deployed_pg_url)
    assert schema_state(warehouse_engine(deployed_pg_url)).at_head
