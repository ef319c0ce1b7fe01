"""`jobs-platform dead-letter list|show|requeue`: find, read and release quarantined work."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import sqlalchemy as sa

from jobs_platform.alerts.alert import AttemptRecord
from jobs_platform.cli.warehouse import open_warehouse
from jobs_platform.settings import Settings
from jobs_platform.store import quarantine as quarantine_store
from jobs_platform.store.attempts import attempt_history

LIST_FIELDS = (
    "asset", "partition", "status", "attempts", "error_class", "last_error",
    "first_failed_at", "last_failed_at",
)  # fmt: skip


def register(commands) -> None:
    parser = commands.add_parser("dead-letter", help="inspect and requeue quarantined partitions")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="quarantined partitions")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=run_list)
    show = actions.add_parser("show", help="one entry with its whole failure history")
    show.add_argument("asset")
    show.add_argument("partition")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=run_show)
    requeue = actions.add_parser("requeue", help="release an entry and launch a run for it")
    requeue.add_argument("asset")
    requeue.add_argument("partition")
    requeue.add_argument(
        "--no-launch", action="store_true", help="only release; let the requeue sensor launch it"
    )
    requeue.set_defaults(handler=run_requeue)


def entry_summary(row: sa.Row) -> dict:
    return {name: _plain(getattr(row, name)) for name in LIST_FIELDS}


def history_rows(connection: sa.Connection, asset: str, partition: str) -> list[dict]:
    return [
        {**asdict(record), "at": _plain(record.at)}
        for record in map(AttemptRecord.from_row, attempt_history(connection, asset, partition))
    ]


def run_list(args: argparse.Namespace) -> int:
    with open_warehouse().connect() as connection:
        entries = [entry_summary(row) for row in quarantine_store.list_entries(connection)]
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
            f"    {_one_line(entry['last_error'])}"
        )
    print(f"\n{len(entries)} quarantined. Details: jobs-platform dead-letter show ASSET PARTITION")
    return 0


def run_show(args: argparse.Namespace) -> int:
    with open_warehouse().connect() as connection:
        row = quarantine_store.latest_entry(connection, args.asset, args.partition)
        entry = {"id": row.id, "episode": row.episode, **entry_summary(row)}
        entry["history"] = history_rows(connection, args.asset, args.partition)
    if args.json:
        print(json.dumps(entry, indent=2))
        return 0
    print(
        f"{entry['asset']}/{entry['partition']}: {entry['status']} (entry {entry['id']}, "
        f"episode {entry['episode']}, {entry['attempts']} attempt(s))"
    )
    print(f"first failed {entry['first_failed_at']}, last failed {entry['last_failed_at']}")
    print(f"last error ({entry['error_class']}): {_one_line(entry['last_error'])}\n")
    for attempt in entry["history"]:
        print(
            f"  episode {attempt['episode']} attempt {attempt['attempt']}  {attempt['at']}  "
            f"{attempt['error_class']:<11} {attempt['error_type'] or ''}  run {attempt['run_id']}"
        )
        if attempt["message"]:
            print(f"      {_one_line(attempt['message'])}")
    if entry["status"] == quarantine_store.QuarantineStatus.QUARANTINED:
        print(f"\nrequeue with: jobs-platform dead-letter requeue {args.asset} {args.partition}")
    return 0


def run_requeue(args: argparse.Namespace) -> int:
    # Under a remote executor the run must land on the workers like any other run: the
    # requeue sensor launches it through the instance (daemon, run launcher, executor).
    through_instance = args.no_launch or Settings.from_env().executor == "celery"
    engine = open_warehouse()
    with engine.connect() as connection:
        lost = quarantine_store.requeue_awaiting_run(connection, args.asset, args.partition)
    if lost is not None:
        _refuse_when_its_run_exists(lost)
    with engine.begin() as connection:
        entry = lost or quarantine_store.requeue_partition(connection, args.asset, args.partition)
        if not through_instance:
            # Tells the requeue sensor a launch is under way, so it does not start a second.
            quarantine_store.mark_requeue_launched(connection, [entry.id])
    if lost is not None:
        print(
            f"{args.asset}/{args.partition} was requeued (entry {entry.id}) but no run of it "
            "was ever launched"
        )
    else:
        print(
            f"released {args.asset}/{args.partition} (entry {entry.id}); "
            f"its attempt count starts over, the old history is kept"
        )
    if through_instance:
        print("the requeue sensor will launch a run for it through the Dagster instance")
        return 0
    return launch_requeue_run(entry)


def _refuse_when_its_run_exists(entry: sa.Row) -> None:
    from jobs_platform.cli.code_location import dagster_instance
    from jobs_platform.orchestration.requeue import requeue_run

    with dagster_instance() as instance:
        run = requeue_run(instance, entry)
    if run is not None:
        raise quarantine_store.UnknownEntry(
            f"{entry.asset}/{entry.partition} is already requeued: its run {run.run_id} is "
            f"{run.status.value.lower()}; follow it in the Dagster UI"
        )


def launch_requeue_run(entry: sa.Row) -> int:
    """Run the entry's partition of its asset and the backfills it feeds, under its run key.

    The run key `requeue-<entry id>` is what the requeue sensor looks for: with it, a run
    this command launched is never launched again by the sensor, and one that never got
    created is.
    """
    import dagster as dg

    from jobs_platform.cli.code_location import CODE_LOCATION_MODULE, load_definitions
    from jobs_platform.orchestration.selections import with_downstream_backfills
    from jobs_platform.orchestration.tags import PARTITION_TAG, RUN_KEY_TAG, requeue_run_key

    definitions = load_definitions()
    graph = definitions.get_repository_def().asset_graph
    keys = with_downstream_backfills(graph, dg.AssetKey.from_user_string(entry.asset))
    selection = ",".join(key.to_user_string() for key in keys)
    # The ops computing those assets: a chain of backfills is one op (`chain_backfills`).
    ops = sorted({definitions.get_assets_def(key).op.name for key in keys})
    tags = {PARTITION_TAG: entry.partition, RUN_KEY_TAG: requeue_run_key(entry.id)}
    command = [
        str(Path(sys.executable).with_name("dagster")), "job", "execute",
        "-m", CODE_LOCATION_MODULE, "-j", definitions.resolve_implicit_global_asset_job_def().name,
        "--op-selection", ",".join(ops), "--tags", json.dumps(tags),
    ]  # fmt: skip
    print(f"launching {selection} for {entry.partition} (run key {tags[RUN_KEY_TAG]})")
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    if finished.returncode == 0:
        print(f"{entry.asset}/{entry.partition} succeeded")
    else:
        tail = "\n".join((finished.stdout + finished.stderr).strip().splitlines()[-15:])
        print(f"{entry.asset}/{entry.partition} failed again:\n{tail}", file=sys.stderr)
    return finished.returncode


def _plain(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def _one_line(text: str | None, limit: int = 300) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
