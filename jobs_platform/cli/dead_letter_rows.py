"""`jobs-platform dead-letter rows`: the rows set aside under `bad_rows=RejectRows(...)`.

`rows ASSET PARTITION` lists one partition's, in input order; `--journeys` the rows a new
code_version read again after rejecting them (and whether it accepted them); `rows --asset
ASSET` summarises a backfill's rows still rejected, per reason.
"""

from __future__ import annotations

import argparse
import json

from jobs_platform.cli.warehouse import command_settings, open_warehouse
from jobs_platform.dead_letter.view import one_line
from jobs_platform.location import add_module_option, named_location
from jobs_platform.writer import rejects as reject_store


def register_rows(actions) -> None:
    rows = actions.add_parser(
        "rows",
        help="rows a partition rejected under bad_rows=RejectRows(...) (ASSET PARTITION), "
        "or a backfill's rows still rejected, per reason (--asset ASSET)",
    )
    add_module_option(rows)
    rows.add_argument("asset", nargs="?", help="one partition: its asset (with PARTITION)")
    rows.add_argument("partition", nargs="?", help="one partition: its key")
    rows.add_argument(
        "--asset", dest="summarised_asset", metavar="ASSET", help="every partition, per reason"
    )
    rows.add_argument(
        "--journeys",
        action="store_true",
        help="with ASSET PARTITION: the rows a later code_version read again after rejecting",
    )
    rows.add_argument("--json", action="store_true", help="machine-readable output")
    rows.set_defaults(handler=run_rows, parser=rows)


def run_rows(args: argparse.Namespace) -> int:
    """The rows a partition rejected, in input order: row, column, SQLSTATE, reason, values;
    or, with `--asset`, the backfill's rows still rejected per reason."""
    if args.summarised_asset is not None:
        if args.asset is not None:
            args.parser.error("--asset ASSET summarises a backfill: no ASSET PARTITION")
        return _run_rows_by_reason(args)
    if args.asset is None or args.partition is None:
        args.parser.error("name one partition (ASSET PARTITION) or a backfill (--asset ASSET)")
    named_location(args.module)
    with open_warehouse(command_settings(args.module)).connect() as connection:
        if args.journeys:
            journeys = reject_store.reject_journeys(connection, args.asset, args.partition)
        else:
            rejected = reject_store.partition_rejects(connection, args.asset, args.partition)
    if args.journeys:
        return _print_journeys(args, journeys)
    if args.json:
        print(json.dumps([row.as_json() for row in rejected], indent=2))
        return 0
    if not rejected:
        print(f"{args.asset}/{args.partition}: no row rejected")
        return 0
    for row in rejected:
        print(f"  {one_line(row.summary())}")
        if row.values is not None:
            print(f"      {one_line(json.dumps(row.values))}")
    print(f"\n{args.asset}/{args.partition}: {len(rejected)} row(s) rejected")
    return 0


def _run_rows_by_reason(args: argparse.Namespace) -> int:
    named_location(args.module)
    asset = args.summarised_asset
    with open_warehouse(command_settings(args.module)).connect() as connection:
        reasons = reject_store.rejects_by_reason(connection, asset)
    if args.json:
        print(json.dumps([reason.as_json() for reason in reasons], indent=2))
        return 0
    if not reasons:
        print(f"{asset}: no row rejected")
        return 0
    print(f"{'rows':>8}  {'partitions':>10}  reason")
    for reason in reasons:
        where = ", ".join(f for f in (reason.column, reason.sqlstate) if f)
        versions = ", ".join(v or "-" for v in reason.versions)
        print(
            f"{reason.rows:>8}  {reason.partitions:>10}  {one_line(reason.reason, 120)}"
            + (f" [{where}]" if where else "")
            + f" (code_version {versions})"
        )
    print(f"\n{asset}: {sum(r.rows for r in reasons)} row(s) still rejected")
    return 0


def _print_journeys(args: argparse.Namespace, journeys: list[dict]) -> int:
    if args.json:
        print(json.dumps(journeys, indent=2))
        return 0
    if not journeys:
        print(f"{args.asset}/{args.partition}: no rejected row was read again by a new version")
        return 0
    for journey in journeys:
        now = "still rejected" if journey["still_rejected"] else "accepted"
        print(
            f"  row {journey['row']}: rejected under {journey['rejected_version'] or '-'} "
            f"({one_line(journey['reason'], 80)}), read again under "
            f"{journey['read_again_version'] or '-'} at {journey['read_again_at']}: {now}"
        )
    return 0
