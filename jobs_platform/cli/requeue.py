"""`jobs-platform dead-letter requeue (ASSET PARTITION | --group SIG | --asset A [--error-class
C]) [--dry-run] [--no-launch]`.

Every form goes one way, the UI's: the open entries it selects, of the backfills of the
code location given (`-m`), are released and their runs submitted to the Dagster
instance, queued for its daemon (`dead_letter.requeue` launches them: create the runs,
release and mark launched in one transaction, submit); the command returns once they are
queued. One entry is a selection of one: its run has the key `requeue-<entry id>`, and
an entry requeued before whose run was never launched is launched again (refused while
that run exists). `--dry-run` prints the entries and the runs and changes nothing.

Exit status: 0 when released (or a dry run found entries), 1 when no open entry matches
a group or an asset, 2 when the launch could not be submitted (nothing released), the
one entry named is not quarantined, or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

from jobs_platform.cli.warehouse import open_store
from jobs_platform.dead_letter.entries import UnknownEntry
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.dead_letter.view import one_line
from jobs_platform.location import (
    code_location_module,
    dagster_instance,
    load_definitions,
    location_settings,
)
from jobs_platform.suggested_commands import suggested_command

NO_MATCH = 1
LAUNCH_FAILED = 2


def run_requeue(args: argparse.Namespace, selection: Selection) -> int:
    """Release the open entries `selection` picks and queue their runs."""
    from jobs_platform.dead_letter.requeue import REQUEUE_LAUNCH_GRACE_SECONDS, RequeueNotQueued
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
    store = open_store(location_settings(definitions))
    with store.connect() as connection:
        entries = selection.open_entries(connection, served)
    if not entries and not selection.is_single:
        print(
            f"no open entry of code location {module} matches {selection.describe()}; "
            f"nothing to requeue ({suggested_command('dead-letter', 'list')} shows what is "
            "quarantined)",
            file=sys.stderr,
        )
        return NO_MATCH
    if not args.dry_run and not args.no_launch and not os.environ.get("DAGSTER_HOME"):
        raise ValueError(
            "DAGSTER_HOME is not set: a requeue is launched through the Dagster instance's "
            "run queue, which its daemon serves; set DAGSTER_HOME to that instance's folder "
            "(or pass --no-launch to leave the launch to the requeue sensor); nothing was "
            "released"
        )
    try:
        with dagster_instance() as instance:
            return _through_instance(instance, args, selection, module, repository, store, entries)
    except RequeueNotQueued as error:
        print(
            f"error: released {len(error.released)} entries but their runs could not be "
            f"queued ({_reason(error.cause)}); the requeue sensor launches them once "
            f"{REQUEUE_LAUNCH_GRACE_SECONDS} s have passed",
            file=sys.stderr,
        )
        return LAUNCH_FAILED
    except UnknownEntry:
        raise  # one entry not quarantined, or its run already there: said as it is
    except Exception as error:
        print(
            f"error: the launch cannot be submitted ({_reason(error)}); nothing was released",
            file=sys.stderr,
        )
        return LAUNCH_FAILED


def _through_instance(instance, args, selection, module, repository, store, entries) -> int:
    """Plan, then release and queue (or only print, or only release) through `instance`."""
    from jobs_platform.dead_letter.requeue import lost_launch, submit_requeue
    from jobs_platform.dead_letter.requeue_plan import requeue_runs

    lost = None
    if not entries:
        # One entry, not quarantined: requeued before, its run perhaps never launched.
        assert selection.asset is not None and selection.partition is not None
        with store.connect() as connection:
            lost = lost_launch(instance, connection, selection.asset, selection.partition)
        if lost is None:
            raise UnknownEntry(f"{selection.describe()} is not quarantined")
    targets = entries if lost is None else [lost]
    runs = requeue_runs(repository.asset_graph, targets, instance)
    if args.dry_run:
        _print_plan("would release" if lost is None else "would launch again", targets, runs)
        print("dry run: nothing was released or launched")
        return 0
    if args.no_launch:
        if lost is None:
            with store.begin() as connection:
                _print_released(selection, _release(store, connection, entries), runs)
        else:
            _print_lost(lost)
        print("the requeue sensor will launch them through the Dagster instance")
        return 0

    def release(connection):
        return [lost] if lost is not None else _release(store, connection, entries)

    released, submitted = submit_requeue(instance, module, runs, store, release)
    if not released:
        print("every selected entry was released meanwhile by someone else")
        return 0
    if lost is not None:
        _print_lost(lost)
    else:
        _print_released(selection, released, runs)
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


def _print_lost(entry) -> None:
    print(
        f"{entry.asset}/{entry.partition} was requeued (entry {entry.id}) but no run of it "
        "was ever launched"
    )


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {one_line(str(error), 500)}"


def _release(store, connection, entries):
    return store.dead_letter.release_entries(
        connection, entries, by=RequeuedBy.CLI, reason="requested"
    )


def _print_released(selection: Selection, released, runs) -> None:
    if selection.is_single and len(released) == 1:
        [entry] = released
        print(
            f"released {entry.asset}/{entry.partition} (entry {entry.id}); "
            "its attempt count starts over, the old history is kept"
        )
        for run in runs:
            print(f"  {run.describe()}")
        return
    _print_plan("released", released, runs)


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
