"""README "From the command line and CI", pasted into a shell as it is written.

Each command of the block runs in bash, in order, with the project's `.venv/bin` first on
the `PATH` (as after `source .venv/bin/activate`) and the warehouse, landing folder and
Dagster home of the test. The block seeds a week with a poison day: the commands over a
single day exit 0, the range (`dagster job execute` with Dagster's range tags) exits 1
(the poison day is quarantined), and in the end every other day of both tables equals a
reference computed from the landing files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import dagster as dg
import pytest

from jobs_platform.store.schema import quarantine
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import declared_rows
from jobs_platform_tests.test_isolation import orders_of
from orders_example.orders.assets import revenue_of_day
from orders_example.orders.tables import daily_revenue_table, orders_table

README = Path(__file__).resolve().parents[1] / "docs" / "operating.md"
BIN = Path(sys.executable).parent


def cli_block() -> list[str]:
    """The commands of the block, each with its continuation lines joined."""
    section = README.read_text().split("### From the command line and CI", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [command.strip() for command in block.replace("\\\n", " ").splitlines() if command]


@pytest.mark.slow
def test_the_readme_command_line_block_works_when_pasted(pg_platform_env, tmp_path):
    import sqlalchemy as sa

    env = {**pg_platform_env, "PATH": f"{BIN}:/usr/bin:/bin"}
    commands = cli_block()
    seed = commands[0]
    assert seed.startswith("orders-example seed "), seed
    # The bundled backfills keep the default policy, under which Dagster's CLI refuses
    # `--partition-range` (test_partition_range_cli): the block's range is the job's tags.
    assert not any("--partition-range" in command for command in commands)
    assert sum("asset_partition_range_start" in command for command in commands) == 1
    first, last = re.search(r"--start (\S+) --end (\S+)", seed).groups()
    poison = re.search(r"--poison (\S+)", seed).group(1)

    for command in commands:
        finished = run_cli(["bash", "-c", command], env, cwd=tmp_path)
        # A range holds the poison day, so its run fails; a single day's succeeds.
        ranged = "asset_partition_range_start" in command
        expected = 1 if ranged else 0
        assert finished.returncode == expected, (
            f"{command}\n{finished.stdout[-2000:]}\n{finished.stderr[-3000:]}"
        )

    engine = engine_from(pg_platform_env)
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    days = dg.DailyPartitionsDefinition(start_date=first).get_partition_keys_in_range(
        dg.PartitionKeyRange(first, last)
    )
    assert poison in days and len(days) == 7
    for day in days:
        if day == poison:
            continue
        expected_orders, expected_revenue = expected_tables_from_landing(landing, day)
        assert declared_rows(engine, orders_table, orders_of(day)) == expected_orders, day
        where = revenue_of_day(daily_revenue_table, day)
        assert declared_rows(engine, daily_revenue_table, where) == expected_revenue, day
    with engine.connect() as connection:
        entries = connection.execute(sa.select(quarantine.c.asset, quarantine.c.partition)).all()
    assert [tuple(entry) for entry in entries] == [("orders", poison)]
    poisoned = revenue_of_day(daily_revenue_table, poison)
    assert declared_rows(engine, daily_revenue_table, poisoned) == []
