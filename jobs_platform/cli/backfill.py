"""`jobs-platform backfill pause|resume`: stop a backfill's new attempts, and let them go on.

`pause` records who paused the backfill (the OS user), when and why, in the warehouse; on
every host and launch path the attempt gate then holds each partition a run reaches
(`engine.holding`): no attempt is recorded and no budget is spent. Attempts already in
flight finish their partition. `resume` lifts the pause; the location's holds sensor then
launches the partitions held meanwhile, once each, through the run queue
(`steering.holds_sensor`).
"""

from __future__ import annotations

import argparse
import getpass
import json

from jobs_platform.cli.warehouse import open_store
from jobs_platform.location import (
    add_module_option,
    code_location_module,
    load_definitions,
    location_settings,
)
from jobs_platform.steering.holds import HoldReason, hold_counts
from jobs_platform.steering.pauses import Pause


def register(commands) -> None:
    parser = commands.add_parser("backfill", help="pause or resume a backfill as a whole")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    pause = actions.add_parser(
        "pause", help="hold every partition of a backfill before its attempt, until resumed"
    )
    resume = actions.add_parser(
        "resume", help="lift a pause: the partitions it held are launched again"
    )
    for command, handler in ((pause, run_pause), (resume, run_resume)):
        add_module_option(command)
        command.add_argument("asset", help="the backfill's asset key, e.g. orders or acme/events")
        command.add_argument("--json", action="store_true", help="machine-readable output")
        command.set_defaults(handler=handler)
    pause.add_argument("--reason", default=None, help="why, shown by status and in the UI")


def person() -> str:
    """Who runs the command: the OS user, as the pause records it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "unknown"


def run_pause(args: argparse.Namespace) -> int:
    store = _served_store(args)
    with store.begin() as connection:
        paused = store.pauses.pause(connection, args.asset, by=person(), reason=args.reason)
    if args.json:
        print(json.dumps(pause_summary(paused), indent=2))
        return 0
    print(
        f"{args.asset} is {paused.describe()}: runs hold each partition they reach, with no "
        "attempt recorded; attempts in flight finish their partition. Resume with: "
        f"jobs-platform backfill resume -m {code_location_module(args.module)} {args.asset}"
    )
    return 0


def run_resume(args: argparse.Namespace) -> int:
    store = _served_store(args)
    with store.begin() as connection:
        lifted = store.pauses.resume(connection, args.asset)
        held = hold_counts(connection).get((args.asset, HoldReason.PAUSED), 0)
    if args.json:
        summary = {"asset": args.asset, "resumed": lifted is not None, "held": held}
        print(json.dumps({**summary, "pause": pause_summary(lifted)}, indent=2))
        return 0
    if lifted is None:
        print(f"{args.asset} was not paused; nothing to resume")
        return 0
    print(
        f"{args.asset} resumed (it was {lifted.describe()}): the location's holds sensor "
        f"launches the {held} partition{'s' if held != 1 else ''} held meanwhile at its next "
        "tick, through the run queue"
    )
    return 0


def pause_summary(paused: Pause | None) -> dict | None:
    """A pause as `status --json` and these commands print it."""
    if paused is None:
        return None
    return {"by": paused.by, "at": paused.at.isoformat(), "reason": paused.reason}


def _served_store(args: argparse.Namespace):
    """The warehouse of the code location `-m` names, which must serve `args.asset`."""
    from jobs_platform.orchestration.selections import served_backfills

    module = code_location_module(args.module)
    definitions = load_definitions(args.module)
    if args.asset not in served_backfills(definitions.get_repository_def()):
        raise LookupError(
            f"code location {module} has no backfill {args.asset!r}: pass the location that "
            "serves it with -m MODULE (or set JOBS_PLATFORM_MODULE); nothing was changed"
        )
    return open_store(location_settings(definitions))
