"""`jobs-platform plan`: what a launch of a range would do to each partition, and why.

It loads the code location (`-m`), as `dead-letter requeue --wait` does: the keys of the
range, what each partition reads and feeds, and the input's fingerprint now need it. It
writes nothing. The rows come from `steering.plan`, the same rules a launch's attempts
apply (docs/operating.md, "Before launching: plan").
"""

from __future__ import annotations

import argparse
import json

from jobs_platform.location import add_module_option

# Rows printed before the rest is summed up (the totals count every row; --json has all).
# Done partitions whose input is unchanged are left out unless --all: at 3 a.m. what
# matters is what will run and what is held back.
SHOWN_ROWS = 50


def register(commands) -> None:
    parser = commands.add_parser(
        "plan", help="what a launch of a range would do to each partition, and why"
    )
    add_module_option(parser)
    parser.add_argument("asset", help="the backfill (its asset key, e.g. orders)")
    parser.add_argument("--from", dest="first", metavar="KEY", help="the range's first key")
    parser.add_argument("--to", dest="last", metavar="KEY", help="the range's last key")
    parser.add_argument(
        "--partition",
        dest="partitions",
        metavar="KEY",
        action="append",
        default=[],
        help="plan this partition (repeat for several); instead of --from/--to",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help=f"print every row (default: the first {SHOWN_ROWS} not done_unchanged)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from jobs_platform.cli.warehouse import open_store
    from jobs_platform.location import dagster_instance, load_definitions, location_settings
    from jobs_platform.steering.plan_location import plan_backfill, plan_keys

    if args.partitions and (args.first is not None or args.last is not None):
        raise ValueError("pass --from/--to or --partition, not both")
    if not args.partitions and args.first is None and args.last is None:
        raise ValueError("name the partitions: --from KEY --to KEY, or --partition KEY …")
    definitions = load_definitions(args.module)
    # The location's own warehouse (its bound resource), whatever the environment says.
    settings = location_settings(definitions)
    store = open_store(settings)
    with dagster_instance() as instance:
        keys = plan_keys(
            definitions,
            args.asset,
            first=args.first,
            last=args.last,
            keys=args.partitions,
            instance=instance,
        )
        plan = plan_backfill(definitions, store, settings, args.asset, keys, instance)
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    _print(plan, shown=None if args.all else SHOWN_ROWS)
    return 0


def _print(plan, *, shown: int | None) -> None:
    from jobs_platform.steering.plan_row import Reason

    rows = list(plan.rows)
    if shown is not None:
        rows = [row for row in rows if row.reason is not Reason.DONE_UNCHANGED][:shown]
    print(f"{'partition':<22}{'action':<8}{'reason':<16}detail")
    for row in rows:
        print(f"{row.partition:<22}{row.action:<8}{row.reason:<16}{_detail(row)}".rstrip())
    if len(rows) < len(plan.rows):
        print(f"… {len(plan.rows) - len(rows)} more rows (--all prints them, --json too)")
    totals = plan.totals
    reasons = ", ".join(f"{reason} {count}" for reason, count in totals["by_reason"].items())
    print(
        f"\n{plan.asset}: {totals['partitions']} partitions: run {totals['run']}, "
        f"skip {totals['skip']} ({reasons})"
    )
    if totals["downstream"]:
        print(f"downstream partitions made stale by the runs: {totals['downstream']}")
    print(plan.estimate.describe())
    for note in plan.notes:
        print(f"note: {note}")


def _detail(row) -> str:
    parts = []
    if row.until is not None:
        parts.append(f"until {row.until:%Y-%m-%d %H:%M:%S} UTC")
    if row.run_id is not None:
        parts.append(f"run {row.run_id}")
    if row.upstream is not None:
        parts.append(f"upstream {row.upstream}")
    if row.since is not None:
        parts.append(f"held since {row.since:%Y-%m-%d %H:%M:%S} UTC")
    if row.past_max_wait:
        parts.append("past its max_wait")
    if row.failures is not None:
        parts.append(f"quarantined by the launch: {row.failures} attempts, the last ones crashed")
    if row.signature is not None:
        parts.append(f"cause {row.signature}")
    if row.probe is not None:
        parts.append(f"probe {row.probe} trying")
    elif row.next_probe_at is not None:
        parts.append(f"next probe {row.next_probe_at:%Y-%m-%d %H:%M:%S} UTC")
    if row.change is not None:
        parts.append(_change(row.change))
    if row.note is not None:
        parts.append(row.note)
    if row.downstream:
        more = f" +{len(row.downstream) - 3}" if len(row.downstream) > 3 else ""
        parts.append(f"downstream {', '.join(row.downstream[:3])}{more}")
    return "; ".join(parts)


def _change(change) -> str:
    """A gated partition's expected change: `+3 ~400 -0 =597, refused (…)`."""
    if "error" in change:
        return f"change not diffed: {change['error']}"
    counts = (
        f"change +{change['inserted']} ~{change['updated']} -{change['swept']} "
        f"={change['unchanged']}"
    )
    if change["refused"]:
        return f"{counts}, refused ({'; '.join(change['broken'])})"
    return counts
