"""What a backfill's `defs.yaml` may say: a mistake is refused as it is read, naming it."""

from __future__ import annotations

import copy
import re

import pydantic
import pytest
import yaml

from jobs_platform.component.declaration import BackfillDeclaration
from jobs_platform_tests.commands import REPO_ROOT

DECLARED = {
    "key": "orders",
    "table": {
        "name": "orders",
        "columns": [
            {"name": "order_id", "type": "bigint"},
            {"name": "amount_cents", "type": "bigint", "nullable": False},
            {"name": "ordered_at", "type": "timestamp"},
        ],
    },
    "natural_key": ["order_id"],
    "partition_column": "ordered_at",
    "partitions": {"type": "daily", "start_date": "2024-01-01"},
    "source": {
        "kind": "sql",
        "url_env": "ORDERS_SOURCE_URL",
        "query": "SELECT * FROM raw WHERE at >= :start AND at < :end AND at::date = at::date",
    },
}


def declared(**changes) -> dict:
    """The declaration above with `changes` applied (`source__query=…` reaches into source)."""
    declaration = copy.deepcopy(DECLARED)
    for path, value in changes.items():
        *parents, name = path.split("__")
        target = declaration
        for parent in parents:
            target = target[parent]
        target[name] = value
    return declaration


def refusal(**changes) -> str:
    with pytest.raises(pydantic.ValidationError) as refused:
        BackfillDeclaration.model_validate(declared(**changes))
    return str(refused.value)


def test_a_whole_declaration_is_read():
    declaration = BackfillDeclaration.model_validate(DECLARED)
    assert declaration.source.parameters() == {"start", "end"}  # `::date` is a cast


def test_a_natural_key_that_names_no_column_is_refused():
    assert "natural_key names no column of the table: ['id']" in refusal(natural_key=["id"])


def test_a_bind_parameter_the_partition_cannot_fill_is_refused():
    query = "SELECT * FROM raw WHERE day = :day"
    assert "bind parameters ['day'] are not the partition's" in refusal(source__query=query)


def test_static_partitions_have_no_window_to_bind():
    message = refusal(
        partitions={"type": "static", "partition_keys": ["eu", "us"]},
        table__columns=[
            {"name": "order_id", "type": "bigint"},
            {"name": "region", "type": "string"},
        ],
        partition_column="region",
    )
    assert "['end', 'start'] are not the partition's" in message


def test_the_source_url_is_named_by_a_variable_never_written():
    message = refusal(source__url_env="postgresql://user:secret@db/orders")
    assert "the name of an environment variable" in message


def test_a_file_pattern_reaches_no_attribute_of_a_field():
    files = {"kind": "files", "root": "/landing", "path": "{start.__class__}.csv"}
    assert "is not a plain field" in refusal(source=files)


def test_a_time_window_needs_a_date_or_timestamp_partition_column():
    assert "need a date or timestamp column, not bigint" in refusal(partition_column="order_id")


def test_an_unknown_field_is_a_mistake_not_ignored():
    assert "Extra inputs are not permitted" in refusal(table__primary_key=["order_id"])


def test_a_code_version_rendered_as_a_number_is_its_text():
    # Dagster renders `code_version: "2"` as a template, into the number 2.
    assert BackfillDeclaration.model_validate(declared(code_version=2)).code_version == "2"


@pytest.mark.parametrize("page", ["README.md", "docs/component.md"])
def test_the_documented_declarations_are_read(page):
    text = (REPO_ROOT / page).read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    backfills = [
        block for block in blocks if str(block.get("type", "")).endswith(".BackfillComponent")
    ]
    assert backfills, page
    for block in backfills:
        BackfillDeclaration.model_validate(block["attributes"])
