"""The open circuits, read: what `status`, `dead-letter groups`, `platform_health` and
`/metrics` show of the circuit breaker (`steering.circuits`)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import circuits


def open_circuits(connection: sa.Connection, assets: Sequence[str] | None = None) -> list[TableRow]:
    """The open circuits (of `assets`, else of every backfill), oldest first."""
    query = sa.select(circuits).where(
        circuits.c.opened_at.is_not(None), circuits.c.closed_at.is_(None)
    )
    if assets is not None:
        query = query.where(circuits.c.asset.in_(list(assets)))
    return list(connection.execute(query.order_by(circuits.c.opened_at, circuits.c.asset)))


def open_circuit_counts(connection: sa.Connection) -> dict[str, int]:
    """How many circuits of each backfill are open (the metric `jobs_platform_circuit_open`)."""
    rows = connection.execute(
        sa.select(circuits.c.asset, sa.func.count())
        .where(circuits.c.opened_at.is_not(None), circuits.c.closed_at.is_(None))
        .group_by(circuits.c.asset)
    )
    return {asset: count for asset, count in rows}


def circuits_report(
    connection: sa.Connection, assets: Sequence[str] | None = None
) -> dict[str, list[dict[str, object]]]:
    """The open circuits per backfill, JSON-ready: what `status` and `platform_health` show."""
    report: dict[str, list[dict[str, object]]] = {}
    for row in open_circuits(connection, assets):
        report.setdefault(row.asset, []).append(
            {
                "signature": row.signature,
                "error_class": row.error_class,
                "error_type": row.error_type,
                "last_error": (row.last_error or "")[:300],
                "opened_at": row.opened_at.isoformat(),
                "partitions": row.partitions,
                "next_probe_at": row.next_probe_at.isoformat() if row.next_probe_at else None,
                "probe_partition": row.probe_partition,
                "probes_failed": row.probes_failed,
                "snoozes": row.snoozes,
            }
        )
    return report
