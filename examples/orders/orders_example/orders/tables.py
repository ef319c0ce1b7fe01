"""The orders example's target tables (the warehouse side of docs/example.md)."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform import UtcDateTime

orders_metadata = sa.MetaData()

orders_table = sa.Table(
    "orders",
    orders_metadata,
    sa.Column("order_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("customer_id", sa.BigInteger, nullable=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("ordered_at", UtcDateTime, nullable=False, index=True),
)

daily_revenue_table = sa.Table(
    "daily_revenue",
    orders_metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("currency", sa.String(3), primary_key=True),
    sa.Column("revenue_cents", sa.BigInteger, nullable=False),
    sa.Column("order_count", sa.BigInteger, nullable=False),
)
