"""`jobs-platform dead-letter accept-change -m MODULE ASSET PARTITION [--wait]`.

A person approves the change a partition's gate refused (`expect=`): its latest refusal is
stamped accepted (who, when), and the partition is released the way `dead-letter requeue`
releases it. Its next attempt publishes if its diff is the one approved (same hash), and
only once; a different diff is refused again (`gate.reviews`).
"""

from __future__ import annotations

import argparse
import getpass

from jobs_platform.cli.requeue import add_requeue_options, run_requeue
from jobs_platform.cli.warehouse import command_settings, open_store
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.location import add_module_option


def register_accept_change(actions) -> None:
    accept = actions.add_parser(
        "accept-change",
        help="approve, once, the diff a partition's gate refused (expect=), and requeue it",
    )
    add_module_option(accept)
    accept.add_argument("asset", help="the backfill's asset")
    accept.add_argument("partition", help="the refused partition")
    add_requeue_options(accept)
    accept.set_defaults(handler=run_accept_change, parser=accept)


def run_accept_change(args: argparse.Namespace) -> int:
    """Stamp the latest refusal accepted, then requeue the partition (exit codes: requeue's)."""
    if not args.dry_run:
        store = open_store(command_settings(args.module))
        with store.begin() as connection:
            review = store.change_reviews.accept(
                connection, args.asset, args.partition, by=f"cli:{_person()}"
            )
        print(
            f"{args.asset}/{args.partition}: the change refused at {review.refused_at} is "
            f"accepted by {review.accepted_by}; it publishes once if its diff is the same"
        )
    return run_requeue(args, Selection(asset=args.asset, partition=args.partition))


def _person() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
