"""`jobs-platform status`: per backfill asset, where its partitions stand."""

from __future__ import annotations

import argparse
import json

from jobs_platform.location import add_module_option


def register(commands) -> None:
    parser = commands.add_parser("status", help="health of every backfill at a glance")
    add_module_option(parser)
    parser.add_argument(
        "--from",
        dest="first",
        metavar="KEY",
        help="count only the partitions from this time partition key on (inclusive)",
    )
    parser.add_argument(
        "--to",
        dest="last",
        metavar="KEY",
        help="count only the partitions up to this time partition key (inclusive)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from jobs_platform.cli.warehouse import open_warehouse
    from jobs_platform.location import dagster_instance, load_definitions, location_settings
    from jobs_platform.orchestration.health import status_report
    from jobs_platform.orchestration.windows import status_window
    from jobs_platform.store.health import health_as_dict

    definitions = load_definitions(args.module)
    # The location's own warehouse (its bound resource), whatever the environment says.
    settings = location_settings(definitions)
    open_warehouse(settings)  # fails in one line when it cannot be opened, before any work
    specs = definitions.resolve_all_asset_specs()
    # A bad key fails here, in one line naming what keys look like, before any query.
    windowed = args.first is not None or args.last is not None
    window = status_window(specs, args.first, args.last) if windowed else None
    with dagster_instance() as instance:
        report = status_report(specs, instance, settings, window)
    assets = health_as_dict(report["assets"])
    if args.json:
        shown = {
            "assets": assets,
            "oldest_pending_request_age_seconds": report["oldest_pending_request_age_seconds"],
        }
        if window is not None:
            shown |= {"window": report["window"], "not_windowed": report["not_windowed"]}
        print(json.dumps(shown, indent=2))
        return 0
    if window is not None:
        span = report["window"]
        print(
            f"window: partitions starting from {span['start'] or 'the first'} "
            f"until before {span['end'] or 'now'}\n"
        )
    header = f"{'asset':<24}{'done':>7}{'failed':>8}{'quarant.':>9}{'missing':>9}{'in flight':>10}"
    print(header + f"{'p50 s':>8}{'p95 s':>8}{'rows/s':>10}{'rejected':>10}")
    for asset, health in assets.items():
        print(
            f"{asset:<24}{health['done']:>7}{health['failed']:>8}{health['quarantined']:>9}"
            f"{health['missing']:>9}{health['in_flight']:>10}"
            f"{_num(health['duration_p50_seconds']):>8}{_num(health['duration_p95_seconds']):>8}"
            f"{_num(health['rows_per_second']):>10}{health['rows_rejected']:>10}"
        )
    if window is not None and report["not_windowed"]:
        print(f"\nnot time-partitioned, left out: {', '.join(report['not_windowed'])}")
    age = report["oldest_pending_request_age_seconds"]
    print(f"\noldest pending backfill request: {f'{age:.0f}s ago' if age is not None else 'none'}")
    return 0


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"
