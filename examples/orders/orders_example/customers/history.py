"""One customer's order history, recomputed from the orders landing input (no Dagster).

The input is every day file of the orders landing zone, validated by the orders example's
own reader, so both examples agree on what an order is. The landing zone and not the
`orders` table is the source on purpose: a customer partition then depends on nothing
another run has to have written first, and a re-sync into an empty warehouse gives the
same rows. A real re-sync would fetch the customer's slice from its source system; this
example reads every day instead, which is fine for sample data only.

A day whose file has an invalid line fails the re-sync terminally: the bad line might
be one of this customer's orders, so no correct history can be computed until it is fixed.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections import Counter
from collections.abc import Iterator

import fsspec
import pandas as pd

from jobs_platform import TerminalError
from orders_example.orders.landing import landing_file, read_order_chunks

HISTORY_COLUMNS = ("customer_id", "day", "currency", "order_count", "revenue_cents")

# Read a day in large chunks: only the rows of one customer are kept.
_READ_CHUNK_ROWS = 100_000
_DAY_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})\.jsonl")
# Customer ids are positive int64 values written in canonical form, so that "007" and
# "7" are never two partitions of one customer.
_CUSTOMER_ID = re.compile(r"[1-9][0-9]{0,18}")
_INT64_MAX = 2**63 - 1


def customer_id_of(partition: str) -> int:
    """The customer id a partition key names, or a terminal error for any other key."""
    if (
        not isinstance(partition, str)
        or not _CUSTOMER_ID.fullmatch(partition)
        or int(partition) > _INT64_MAX
    ):
        raise TerminalError(
            f"a customers partition is a customer id (a positive integer), got {partition!r}"
        )
    return int(partition)


def landing_days(landing_root: str) -> list[tuple[str, str]]:
    """(day, path) of every orders landing file, oldest day first."""
    fs, root = fsspec.core.url_to_fs(landing_root)
    folder = posixpath.join(root, "orders")
    if not fs.isdir(folder):
        return []
    days = []
    for name in fs.ls(folder, detail=False):
        match = _DAY_FILE.fullmatch(posixpath.basename(name))
        if match and _is_day(match.group(1)):
            days.append(match.group(1))
    return [(day, landing_file(landing_root, day)) for day in sorted(days)]


def customer_history(landing_root: str, customer_id: int) -> pd.DataFrame:
    """Paid order count and revenue of one customer per (day, currency), ordered."""
    days = landing_days(landing_root)
    if not days:
        raise TerminalError(f"no input: no orders landing files under {landing_root}")
    frames = [
        _paid_orders_of(orders, customer_id).assign(day=dt.date.fromisoformat(day))
        for day, orders in _orders_by_day(days)
    ]
    paid = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if paid.empty:
        return pd.DataFrame(columns=list(HISTORY_COLUMNS))
    history = (
        paid.groupby(["day", "currency"], sort=True)
        .agg(order_count=("order_id", "size"), revenue_cents=("amount_cents", "sum"))
        .reset_index()
    )
    history.insert(0, "customer_id", customer_id)
    return history.astype({"order_count": "int64", "revenue_cents": "int64"})[list(HISTORY_COLUMNS)]


def busiest_customers(landing_root: str, count: int) -> list[int]:
    """The `count` customers with the most paid orders (ties by id): sample partitions."""
    paid_orders: Counter[int] = Counter()
    for _day, orders in _orders_by_day(landing_days(landing_root)):
        paid_orders.update(orders.loc[orders["status"] == "paid", "customer_id"].tolist())
    ranked = sorted(paid_orders.items(), key=lambda item: (-item[1], item[0]))
    return [customer for customer, _ in ranked[:count]]


def _orders_by_day(days: list[tuple[str, str]]) -> Iterator[tuple[str, pd.DataFrame]]:
    for day, path in days:
        chunks = list(read_order_chunks(path, day, _READ_CHUNK_ROWS))
        if not chunks:
            continue
        orders = pd.concat(chunks, ignore_index=True)
        # The orders contract: when an order_id repeats in a day, the last line wins,
        # whoever the earlier line said the customer was.
        yield day, orders.drop_duplicates("order_id", keep="last")


def _paid_orders_of(orders: pd.DataFrame, customer_id: int) -> pd.DataFrame:
    mine = orders[(orders["customer_id"] == customer_id) & (orders["status"] == "paid")]
    return mine[["order_id", "currency", "amount_cents"]]


def _is_day(text: str) -> bool:
    try:
        return dt.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
