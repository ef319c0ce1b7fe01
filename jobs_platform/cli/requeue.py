"""`jobs-platform dead-letter requeue (ASSET PARTITION | --group SIG | --asset A [--error-class
C]) [--dry-run] [--wait [--wait-timeout SECONDS]]`.

Every form goes one way, the UI job's: the entries it selects, of the backfills of the code
location given (`-m`), are released, and the location's requeue sensor launches their runs
(`dead_letter.requeue`). The daemon evaluates that sensor inside the code location, so the
runs are created there, whatever name the workspace gives the location. An entry requeued
before whose run ended without an attempt (it failed before its step, or was canceled) is
released again, and its next run has a key of its own; one whose run was never launched is
left to the sensor's next tick; one whose run goes on is left to it. `--dry-run` prints
what would be released and the runs, and changes nothing.

Without `--wait` the command returns once the entries are released, and warns when no
daemon beats on the Dagster instance: nothing launches the runs until one does. With
`--wait` it returns once the runs have ended. Where a daemon runs, it follows the sensor's
runs; where none does (CI), it runs them itself (`dead_letter.requeue_execution`).

Exit status: 0 when released (or a dry run found entries) and, with `--wait`, every run
succeeded; 1 when no entry matches a group or an asset; 2 when the one entry named is not
quarantined or its run goes on, the Dagster instance cannot be read (nothing was released)
or the arguments are wrong; 3 when a run failed (`--wait`); 4 when `--wait-timeout` passed
before the runs ended (they go on).
"""

from __future__ import annotations

import argparse
import os
import sys

from jobs_platform.cli.warehouse import open_store
from jobs_platform.dead_letter.entries import UnknownEntry
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
INSTANCE_UNREADABLE = 2


def add_requeue_options(requeue: argparse.ArgumentParser) -> None:
    """`--dry-run`, `--wait` and `--wait-timeout`."""
    requeue.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be released and launched; change nothing",
    )
    requeue.add_argument(
        "--wait",
        action="store_true",
        help="return once the runs have ended (exit 3 if one failed); where no daemon "
        "serves the Dagster instance, run them here",
    )
    requeue.add_argument(
        "--wait-timeout",
        type=float,
        metavar="SECONDS",
        default=None,
        help="with --wait: stop waiting for a daemon's runs after this long (exit 4; they "
        "go on); no limit by default",
    )


def run_requeue(args: argparse.Namespace, selection: Selection) -> int:
    """Release the entries `selection` picks; the requeue sensor launches their runs."""
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
    if not args.dry_run and not os.environ.get("DAGSTER_HOME"):
        raise ValueError(
            "DAGSTER_HOME is not set: a requeue's runs are launched by the daemon serving a "
            "Dagster instance (and --wait runs them in it); set DAGSTER_HOME to that "
            "instance's folder; nothing was released"
        )
    if args.wait_timeout is not None and not args.wait:
        raise ValueError("--wait-timeout bounds --wait: pass --wait too")
    try:
        instance = dagster_instance()
    except Exception as error:
        return _unreadable(error)
    with instance:
        return _requeue(instance, args, selection, module, repository, store, served)


def _requeue(instance, args, selection, module, repository, store, served) -> int:
    from jobs_platform.cli.requeue_wait import (
        WaitTimedOut,
        follow_runs,
        report_ended,
        report_timed_out,
        run_here,
    )
    from jobs_platform.dead_letter.releases import RequeuedBy
    from jobs_platform.dead_letter.requeue import (
        already_requeued,
        persons_requeue,
        release_persons_requeue,
        silent_daemons,
    )
    from jobs_platform.dead_letter.requeue_plan import requeue_runs

    try:
        chosen = persons_requeue(instance, store, selection, served)
        silent = silent_daemons(instance)
    except Exception as error:
        return _unreadable(error)
    if chosen.is_empty:
        if selection.is_single:
            raise UnknownEntry(f"{selection.describe()} is not quarantined")
        print(
            f"no open entry of code location {module} matches {selection.describe()}; "
            f"nothing to requeue ({suggested_command('dead-letter', 'list')} shows what is "
            "quarantined)",
            file=sys.stderr,
        )
        return NO_MATCH
    if selection.is_single and chosen.running and not args.wait:
        [(entry, run)] = chosen.running
        raise UnknownEntry(already_requeued(entry, run))
    graph = repository.asset_graph
    if args.dry_run:
        runs = requeue_runs(graph, _to_launch(chosen), instance, _next_releases(store, chosen))
        _print_chosen(chosen, dry_run=True)
        _print_runs(runs)
        print("dry run: nothing was released or launched")
        return 0
    entries, releases = release_persons_requeue(store, chosen, RequeuedBy.CLI)
    if not entries and not chosen.running:
        print("every selected entry was released meanwhile by someone else")
        return 0
    runs = requeue_runs(graph, entries, instance, releases)
    _print_chosen(chosen, dry_run=False)
    _print_runs(runs)
    if not args.wait:
        _print_next(module, runs, silent)
        return 0
    running = [run for _entry, run in chosen.running]
    try:
        if silent:
            print(
                "no dagster-daemon serves the Dagster instance: running the runs here, as "
                "`dagster job execute` does:"
            )
            ended = run_here(instance, module, runs)
            ended += follow_runs(instance, [], {}, running, args.wait_timeout) if running else []
        else:
            print("waiting for the requeue sensor's runs (the daemon launches them):")
            ended = follow_runs(instance, entries, releases, running, args.wait_timeout)
    except WaitTimedOut as timed_out:
        return report_timed_out(timed_out, args.wait_timeout)
    return report_ended(ended, module)


def _unreadable(error: BaseException) -> int:
    print(
        f"error: cannot read the Dagster instance ({type(error).__name__}: "
        f"{one_line(str(error), 500)}); check DAGSTER_HOME and its dagster.yaml; nothing "
        "was released",
        file=sys.stderr,
    )
    return INSTANCE_UNREADABLE


def _to_launch(chosen) -> list:
    return chosen.open + [entry for entry, _run in chosen.ended] + chosen.unlaunched


def _next_releases(store, chosen) -> dict[int, int]:
    """Each requeued entry's release once released (for a dry run): an ended one's next,
    an unlaunched one's current (an open entry's is its first)."""
    from jobs_platform.dead_letter.releases import release_numbers

    requeued = [entry.id for entry, _run in chosen.ended] + [e.id for e in chosen.unlaunched]
    with store.connect() as connection:
        current = release_numbers(connection, requeued)
    ended = {entry.id for entry, _run in chosen.ended}
    return {i: current[i] + (1 if i in ended else 0) for i in requeued}


def _print_chosen(chosen, *, dry_run: bool) -> None:
    """What the requeue does (or, in a dry run, would do) to each entry it selects."""
    release = "would release" if dry_run else "released"
    if len(chosen.open + chosen.ended + chosen.unlaunched + chosen.running) == 1:
        print(_one_entry(chosen, release))
        return
    if chosen.open:
        _print_entries(release, chosen.open)
    if chosen.ended:
        _print_entries(
            f"{release} again",
            [entry for entry, _run in chosen.ended],
            " (their run ended before any attempt)",
            {entry.id: _run_said(run) for entry, run in chosen.ended},
        )
    if chosen.unlaunched:
        _print_entries(
            "left to the requeue sensor",
            chosen.unlaunched,
            " (requeued before, no run launched yet)",
        )
    if chosen.running:
        _print_entries(
            "left to their runs",
            [entry for entry, _run in chosen.running],
            " (requeued before, their run not ended)",
            {entry.id: _run_said(run) for entry, run in chosen.running},
        )


def _one_entry(chosen, release: str) -> str:
    if chosen.open:
        [entry] = chosen.open
        return f"{release} {_named(entry)}; its attempt count starts over, the old history is kept"
    if chosen.ended:
        [(entry, run)] = chosen.ended
        return f"{release} {_named(entry)} again: its {_run_said(run)} before any attempt"
    if chosen.unlaunched:
        [entry] = chosen.unlaunched
        return f"{_named(entry)} was requeued, but no run of it was launched yet"
    [(entry, run)] = chosen.running
    return f"{_named(entry)} is already requeued: its {_run_said(run)}"


def _named(entry) -> str:
    return f"{entry.asset}/{entry.partition} (entry {entry.id})"


def _run_said(run) -> str:
    return f"run {run.run_id} {run.status.value.lower()}"


def _print_entries(verb: str, entries, why: str = "", notes: dict[int, str] | None = None) -> None:
    count = len(entries)
    print(f"{verb} {count} entr{'y' if count == 1 else 'ies'}{why}:")
    for entry in sorted(entries, key=lambda e: (e.asset, e.partition)):
        note = f"  {notes[entry.id]}" if notes and entry.id in notes else ""
        print(
            f"  {entry.asset}/{entry.partition}  entry {entry.id}  {entry.error_class}  "
            f"signature {entry.signature}{note}"
        )


def _print_runs(runs) -> None:
    if runs:
        print(f"in {len(runs)} run{'s' if len(runs) != 1 else ''}:")
    for run in runs:
        print(f"  {run.describe()}")


def _print_next(module: str, runs, silent: list[str]) -> None:
    """What happens next: the requeue sensor launches the runs; a warning when no daemon
    would."""
    from jobs_platform.dead_letter.requeue import REQUEUE_TICK_SECONDS

    if runs:
        them, it = ("its run", "it") if len(runs) == 1 else ("their runs", "them")
        print(
            f"the code location's requeue sensor launches {them} at its next tick (every "
            f"{REQUEUE_TICK_SECONDS} s); follow {it} on the Dagster UI's Runs page (by run "
            f"key) and the entries with {suggested_command('dead-letter', 'list', '-m', module)}"
        )
    if silent:
        print(
            "warning: no dagster-daemon serves the Dagster instance in "
            f"{os.environ.get('DAGSTER_HOME')} (no heartbeat of {', '.join(silent)} lately): "
            "nothing launches the runs until one runs (`dagster-daemon run`, `dagster dev` or "
            "`bin/stack up`); or run them here: add --wait",
            file=sys.stderr,
        )
