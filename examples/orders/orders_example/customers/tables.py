"""The customers example's target table."""

from __future__ import annotations

import sqlalchemy as sa

customers_metadata = sa.MetaData()

# Per currency: summing cents across USD, EUR and GBP would mean nothing.
customer_order_history_table = sa.Table(
    "customer_order_history",
    customers_metadata,
    sa.Column("customer_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("currency", sa.String(3), primary_key=True),
    sa.Column("order_count", sa.BigInteger, nullable=False),  # paid orders
    sa.Column("revenue_cents", sa.BigInteger, nullable=False),  # sum over paid orders
)
