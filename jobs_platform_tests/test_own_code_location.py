"""A team's own code location, outside this repository, with only the README's commands.

The test writes the package `acme` of README "Use it in your own project" into a
temporary folder — its own table with a composite natural key, its input read through a
`ConfigurableResource`, its code location built with `platform_definitions` — and drives
it with `jobs-platform … -m acme.defs` and `dagster … -m acme.defs` in real processes on
PostgreSQL: deploy, a crash after a committed chunk, a poison day (listed, shown, its
`dead_letter` partition and failed step suggesting the requeue in this location), status,
requeue.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.orchestration.tags import requeue_run_key
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import stored_materialization_metadata

README = Path(__file__).resolve().parents[1] / "README.md"
BIN = Path(sys.executable).parent
MODULE = "acme.defs"
ASSET = "acme_events_backfill"
GOOD, POISON = "2024-01-02", "2024-01-03"
CHUNK_ROWS = 4


def readme_code_location() -> str:
    """The `acme/defs.py` README shows, as written there."""
    section = README.read_text().split("## Use it in your own project", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def events(day: str, count: int, *, tenants=("north", "south")) -> list[dict]:
    """A day's events; (tenant, event_id) is unique across days, as a natural key must be."""
    first_id = int(day.replace("-", "")) * 1000
    return [
        {"tenant": tenants[n % 2], "event_id": first_id + n // 2, "amount_cents": 100 + n}
        for n in range(count)
    ]


def write_csv(landing: Path, day: str, rows: list[dict], *, poison_line: int | None = None):
    path = landing / "events" / f"{day}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["tenant", "event_id", "amount_cents"])
        writer.writeheader()
        for index, row in enumerate(rows):
            bad = index == poison_line
            writer.writerow({**row, "amount_cents": "twelve" if bad else row["amount_cents"]})


@pytest.fixture
def acme(pg_url, tmp_path) -> dict[str, str]:
    """The package on PYTHONPATH, a warehouse, a landing folder and a Dagster home."""
    package = tmp_path / "project" / "acme"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(readme_code_location())
    (tmp_path / "project" / "workspace.yaml").write_text(
        f"load_from:\n  - python_module: {MODULE}\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "ACME_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(home),
        "JOBS_PLATFORM_LEASE_SECONDS": "10",
        "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.2",
    }


def jobs_platform(env, *args: str):
    return run_cli([str(BIN / "jobs-platform"), *args], env)


def concurrently(*commands: list, env: dict[str, str]) -> list:
    """Run the commands at once, each in its own process; their results in order."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: run_cli([str(a) for a in command], env), commands))


def materialize(env, day: str, **extra: str):
    config = {"ops": {ASSET: {"config": {"chunk_rows": CHUNK_ROWS}}}}
    return run_cli(
        [
            str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", ASSET,
            "--partition", day, "--config-json", json.dumps(config),
        ],
        {**env, **extra},
    )  # fmt: skip


def dead_letter_partition_in(env, entry_id: int) -> dict:
    """The metadata of the entry's `dead_letter` partition, materialized in the location."""
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        instance.add_dynamic_partitions("dead_letter_entries", [str(entry_id)])
    ok(
        run_cli(
            [str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select",
             "dead_letter", "--partition", str(entry_id)],
            env,
        )
    )  # fmt: skip
    return stored_materialization_metadata(env, "dead_letter", str(entry_id))


def failed_step_metadata(env) -> dict:
    """The metadata of the one failed step's failure event in the env's instance."""
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [failed] = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        [failure] = instance.all_logs(failed.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    metadata = failure.dagster_event.step_failure_data.user_failure_data.metadata
    return {name: value.value for name, value in metadata.items()}


def table_rows(url: str) -> list[tuple]:
    with sa.create_engine(url).connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                sa.text(
                    "SELECT tenant, event_id, day::text, amount_cents FROM acme_events "
                    "ORDER BY day, tenant, event_id"  # days apart, then as `expected_rows`
                )
            )
        ]


def expected_rows(day: str, rows: list[dict]) -> list[tuple]:
    """The table's rows for a day's input, in `table_rows`' order."""
    return sorted((r["tenant"], r["event_id"], day, r["amount_cents"]) for r in rows)


def ok(completed) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


@pytest.mark.slow
def test_a_code_location_of_its_own_gets_every_guarantee_with_the_readme_commands(acme, pg_url):
    env = acme
    # Deploy: the framework's tables, then the location's own.
    assert "acme_events" in ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    # Reads of the deployed location, each in its own process: run side by side (the
    # upgrade created the instance's storage, so no two of them race to create it).
    checked, listed, sensors = concurrently(
        [BIN / "jobs-platform", "db", "check", "-m", MODULE],
        [BIN / "dagster", "asset", "list", "-m", MODULE],
        [BIN / "dagster", "sensor", "list", "-m", MODULE],
        env=env,
    )
    ok(checked)
    assert {"dead_letter", "platform_health", ASSET} <= set(ok(listed).split())
    assert "dead_letter_sensor" in ok(sensors)

    # A crash inside the partition's one commit (its only chunk commits with finalize):
    # nothing of it stands; Dagster retries the step in a new process, which records the
    # crash and writes the partition; every row lands once.
    landing = Path(env["ACME_LANDING"])
    good_rows = events(GOOD, 10)
    write_csv(landing, GOOD, good_rows)
    ok(materialize(env, GOOD, JOBS_PLATFORM_FAILPOINTS=f"before_commit@{ASSET}#0=crash*1"))
    assert table_rows(pg_url) == expected_rows(GOOD, good_rows)
    engine = sa.create_engine(pg_url)
    history = [(row.outcome, row.error_class) for row in attempts_of(engine, ASSET, GOOD)]
    assert history[0][1] == "crash" and history[1][0] == "succeeded", history
    assert len(history) == 2  # the killed attempt, then the one that finished

    # A poison day: quarantined after one attempt, listed, shown in status.
    poison_rows = events(POISON, 6)
    write_csv(landing, POISON, poison_rows, poison_line=3)
    assert materialize(env, POISON).returncode == 1
    assert len(attempts_of(engine, ASSET, POISON)) == 1
    dead_letter, status, shown = concurrently(
        [BIN / "jobs-platform", "dead-letter", "list", "-m", MODULE, "--json"],
        [BIN / "jobs-platform", "status", "-m", MODULE, "--json"],
        [BIN / "jobs-platform", "dead-letter", "show", "-m", MODULE, ASSET, POISON, "--json"],
        env=env,
    )
    (entry,) = json.loads(ok(dead_letter))
    assert (entry["asset"], entry["partition"], entry["attempts"]) == (ASSET, POISON, 1)
    assert entry["error_class"] == "terminal" and '"twelve"' in entry["last_error"]
    status = json.loads(ok(status))
    assert ASSET in json.dumps(status) and "orders" not in json.dumps(status)
    # The failed step and the entry's `dead_letter` partition suggest the requeue in this
    # location, as its runs were launched from it.
    entry_id = json.loads(ok(shown))["entry"]["id"]
    suggested = f"jobs-platform dead-letter requeue -m {MODULE} {ASSET} {POISON}"
    assert dead_letter_partition_in(env, entry_id)["requeue"] == suggested
    assert failed_step_metadata(env)["requeue"] == suggested

    # The input is fixed; a requeue completes the partition.
    write_csv(landing, POISON, poison_rows)
    # No daemon here: the command runs the requeue's run itself, and returns once it ended.
    requeued = ok(
        jobs_platform(env, "dead-letter", "requeue", "-m", MODULE, ASSET, POISON, "--wait")
    )
    assert f"{requeue_run_key(entry_id)}: succeeded" in requeued
    assert json.loads(ok(jobs_platform(env, "dead-letter", "list", "-m", MODULE, "--json"))) == []
    assert table_rows(pg_url) == expected_rows(GOOD, good_rows) + expected_rows(POISON, poison_rows)
