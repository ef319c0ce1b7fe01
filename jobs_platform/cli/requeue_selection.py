"""`jobs-platform dead-letter requeue --group SIG | --asset A [--error-class C] [--dry-run]`.

A selection of open entries, of the backfills of the code location given (`-m`), is
released and launched as ranged runs through the Dagster instance's run queue (the rule:
`orchestration.requeue_runs`); the command returns once they are queued, and the daemon
runs them. The order makes a failed launch release nothing: the runs are first created
(not started) from a workspace of the location, then the entries released and marked
launched in one transaction, then the runs submitted. `--dry-run` prints the entries and
the runs and changes nothing.

Exit status: 0 when released (or a dry run found entries), 1 when no open entry matches,
2 when the launch could not be submitted (nothing released) or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

from jobs_platform.cli.warehouse import open_warehouse
from jobs_platform.dead_letter_selection import Selection
from jobs_platform.dead_letter_view import one_line
from jobs_platform.location import (
    code_location_module,
    dagster_instance,
    load_definitions,
    location_settings,
)
from jobs_platform.store import quarantine as quarantine_store
from jobs_platform.suggested_commands import suggested_command

NO_MATCH = 1
LAUNCH_FAILED = 2


def run_requeue_selection(args: argparse.Namespace, selection: Selection) -> int:
    """Release the open entries `selection` picks and queue their ranged runs."""
    from jobs_platform.orchestration.requeue_runs import prepared_requeue_runs, requeue_runs
    from jobs_platform.orchestration.selections import served_backfills

    module = code_location_module(args.module)
    definitions = load_definitions(args.module)
    repository = definitions.get_repository_def()
    served = served_backfills(repository)
    if selection.asset is not None and selection.asset not in served:
        raise LookupError(
            f"code location {module} has no backfill {selection.asset!r}: pass the location "
            "that serves it with -m MODULE (or set JOBS_PLATFORM_MODULE); nothing was released"
        )
    engine = open_warehouse(location_settings(definitions))
    with engine.connect() as connection:
        entries = selection.open_entries(connection, served)
    if not entries:
        print(
            f"no open entry of code location {module} matches {selection.describe()}; "
            f"nothing to requeue ({suggested_command('dead-letter', 'list')} shows what is "
            "quarantined)",
            file=sys.stderr,
        )
        return NO_MATCH
    if not args.dry_run and not args.no_launch and not os.environ.get("DAGSTER_HOME"):
        raise ValueError(
            "DAGSTER_HOME is not set: a selection is launched through the Dagster instance's "
            "run queue, which its daemon serves; set DAGSTER_HOME to that instance's folder "
            "(or pass --no-launch to leave the launch to the requeue sensor); nothing was "
            "released"
        )
    released: list = []
    try:
        with dagster_instance() as instance:
            runs = requeue_runs(repository.asset_graph, entries, instance)
            if args.dry_run:
                _print_plan("would release", entries, runs)
                print("dry run: nothing was released or launched")
                return 0
            if args.no_launch:
                with engine.begin() as connection:
                    released = _release(connection, entries)
                _print_plan("released", released, runs)
                print("the requeue sensor will launch them through the Dagster instance")
                return 0
            with prepared_requeue_runs(instance, module, runs) as prepared:
                with engine.begin() as connection:
                    released = _release(connection, entries)
                    # Tells the requeue sensor these runs are on their way: it leaves them
                    # alone while they wait in the queue, and relaunches any that vanish.
                    quarantine_store.mark_requeue_launched(
                        connection, [entry.id for entry in released]
                    )
                if not released:
                    print("every selected entry was released meanwhile by someone else")
                    return 0
                submitted = prepared.submit()
    except Exception as error:
        reason = f"{type(error).__name__}: {one_line(str(error), 500)}"
        if not released:
            print(
                f"error: the launch cannot be submitted ({reason}); nothing was released",
                file=sys.stderr,
            )
        else:
            print(
                f"error: released {len(released)} entries but their runs could not be queued "
                f"({reason}); the requeue sensor launches them once "
                f"{quarantine_store.REQUEUE_LAUNCH_GRACE_SECONDS} s have passed",
                file=sys.stderr,
            )
        return LAUNCH_FAILED
    _print_plan("released", released, runs)
    print(
        f"queued {len(submitted)} run{'s' if len(submitted) != 1 else ''} in the Dagster "
        "instance's run queue; its daemon (`dagster-daemon run`, `dagster dev` or "
        "`bin/stack up`) runs them:"
    )
    for run in submitted:
        print(f"  run {run.run_id}  {run.tags.get('dagster/run_key', '')}")
    print(
        "follow them on the Dagster UI's Runs page (filter by the run key), and the "
        f"entries with {suggested_command('dead-letter', 'groups', '-m', module)}"
    )
    return 0


def _release(connection, entries):
    return quarantine_store.release_entries(
        connection, entries, by=quarantine_store.RequeuedBy.CLI, reason="requested"
    )


def _print_plan(verb: str, entries, runs) -> None:
    count = len(entries)
    print(f"{verb} {count} entr{'y' if count == 1 else 'ies'}:")
    for entry in sorted(entries, key=lambda e: (e.asset, e.partition)):
        print(
            f"  {entry.asset}/{entry.partition}  entry {entry.id}  {entry.error_class}  "
            f"signature {entry.signature}"
        )
    print(f"in {len(runs)} ranged run{'s' if len(runs) != 1 else ''}:")
    for run in runs:
        print(f"  {run.describe()}")
