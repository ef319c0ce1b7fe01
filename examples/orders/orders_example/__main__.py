"""`orders-example seed|demo`: write the example's landing files, run its demo backfill."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs_platform.settings import SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    from orders_example import demo, seed_command

    parser = argparse.ArgumentParser(
        prog="orders-example",
        description="The orders example of jobs_platform: seed its landing zone, run its demo.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    seed_command.register(commands)
    demo.register(commands)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (SettingsError, ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        from jobs_platform.store.db import dispose_engines

        dispose_engines()


if __name__ == "__main__":
    sys.exit(main())
