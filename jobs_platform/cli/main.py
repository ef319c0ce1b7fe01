"""`jobs-platform`: inspect and requeue the dead letter, read status and the outbox, pause
and resume a backfill, serve metrics, migrate the framework's tables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs_platform.cli.warehouse import WarehouseUnavailable
from jobs_platform.settings import SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from jobs_platform.store.migrate import SchemaNotReady

    try:
        return args.handler(args)
    except (SettingsError, WarehouseUnavailable, ValueError, LookupError, SchemaNotReady) as exc:
        # SchemaNotReady: a read command on a warehouse that `db upgrade` has not brought
        # to this version; its message names the database, its revision and what to run.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        from jobs_platform.store.db import dispose_engines

        dispose_engines()


def _parser() -> argparse.ArgumentParser:
    from jobs_platform.cli import backfill, db, dead_letter, metrics, outbox, plan, status

    parser = argparse.ArgumentParser(
        prog="jobs-platform",
        description="Idempotent, retry-safe historical backfills on Dagster.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dead_letter.register(commands)
    status.register(commands)
    backfill.register(commands)
    plan.register(commands)
    outbox.register(commands)
    db.register(commands)
    metrics.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
