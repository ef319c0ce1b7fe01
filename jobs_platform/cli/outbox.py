"""`jobs-platform outbox list`: backfill requests and how they stand."""

from __future__ import annotations

import argparse
import json

import sqlalchemy as sa

from jobs_platform.cli.warehouse import add_reading_command, command_settings, open_store
from jobs_platform.dead_letter.view import one_line
from jobs_platform.outbox.queue import list_requests
from jobs_platform.store.schema import OutboxStatus

LIST_FIELDS = (
    "id", "asset", "partitions", "status", "reason", "correlation_id", "created_at", "error",
)  # fmt: skip
# The table keeps every request; the newest are the ones worth a look.
DEFAULT_LIMIT = 100


def register(commands) -> None:
    parser = commands.add_parser("outbox", help="inspect backfill requests (the outbox)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = add_reading_command(
        actions,
        "list",
        "backfill requests, newest last: the warehouse's, whatever the location",
        run_list,
    )
    listing.add_argument(
        "--status", choices=[str(status) for status in OutboxStatus], help="only this status"
    )
    listing.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help="the newest N requests"
    )


def request_summary(row: sa.Row) -> dict:
    return {
        "id": row.id,
        "asset": row.asset,
        "partitions": _partitions(row.partitions),
        "status": row.status,
        "reason": row.reason,
        "correlation_id": row.correlation_id,
        "created_at": row.created_at.isoformat(),
        "error": row.error,
    }


def run_list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    # The outbox is the warehouse's, shared by every code location writing to it: each
    # location's sensor claims the requests for its own assets, and a request for an asset
    # no location serves stays pending. Every request is listed, so that one waiting for
    # a location that is not loaded shows. A named location names the warehouse (its
    # bound `jobs_platform` resource); without one, the environment does.
    store = open_store(command_settings(args.module))
    statuses = [OutboxStatus(args.status)] if args.status else None
    with store.connect() as connection:
        rows = list_requests(connection, limit=args.limit, statuses=statuses)
        stats = store.outbox_backlog.queue_stats(connection)
    requests = [request_summary(row) for row in rows]
    if args.json:
        print(json.dumps(requests, indent=2))
        return 0
    for request in requests:
        partitions = ", ".join(request["partitions"][:5])
        if len(request["partitions"]) > 5:
            partitions += f", … ({len(request['partitions'])} partitions)"
        print(
            f"#{request['id']}  {request['status']:<8}  {request['asset']} [{partitions}]  "
            f"{request['created_at']}  correlation {request['correlation_id'] or '-'}\n"
            f"    reason: {one_line(request['reason'])}"
        )
        if request["error"]:
            print(f"    error:  {one_line(request['error'])}")
    age = stats.oldest_pending_age_seconds
    oldest = f"oldest pending {age:.0f}s ago" if age is not None else "none waiting"
    print(
        f"{stats.pending} pending ({oldest}); {stats.claimed} claimed, {stats.launched} "
        f"launched, {stats.rejected} rejected"
    )
    return 0


def _partitions(text: str) -> list[str] | str:
    # Rows are shown as stored, even one the sensor rejected for malformed partitions.
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, list) else text
