"""`jobs-platform status` answers from the backfill catalog, without Dagster or the location.

The catalog (`jp_backfill_catalog`) is written by `jobs-platform db upgrade` and by the
`platform_health` asset; status reads it, says how old it is, and loads the location when
the warehouse has none. Real PostgreSQL. What a process imports, and the asset run by
`dagster asset materialize`, are checked in real processes; the rest runs the CLI's
`main` in this process (`cli_in_process`: the same code, without starting Python and
importing Dagster and the location again for each command).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading

import dagster as dg
import sqlalchemy as sa

from jobs_platform.store.catalog import (
    CATALOG_STALE_AFTER_SECONDS,
    Catalog,
    CatalogEntry,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import backfill_catalog
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.commands import ACME, DAGSTER, run_cli
from jobs_platform_tests.databases import upgraded_warehouse
from jobs_platform_tests.environments import EXAMPLE_MODULE, platform_environment
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.store.factories import a_quarantine_entry
from orders_example.orders.assets import daily_partitions, daily_revenue, orders
from orders_example.orders.seed import seed_orders

EXAMPLE = EXAMPLE_MODULE
# The bundled location's backfills, as the catalog lists them (by asset key).
EXAMPLE_BACKFILLS = ["customer_order_history", "daily_revenue", "orders"]
FIRST = dt.date(2024, 6, 1)
POISON = dt.date(2024, 6, 3)
# What importing these means: Dagster, or a code location (the bundled one, the examples).
LOCATION_MODULES = ("dagster", "orders_example.definitions", "orders_example", ACME)


def catalog_rows(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(backfill_catalog).order_by(
                    backfill_catalog.c.location, backfill_catalog.c.position
                )
            )
        )


def cli_json(*args: str, env: dict[str, str]) -> dict:
    finished = jobs_platform_in_process([*args, "--json"], env)
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout)


def cli_text(*args: str, env: dict[str, str]) -> str:
    finished = jobs_platform_in_process(args, env)
    assert finished.returncode == 0, finished.stderr
    return finished.stdout


def deploy(env: dict[str, str], *module: str) -> None:
    finished = jobs_platform_in_process(["db", "upgrade", *module], env)
    assert finished.returncode == 0, finished.stderr


def imported_modules(args: list[str], env: dict[str, str]) -> tuple[set[str], str]:
    """The modules a `jobs-platform ARGS…` process imported (`-X importtime`), and its stdout."""
    command = [sys.executable, "-X", "importtime", "-m", "jobs_platform.cli.main", *args]
    finished = run_cli(command, env)
    assert finished.returncode == 0, finished.stderr.splitlines()[-1]
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in finished.stderr.splitlines()
        if line.startswith("import time:")
    }
    return names, finished.stdout


def of_a_location(modules: set[str]) -> list[str]:
    return sorted(
        name
        for name in modules
        if any(name == root or name.startswith(f"{root}.") for root in LOCATION_MODULES)
    )


def test_db_upgrade_writes_the_catalog_of_its_location(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)

    deploy(env)

    rows = catalog_rows(warehouse_engine(pg_url))
    assert [(row.location, row.asset, row.position) for row in rows] == [
        (EXAMPLE, asset, position) for position, asset in enumerate(EXAMPLE_BACKFILLS)
    ]
    by_asset = {row.asset: row for row in rows}
    every_day = daily_partitions.get_partition_keys()
    assert by_asset["orders"].partition_count == len(every_day)
    # A daily backfill is held as its window, not its keys (they sort as their days do).
    assert (by_asset["orders"].first_key, by_asset["orders"].last_key) == (
        every_day[0],
        every_day[-1],
    )
    assert json.loads(by_asset["orders"].partition_keys) == []
    assert by_asset["orders"].partitions_kind == "time_window"
    assert by_asset["orders"].max_partitions_per_run == 30
    assert by_asset["orders"].target_table == "orders"
    assert by_asset["customer_order_history"].partitions_kind == "dynamic"
    with warehouse_engine(pg_url).connect() as connection:
        now = connection.execute(sa.text("SELECT now()")).scalar_one()
    assert dt.timedelta(0) <= now - rows[0].updated_at < dt.timedelta(minutes=5)


def test_status_from_the_catalog_equals_status_from_the_location(pg_platform_env):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], FIRST, POISON, poison_days=[POISON])
    for day in (FIRST, FIRST + dt.timedelta(days=1), POISON):
        materialize([orders, daily_revenue], day.isoformat())
    with dg.DagsterInstance.get() as instance:  # dynamic keys: the catalog reads them too
        instance.add_dynamic_partitions("customers", ["101", "102"])
    deploy(pg_platform_env)

    from_catalog = cli_json("status", env=pg_platform_env)
    from_location = cli_json("status", "--load-location", env=pg_platform_env)

    assert from_catalog["source"] == "catalog" and from_location["source"] == "location"
    assert from_catalog["catalog_stale"] is False
    assert 0 <= from_catalog["catalog_age_seconds"] < CATALOG_STALE_AFTER_SECONDS
    figures = ("assets", "oldest_pending_request_age_seconds")
    assert {name: from_catalog[name] for name in figures} == {
        name: from_location[name] for name in figures
    }
    assert list(from_catalog["assets"]) == EXAMPLE_BACKFILLS
    assert [from_catalog["assets"]["orders"][name] for name in ("done", "quarantined")] == [2, 1]
    assert from_catalog["assets"]["customer_order_history"]["missing"] == 2
    text = cli_text("status", env=pg_platform_env)
    assert text.strip().splitlines()[-1].startswith(f"from the catalog of {EXAMPLE}, written ")


def test_status_from_the_catalog_imports_neither_dagster_nor_the_location(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)
    deploy(env)

    modules, out = imported_modules(["status", "--json"], env)

    assert json.loads(out)["source"] == "catalog"
    assert of_a_location(modules) == []
    assert "jobs_platform.store.catalog" in modules  # the check sees what was imported
    # The schema check is one query of the version table; nothing reads a DataFrame.
    assert {"alembic", "mako", "numpy", "pandas"} & modules == set()


def test_the_read_only_commands_import_neither_dagster_nor_the_location(pg_url, tmp_path):
    # No code location named: they read the environment's warehouse.
    env = platform_environment(pg_url, tmp_path, JOBS_PLATFORM_MODULE="")
    with upgraded_warehouse(pg_url).begin() as connection:
        a_quarantine_entry(connection, asset="orders", partition="2024-06-01")

    for args in (
        ["dead-letter", "list", "--json"],
        ["dead-letter", "groups", "--json"],
        ["dead-letter", "show", "orders", "2024-06-01"],
        ["outbox", "list", "--json"],
    ):
        modules, _ = imported_modules(args, env)
        assert of_a_location(modules) == [], args
        assert {"alembic", "numpy"} & modules == set(), args
    status = ["status", "-m", EXAMPLE_MODULE, "--load-location", "--json"]
    modules, _ = imported_modules(status, env)
    assert "dagster" in modules  # the check sees Dagster when it is imported


def test_the_platform_health_asset_writes_the_catalog_of_its_location(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)
    deploy(env)
    engine = warehouse_engine(pg_url)
    with engine.begin() as connection:  # as if deployed long ago, with a backfill since gone
        connection.execute(
            sa.update(backfill_catalog).values(updated_at=sa.text("now() - interval '1 day'"))
        )
        connection.execute(
            sa.update(backfill_catalog)
            .where(backfill_catalog.c.asset == "orders")
            .values(asset="orders_retired")
        )

    finished = run_cli(
        [DAGSTER, "asset", "materialize", "-m", EXAMPLE, "--select", "platform_health"], env
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = catalog_rows(engine)
    assert [row.asset for row in rows] == EXAMPLE_BACKFILLS
    status = cli_json("status", env=env)
    assert status["source"] == "catalog" and status["catalog_age_seconds"] < 300
    assert list(status["assets"]) == EXAMPLE_BACKFILLS


def test_a_catalog_older_than_its_limit_is_reported_stale(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)
    deploy(env)
    late = CATALOG_STALE_AFTER_SECONDS + 60
    with warehouse_engine(pg_url).begin() as connection:
        connection.execute(
            sa.update(backfill_catalog).values(
                updated_at=sa.text(f"now() - interval '{late} seconds'")
            )
        )

    report = cli_json("status", env=env)
    text = cli_text("status", env=env)

    assert report["source"] == "catalog" and report["catalog_stale"] is True
    assert report["catalog_age_seconds"] >= late
    [note] = [line for line in text.splitlines() if "catalog" in line]
    assert note.startswith(f"STALE: from the catalog of {EXAMPLE} written 16 min ago (over 15 min)")
    assert note.endswith(
        f"materialize platform_health, or run: jobs-platform db upgrade -m {EXAMPLE}"
    )


def test_without_a_catalog_status_loads_the_location_and_says_so(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)
    upgraded_warehouse(pg_url)  # the tables, but no deploy of the location

    report = cli_json("status", env=env)
    text = cli_text("status", env=env)

    assert report["source"] == "location"
    assert (report["catalog_updated_at"], report["catalog_stale"]) == (None, None)
    assert sorted(report["assets"]) == EXAMPLE_BACKFILLS  # in the graph's order, which varies
    assert (
        text.strip()
        .splitlines()[-1]
        .startswith(f"no catalog of {EXAMPLE} in this warehouse: loaded the code location instead")
    )


def test_two_locations_sharing_a_warehouse_keep_their_own_catalog_rows(pg_url, tmp_path):
    env = platform_environment(pg_url, tmp_path)
    deploy(env, "-m", ACME)
    deploy(env)
    engine = warehouse_engine(pg_url)
    acme_written = [row.updated_at for row in catalog_rows(engine) if row.location == ACME]

    deploy(env)  # the example's location again: ACME's rows are left alone

    rows = catalog_rows(engine)
    assert [(row.location, row.asset) for row in rows] == [
        (ACME, "acme_events"),  # in the order of the locations' names
        *((EXAMPLE, asset) for asset in EXAMPLE_BACKFILLS),
    ]
    assert [row.updated_at for row in rows if row.location == ACME] == acme_written
    acme = cli_json("status", "-m", ACME, env=env)
    assert (acme["source"], list(acme["assets"])) == ("catalog", ["acme_events"])
    assert list(cli_json("status", env=env)["assets"]) == EXAMPLE_BACKFILLS


def test_concurrent_writers_of_one_location_each_replace_its_rows_whole(pg_url):
    engine = upgraded_warehouse(pg_url)
    errors: list[BaseException] = []

    def writer(keys: tuple[str, ...]) -> None:
        try:
            for _ in range(15):
                Catalog(engine, DATABASE_CLOCK).write(
                    "shop", [CatalogEntry("a", "static", keys), CatalogEntry("b", "static", keys)]
                )
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(keys,)) for keys in (("x",), ("y", "z"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    with engine.connect() as connection:
        catalog = Catalog(connection.engine, DATABASE_CLOCK).read(connection, "shop")
    assert catalog is not None
    assert [entry.asset for entry in catalog.entries] == ["a", "b"]
    assert catalog.entries[0].partition_keys == catalog.entries[1].partition_keys
