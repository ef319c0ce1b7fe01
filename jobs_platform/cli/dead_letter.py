"""`jobs-platform dead-letter list|show|groups|requeue|rows|accept-change`: find, read and
release quarantined work."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import sqlalchemy as sa

from jobs_platform.alerts.alert import AttemptRecord
from jobs_platform.cli import classify
from jobs_platform.cli.accept_change import register_accept_change
from jobs_platform.cli.dead_letter_rows import register_rows
from jobs_platform.cli.requeue import add_requeue_options
from jobs_platform.cli.warehouse import add_reading_command, command_settings, open_warehouse
from jobs_platform.dead_letter.entries import UnknownEntry, latest_entry, list_entries
from jobs_platform.dead_letter.releases import requeue_log
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.dead_letter.triage import signature_groups
from jobs_platform.dead_letter.view import (
    entry_summary,
    group_requeue_command,
    group_summary,
    one_line,
    plain,
)
from jobs_platform.errors import Classification
from jobs_platform.gate.reviews import latest_review, review_evidence
from jobs_platform.location import add_module_option, named_location
from jobs_platform.steering.circuit_report import open_circuits
from jobs_platform.store.attempts import attempt_history
from jobs_platform.store.partitions import partition_status
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import EntryStatus
from jobs_platform.suggested_commands import (
    accept_change_command,
    requeue_command,
    show_command,
)


def register(commands) -> None:
    parser = commands.add_parser("dead-letter", help="inspect and requeue quarantined partitions")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_reading_command(
        actions,
        "list",
        "quarantined partitions: the warehouse's, whatever the code location",
        run_list,
    )
    add_reading_command(
        actions,
        "show",
        "a partition's status, its latest entry if it was quarantined, and its whole history",
        run_show,
        one_partition=True,
    )
    register_groups(actions)
    requeue = actions.add_parser(
        "requeue",
        help="release one entry (ASSET PARTITION) or a selection (--group, --asset): the "
        "code location's requeue sensor launches their runs (--wait: until they end)",
    )
    add_module_option(requeue)
    requeue.add_argument("asset", nargs="?", help="one entry: its asset (with PARTITION)")
    requeue.add_argument("partition", nargs="?", help="one entry: its partition")
    requeue.add_argument(
        "--group",
        metavar="SIGNATURE",
        help="every open entry of one cause (a signature from `dead-letter groups`)",
    )
    requeue.add_argument(
        "--asset",
        dest="selected_asset",
        metavar="ASSET",
        help="every open entry of a backfill (narrowed by --error-class)",
    )
    requeue.add_argument(
        "--error-class",
        choices=[str(c) for c in Classification],
        help="with --asset: only the entries of this error class",
    )
    add_requeue_options(requeue)
    requeue.set_defaults(handler=run_requeue, parser=requeue)
    register_rows(actions)
    register_accept_change(actions)
    classify.register(actions)


def history_rows(connection: sa.Connection, asset: str, partition: str) -> list[dict]:
    """The partition's attempts (`kind` = `attempt`) and the releases of its entries
    (`kind` = `requeue`: `by`, `reason`, `at`, `entry_id`), in the order they happened."""
    attempts = [
        (record.at, 0, {"kind": "attempt", **asdict(record), "at": plain(record.at)})
        for record in map(AttemptRecord.from_row, attempt_history(connection, asset, partition))
    ]
    releases = [
        (
            release.at,
            1,
            {
                "kind": "requeue",
                "entry_id": release.entry_id,
                "by": release.by,
                "reason": release.reason,
                "at": plain(release.at),
            },
        )
        for release in requeue_log(connection, asset, partition)
    ]
    # A release comes after the attempts of the episode it ends and before the next one's.
    merged = sorted(attempts + releases, key=lambda item: (item[0] is None, item[0], item[1]))
    return [record for _, _, record in merged]


def run_list(args: argparse.Namespace) -> int:
    # The dead letter is the warehouse's, shared by every code location writing to it, and
    # each entry names its asset: every entry is listed, whatever the location (a list
    # narrowed to one location's backfills could hide an entry of an asset no location
    # serves any more). The location is named in the commands the listing suggests. One
    # named by -m or $JOBS_PLATFORM_MODULE is loaded for its warehouse (its bound
    # `jobs_platform` resource); without, the environment names the warehouse and
    # Dagster is not imported (seconds, for a command that answers in a fraction of one).
    module = named_location(args.module)
    with open_warehouse(command_settings(args.module)).connect() as connection:
        entries = [entry_summary(row) for row in list_entries(connection)]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print("the dead letter is empty: no quarantined partitions")
        return 0
    for entry in entries:
        print(
            f"{entry['asset']}/{entry['partition']}  {entry['error_class']} after "
            f"{entry['attempts']} attempt(s), last at {entry['last_failed_at']}\n"
            f"    {one_line(entry['last_error'])}"
        )
    details = show_command("ASSET", "PARTITION", module)
    print(f"\n{len(entries)} quarantined. Details: {details}")
    return 0


def register_groups(actions) -> None:
    groups = add_reading_command(
        actions,
        "groups",
        "quarantined partitions by cause (signature), largest first: the warehouse's, "
        "whatever the code location",
        run_groups,
    )
    groups.add_argument("--asset", metavar="ASSET", help="only this backfill's entries")


def run_groups(args: argparse.Namespace) -> int:
    # Like `list`: every open entry of the warehouse (`--asset` narrows), whatever the
    # location, which is named only in the suggested commands; Dagster is not imported
    # unless -m or $JOBS_PLATFORM_MODULE names a location whose warehouse to read.
    module = named_location(args.module)
    with open_warehouse(command_settings(args.module)).connect() as connection:
        groups = signature_groups(connection, asset=args.asset)
        circuits = open_circuits(connection, [args.asset] if args.asset else None)
    if args.json:
        summaries = [
            group_summary(group, module) | {"circuits": _circuits_of(circuits, group.signature)}
            for group in groups
        ]
        print(json.dumps(summaries, indent=2))
        return 0
    for circuit in circuits:
        # An outage's failures are forgiven, not quarantined: its cause may have no group.
        print(
            f"CIRCUIT OPEN  {circuit.signature}  {circuit.asset}: since "
            f"{plain(circuit.opened_at)}, {circuit.partitions} partitions failed "
            f"({circuit.error_class}: {one_line(circuit.last_error, 120)}); its partitions "
            "snooze, spending nothing, until a probe succeeds\n"
        )
    if not groups:
        where = f" of {args.asset}" if args.asset else ""
        print(f"the dead letter is empty: no quarantined partitions{where}")
        return 0
    entries = sum(group.count for group in groups)
    print(f"{entries} quarantined partition(s), {len(groups)} cause(s), largest first\n")
    print(f"{'entries':>7}  {'signature':<12}  {'class':<10}  {'type':<24}  last failed")
    for group in groups:
        assets = ", ".join(f"{asset} {count}" for asset, count in group.assets.items())
        samples = ", ".join(
            f"{asset}/{partition}" if len(group.assets) > 1 else partition
            for asset, partition in group.samples
        )
        print(
            f"{group.count:>7}  {group.signature or '-':<12}  {group.error_class:<10}  "
            f"{(group.error_type or '-'):<24}  {plain(group.last_failed_at)}\n"
            f"         {one_line(group.sample_message, 200)}\n"
            f"         assets: {assets}; e.g. {samples}\n"
            f"         requeue: {group_requeue_command(group, module)}"
        )
        taught = classify.taught_line(group, module)
        if taught:
            print(f"         {taught}")
        for opened in _circuits_of(circuits, group.signature):
            print(f"         circuit OPEN on {opened['asset']} since {opened['opened_at']}")
    details = show_command("ASSET", "PARTITION", module)
    print(f"\nAn entry's history: {details}")
    return 0


def _circuits_of(circuits: list[TableRow], signature: str | None) -> list[dict[str, str]]:
    """The open circuits of a cause: where its outage snoozes partitions."""
    return [
        {"asset": circuit.asset, "opened_at": plain(circuit.opened_at)}
        for circuit in circuits
        if circuit.signature == signature
    ]


def run_show(args: argparse.Namespace) -> int:
    # A partition is read by its asset's name, whatever the location; the location is
    # named in the requeue hint, and, when -m or $JOBS_PLATFORM_MODULE names it, names
    # the warehouse (its bound resource).
    module = named_location(args.module)
    asset, partition = args.asset, args.partition
    with open_warehouse(command_settings(args.module)).connect() as connection:
        history = history_rows(connection, asset, partition)
        try:
            row = latest_entry(connection, asset, partition)
        except UnknownEntry:
            row = None
        # `missing` while no attempt of it has ended.
        status = partition_status(connection, asset, partition) or "missing"
        review = latest_review(connection, asset, partition)
    if row is None and not history:
        raise LookupError(
            f"{asset}/{partition} has no attempt and no quarantine entry: it has never run "
            "(check the asset's name and the partition key)"
        )
    # Two statuses, two keys: the partition's (`done`, `failed`, `quarantined`, `missing`)
    # and its latest entry's (`quarantined`, `requeued`, `resolved`), null when it never
    # was quarantined. A partition done since its requeue is `done`, its entry `resolved`.
    entry = None if row is None else {"id": row.id, "episode": row.episode, **entry_summary(row)}
    shown = {
        "asset": asset,
        "partition": partition,
        "status": status,
        "quarantined": entry is not None and entry["status"] == EntryStatus.QUARANTINED,
        "entry": entry,
        # The gate's latest refusal (`expect=`): its diff, the bounds it broke, who accepted it.
        "change": None if review is None else review_evidence(review),
        "history": history,
    }
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    if entry is None:
        tried = sum(record["kind"] == "attempt" for record in history)
        attempts = f"{tried} attempt{'s' if tried != 1 else ''}"
        print(f"{asset}/{partition}: {status}, not quarantined ({attempts})\n")
    else:
        print(
            f"{asset}/{partition}: {status}; entry {entry['id']} {entry['status']} "
            f"(episode {entry['episode']}, {entry['attempts']} attempt(s))"
        )
        print(f"first failed {entry['first_failed_at']}, last failed {entry['last_failed_at']}")
        print(f"last error ({entry['error_class']}): {one_line(entry['last_error'])}\n")
    if shown["change"] is not None:
        print_change(shown["change"])
    for record in history:
        if record["kind"] == "requeue":
            print(
                f"  requeued by {record['by']} ({record['reason']})  {record['at']}  "
                f"entry {record['entry_id']}"
            )
            continue
        # The rule a person taught, where one decided the attempt's class.
        by_rule = f"  by rule {record['rule']}" if record["rule"] else ""
        print(
            f"  episode {record['episode']} attempt {record['attempt']}  {record['at']}  "
            f"{record['error_class']:<11} {record['error_type'] or ''}  run {record['run_id']}"
            f"{by_rule}"
        )
        if record["message"]:
            print(f"      {one_line(record['message'])}")
    if shown["quarantined"]:
        print(f"\nrequeue with: {requeue_command(asset, partition, module)}")
        change = shown["change"]
        if change is not None and change["accepted_at"] is None:
            print(
                f"accept the refused change once: {accept_change_command(asset, partition, module)}"
            )
    return 0


def print_change(change: dict) -> None:
    """The gate's latest refusal of the partition: the diff, a sample of keys, its review."""
    diff = change["diff"]
    print(
        f"change refused {change['refused_at']} by {change['contract']}: inserted "
        f"{diff['inserted']}, updated {diff['updated']}, unchanged {diff['unchanged']}, "
        f"swept {diff['swept']} (of {diff['rows_before']} rows; {diff['rows_after']} after)"
    )
    for broken in change["broken"]:
        print(f"  broken: {broken}")
    for kind, keys in diff["samples"].items():
        if keys:
            print(f"  {kind}, e.g.: {one_line(json.dumps(keys))}")
    if change["accepted_at"] is not None:
        published = change["published_at"] or "not yet published"
        print(f"  accepted by {change['accepted_by']} at {change['accepted_at']}; {published}")
    print()


def run_requeue(args: argparse.Namespace) -> int:
    from jobs_platform.cli.requeue import run_requeue as requeue

    if args.asset is not None and args.partition is None:
        args.parser.error("one entry is ASSET PARTITION: the partition is missing")
    if args.asset is not None and (args.selected_asset or args.group or args.error_class):
        args.parser.error("ASSET PARTITION names one entry: no --group, --asset or --error-class")
    if args.error_class is not None and args.selected_asset is None:
        args.parser.error("--error-class narrows --asset ASSET: give the asset")
    selection = Selection(
        asset=args.asset or args.selected_asset,
        partition=args.partition,
        group=args.group,
        error_class=args.error_class,
    )
    problem = selection.problem()
    if problem is not None:
        args.parser.error(problem)
    return requeue(args, selection)
