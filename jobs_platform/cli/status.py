"""`jobs-platform status`: per backfill asset, where its partitions stand."""

from __future__ import annotations

import argparse
import json

from jobs_platform.location import add_module_option


def register(commands) -> None:
    parser = commands.add_parser("status", help="health of every backfill at a glance")
    add_module_option(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from jobs_platform.cli.warehouse import open_warehouse
    from jobs_platform.location import dagster_instance, load_definitions
    from jobs_platform.orchestration.health import status_report
    from jobs_platform.settings import Settings
    from jobs_platform.store.health import health_as_dict

    open_warehouse()  # fails in one line when it cannot be opened, before any work
    specs = load_definitions(args.module).resolve_all_asset_specs()
    with dagster_instance() as instance:
        report = status_report(specs, instance, Settings.from_env())
    assets = health_as_dict(report["assets"])
    if args.json:
        print(
            json.dumps(
                {
                    "assets": assets,
                    "oldest_pending_request_age_seconds": report[
                        "oldest_pending_request_age_seconds"
                    ],
                },
                indent=2,
            )
        )
        return 0
    header = f"{'asset':<24}{'done':>7}{'failed':>8}{'quarant.':>9}{'missing':>9}{'in flight':>10}"
    print(header + f"{'p50 s':>8}{'p95 s':>8}{'rows/s':>10}")
    for asset, health in assets.items():
        print(
            f"{asset:<24}{health['done']:>7}{health['failed']:>8}{health['quarantined']:>9}"
            f"{health['missing']:>9}{health['in_flight']:>10}"
            f"{_num(health['duration_p50_seconds']):>8}{_num(health['duration_p95_seconds']):>8}"
            f"{_num(health['rows_per_second']):>10}"
        )
    age = report["oldest_pending_request_age_seconds"]
    print(f"\noldest pending backfill request: {f'{age:.0f}s ago' if age is not None else 'none'}")
    return 0


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"
