"""`jobs-platform`: seed landing data, run the demo, inspect and requeue the dead letter."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs_platform.cli.warehouse import WarehouseUnavailable
from jobs_platform.settings import SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (SettingsError, WarehouseUnavailable, ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        from jobs_platform.store.db import dispose_engines

        dispose_engines()


def _parser() -> argparse.ArgumentParser:
    from jobs_platform.cli import bench, dead_letter, demo, outbox, seed, status

    parser = argparse.ArgumentParser(
        prog="jobs-platform",
        description="Idempotent, retry-safe historical backfills on Dagster.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    seed.register(commands)
    demo.register(commands)
    dead_letter.register(commands)
    status.register(commands)
    outbox.register(commands)
    bench.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
