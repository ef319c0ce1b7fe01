"""The orders example's landing files: records to write, and the tables they must produce."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path


def order_line(
    order_id: int,
    *,
    day: str,
    amount_cents: int = 1_000,
    currency: str = "USD",
    status: str = "paid",
    customer_id: int = 1,
    second: int = 0,
) -> dict:
    """One valid landing record of `day` (a dict; write it with `write_landing_lines`)."""
    hours, remainder = divmod(second % 86_400, 3600)
    return {
        "schema_version": 1,
        "order_id": order_id,
        "customer_id": customer_id,
        "amount_cents": amount_cents,
        "currency": currency,
        "status": status,
        "ordered_at": f"{day}T{hours:02d}:{remainder // 60:02d}:{remainder % 60:02d}Z",
    }


def orders_landing_path(landing_root: str, day: str) -> Path:
    return Path(landing_root) / "orders" / f"{day}.jsonl"


def write_landing_lines(landing_root: str, day: str, lines: list[dict | str]) -> Path:
    """Write a day's landing file: dicts as JSON, strings verbatim (for malformed lines)."""
    path = orders_landing_path(landing_root, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def read_landing_lines(landing_root: str, day: str) -> list[dict]:
    path = orders_landing_path(landing_root, day)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_tables_from_landing(landing_root: str, day: str) -> tuple[list[tuple], list[tuple]]:
    """(orders rows, daily_revenue rows) a day's file must produce, derived without the framework.

    The contract (docs/example.md): one row per order_id, the last line wins;
    revenue and count per currency over `paid` orders. Rows are ordered by primary key, as
    `declared_rows`.
    """
    last_by_id: dict[int, dict] = {}
    for record in read_landing_lines(landing_root, day):
        last_by_id[record["order_id"]] = record
    orders_rows = []
    for order_id in sorted(last_by_id):
        record = last_by_id[order_id]
        ordered_at = dt.datetime.fromisoformat(record["ordered_at"])
        if ordered_at.tzinfo is None:
            ordered_at = ordered_at.replace(tzinfo=dt.UTC)
        orders_rows.append(
            (
                order_id,
                record["customer_id"],
                record["amount_cents"],
                record["currency"],
                record["status"],
                ordered_at.astimezone(dt.UTC),
            )
        )
    revenue: dict[str, list[int]] = {}
    for row in orders_rows:
        if row[4] == "paid":
            totals = revenue.setdefault(row[3], [0, 0])
            totals[0] += row[2]
            totals[1] += 1
    day_date = dt.date.fromisoformat(day)
    revenue_rows = [
        (day_date, currency, totals[0], totals[1]) for currency, totals in sorted(revenue.items())
    ]
    return orders_rows, revenue_rows
