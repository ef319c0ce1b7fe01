"""`orders-example seed`: write deterministic landing files for the orders example."""

from __future__ import annotations

import argparse
import datetime as dt

from jobs_platform.settings import Settings


def register(commands) -> None:
    parser = commands.add_parser("seed", help="write deterministic orders landing files")
    parser.add_argument("--start", required=True, type=parse_day, help="first day, YYYY-MM-DD")
    parser.add_argument("--end", required=True, type=parse_day, help="last day, YYYY-MM-DD")
    parser.add_argument("--orders-per-day", type=int, default=100, metavar="N")
    parser.add_argument(
        "--poison",
        action="append",
        type=parse_day,
        default=[],
        metavar="D",
        help="a day that gets malformed lines (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed")
    parser.set_defaults(handler=run)


def parse_day(text: str) -> dt.date:
    """argparse type for YYYY-MM-DD days."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


def run(args: argparse.Namespace) -> int:
    from orders_example.orders.seed import seed_orders

    landing = Settings.from_env().landing_root
    paths = seed_orders(
        landing,
        args.start,
        args.end,
        orders_per_day=args.orders_per_day,
        poison_days=args.poison,
        seed=args.seed,
    )
    poison = f", poison: {', '.join(d.isoformat() for d in args.poison)}" if args.poison else ""
    print(f"wrote {len(paths)} landing file(s) under {landing}/orders{poison}")
    return 0
