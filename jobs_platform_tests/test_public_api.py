"""The public surface: what a code location imports is `jobs_platform.__all__`, and the
orders example (examples/orders) — a code location like any user's — imports nothing else of
the package."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

import jobs_platform

PACKAGE_ROOT = Path(jobs_platform.__file__).parent
# The orders example (examples/orders) is a user: it imports only the public surface.
EXAMPLE_ROOT = PACKAGE_ROOT.parent / "examples" / "orders" / "orders_example"
# Its commands (`orders-example seed|demo`) are tooling around the location, not part of
# it: the demo reads the framework's tables to print its summary.
EXAMPLE_COMMANDS = {"orders_example.__main__", "orders_example.demo", "orders_example.seed_command"}


def module_files(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def test_every_public_name_resolves():
    for name in jobs_platform.__all__:
        assert getattr(jobs_platform, name) is not None, name


def _type_checking_imports() -> dict[str, str]:
    """The names `jobs_platform/__init__.py` imports under `if TYPE_CHECKING:`, by home."""
    tree = ast.parse((PACKAGE_ROOT / "__init__.py").read_text())
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.name: node.module
        for block in blocks
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_a_type_checker_sees_every_public_name_where_it_lives():
    assert sorted(jobs_platform._HOMES) == sorted(jobs_platform.__all__)
    assert _type_checking_imports() == jobs_platform._HOMES


def test_the_public_names_and_the_dead_letter_list_import_neither_dagster_nor_pandas(
    pg_platform_env,
):
    code = (
        "import sys\n"
        "import jobs_platform\n"
        "from jobs_platform import (InputValidationError, RetryableError, TerminalError,\n"
        "    UtcDateTime, create_user_tables, request_backfill)\n"
        "from jobs_platform.cli.main import main\n"
        "assert main(['dead-letter', 'list']) == 0\n"
        "print(sorted({'dagster', 'pandas'} & set(sys.modules)))\n"
    )
    # No code location named: the listing reads the environment's warehouse.
    env = {**os.environ, "JOBS_PLATFORM_MODULE": ""}
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == "[]", completed.stdout


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'engine_internals'"):
        jobs_platform.engine_internals  # noqa: B018


def framework_imports(path) -> list[str]:
    """The package's modules a file imports, other than `jobs_platform` itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [name for name in names if name.startswith("jobs_platform.")]
    return found


def test_the_examples_import_only_the_public_surface():
    examples = {
        name: path
        for name, path in module_files(EXAMPLE_ROOT).items()
        if name not in EXAMPLE_COMMANDS
    }
    assert examples, f"no examples found under {EXAMPLE_ROOT}"
    reaching_in = {name: framework_imports(path) for name, path in examples.items()}
    assert {name: found for name, found in reaching_in.items() if found} == {}


def test_the_check_sees_an_import_of_an_internal_module(tmp_path):
    source = tmp_path / "user.py"
    source.write_text("from jobs_platform.store.schema import UtcDateTime\nimport jobs_platform\n")
    assert framework_imports(source) == ["jobs_platform.store.schema"]


class Landing(dg.ConfigurableResource):
    root: str = "/landing"


def test_backfill_asset_speaks_dagsters_vocabulary():
    table = sa.Table(
        "vocabulary_events",
        sa.MetaData(),
        sa.Column("tenant", sa.String, primary_key=True),
        sa.Column("event_id", sa.Integer, primary_key=True),
        sa.Column("value", sa.Integer),
    )
    upstream = dg.AssetSpec("raw_events")

    @jobs_platform.backfill_asset(
        table=table,
        partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
        partition_scope=lambda t, partition: t.c.tenant == partition,
        natural_key=["tenant", "event_id"],
        code_version="3",
        deps=[upstream, "other/asset"],
        owners=["team:data-platform"],
        tags={"domain": "events"},
        metadata={"source": "landing"},
        kinds={"postgres"},
        pool="warehouse_writes",
        retry_policy=dg.RetryPolicy(max_retries=2, delay=7),
    )
    def vocabulary_events(source: jobs_platform.PartitionInput, landing: Landing):
        """Events of one day."""
        yield from ()

    spec = vocabulary_events.specs_by_key[dg.AssetKey("vocabulary_events")]
    assert spec.code_version == "3"
    assert {dep.asset_key for dep in spec.deps} == {
        dg.AssetKey("raw_events"),
        dg.AssetKey(["other", "asset"]),
    }
    assert spec.owners == ["team:data-platform"]
    assert spec.tags["domain"] == "events" and spec.tags["jobs_platform/backfill"] == "true"
    assert spec.metadata["natural_key"] == "tenant, event_id"
    assert spec.metadata["source"] == "landing"
    assert spec.kinds == {"postgres"}
    assert vocabulary_events.op.pool == "warehouse_writes"
    assert vocabulary_events.op.retry_policy.delay == 7
    assert vocabulary_events.op.retry_policy.max_retries >= 25  # the crash ceiling's share
    assert "landing" in vocabulary_events.op.required_resource_keys


def test_a_reader_parameter_that_is_not_a_resource_is_refused():
    table = sa.Table("refused_events", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))

    with pytest.raises(TypeError, match=r"\['limit'\] are not"):

        @jobs_platform.backfill_asset(
            table=table,
            partitions_def=dg.StaticPartitionsDefinition(["a"]),
            partition_scope=lambda t, partition: t.c.id > 0,
        )
        def refused_events(source: jobs_platform.PartitionInput, limit: int):
            yield from ()
