"""`orders-example demo`: a real backfill through Dagster on the embedded default.

Seeds a week of orders with one poison day, injects a transient fault into another day,
runs every partition of `orders_backfill` through Dagster and prints what succeeded, what
was retried and what was quarantined.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
from pathlib import Path

import sqlalchemy as sa

from jobs_platform.settings import Settings
from jobs_platform.suggested_commands import show_command, suggested_command

# The example's code location: what the demo runs unless `-m` names another.
CODE_LOCATION_MODULE = "orders_example.definitions"
DEMO_START = dt.date(2024, 1, 1)
DEMO_END = dt.date(2024, 1, 7)
DEMO_POISON = dt.date(2024, 1, 4)
DEMO_FLAKY = dt.date(2024, 1, 2)
DEMO_CHUNK_ROWS = 100
DEMO_JOB = "orders_backfill"
DEMO_BACKFILLS = ("orders", "daily_revenue")


def register(commands) -> None:
    parser = commands.add_parser("demo", help="run the demo backfill on the embedded default")
    parser.add_argument(
        "-m",
        "--module",
        metavar="MODULE",
        default=None,
        help=f"a code location serving {DEMO_JOB!r} (default {CODE_LOCATION_MODULE})",
    )
    parser.add_argument("--orders-per-day", type=int, default=400, metavar="N")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    _prepare_environment()
    settings = Settings.from_env()
    import dagster as dg

    from jobs_platform.location import load_definitions
    from jobs_platform.orchestration.chains import backfill_run_config
    from jobs_platform.store.db import redact_url
    from jobs_platform.store.migrate import ready_warehouse
    from orders_example.orders.seed import iter_days, seed_orders

    # The demo seeds orders and runs their job: a location of its own (`-m`) must serve
    # `orders_backfill`, as the example's does. Checked before anything is written.
    module = args.module or CODE_LOCATION_MODULE
    definitions = load_definitions(module)
    if not definitions.get_repository_def().has_job(DEMO_JOB):
        raise LookupError(
            f"code location {module} has no job {DEMO_JOB!r}: "
            f"the demo runs the orders example's job ({CODE_LOCATION_MODULE})"
        )
    days = [day.isoformat() for day in iter_days(DEMO_START, DEMO_END)]
    # The embedded default upgrades itself here; another warehouse must have been upgraded.
    ready_warehouse(settings.database_url)
    print(f"warehouse: {redact_url(settings.database_url)}")
    print(f"landing:   {settings.landing_root}")
    print(f"dagster:   {os.environ['DAGSTER_HOME']}\n")
    seed_orders(
        settings.landing_root, DEMO_START, DEMO_END,
        orders_per_day=args.orders_per_day, poison_days=[DEMO_POISON],
    )  # fmt: skip
    print(
        f"seeded {len(days)} days x {args.orders_per_day} orders; {DEMO_POISON} has malformed "
        f"lines; {DEMO_FLAKY} fails twice with a transient fault, then recovers\n"
    )
    job = definitions.resolve_job_def(DEMO_JOB)
    run_config = {
        # Where each backfill's run config goes (in the example's location, a chain's op).
        **backfill_run_config(
            [definitions.get_assets_def(asset) for asset in DEMO_BACKFILLS],
            {asset: {"chunk_rows": DEMO_CHUNK_ROWS} for asset in DEMO_BACKFILLS},
        ),
        # The run's full event log is in the UI; the terminal gets one line per day.
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }
    with dg.DagsterInstance.get() as instance:
        for number, day in enumerate(days, start=1):
            began = time.monotonic()
            result = job.execute_in_process(
                partition_key=day, instance=instance, run_config=run_config, raise_on_error=False
            )
            verdict = "ok" if result.success else "FAILED"
            print(
                f"[{number}/{len(days)}] {day}  {verdict:<6} {time.monotonic() - began:5.1f}s  "
                f"run {result.run_id[:8]}",
                flush=True,
            )
    _print_summary(settings, days, module)
    return 0


def _prepare_environment() -> None:
    state = Path.cwd() / ".jobs_platform"
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(state / "dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # Short waits keep the demo quick; a real deployment keeps the 2 s default.
    os.environ.setdefault("JOBS_PLATFORM_RETRY_DELAY_SECONDS", "0.5")
    os.environ["JOBS_PLATFORM_FAILPOINTS"] = f"read@orders/{DEMO_FLAKY}#1=transient*2"


def _print_summary(settings: Settings, days: list[str], module: str) -> None:
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.store.schema import attempts, partitions, quarantine

    engine = warehouse_engine(settings.database_url)
    with engine.connect() as connection:
        status = dict(
            connection.execute(
                sa.select(partitions.c.partition, partitions.c.status).where(
                    partitions.c.asset == "orders", partitions.c.partition.in_(days)
                )
            ).all()
        )
        retried = sorted(
            connection.execute(
                sa.select(attempts.c.partition)
                .where(
                    attempts.c.asset == "orders",
                    attempts.c.partition.in_(days),
                    attempts.c.error_class == "retryable",
                )
                .distinct()
            ).scalars()
        )
        quarantined = connection.execute(
            sa.select(quarantine).where(
                quarantine.c.status == "quarantined", quarantine.c.partition.in_(days)
            )
        ).all()
        order_rows = connection.execute(sa.text("SELECT count(*) FROM orders")).scalar_one()
        revenue_rows = connection.execute(
            sa.text("SELECT count(*) FROM daily_revenue")
        ).scalar_one()
    done = [day for day in days if status.get(day) == "done"]
    print("\nsummary")
    print(f"  succeeded:   {len(done)} of {len(days)} days: {', '.join(done)}")
    print(f"  retried:     {', '.join(retried) or 'none'} (transient fault, then success)")
    for entry in quarantined:
        print(
            f"  quarantined: {entry.asset}/{entry.partition} after {entry.attempts} attempt(s), "
            f"{entry.error_class}: {entry.last_error}"
        )
    print(f"  warehouse:   {order_rows} rows in orders, {revenue_rows} rows in daily_revenue")
    print("\nwhere to look")
    print(f"  {suggested_command('dead-letter', 'list', '-m', module)}")
    if quarantined:
        first = quarantined[0]
        print(f"  {show_command(first.asset, first.partition, module)}")
    print(f"  DAGSTER_HOME={os.environ['DAGSTER_HOME']} dagster dev   (then open")
    print("  http://127.0.0.1:3000 > Catalog > orders > Partitions, and dead_letter)")
