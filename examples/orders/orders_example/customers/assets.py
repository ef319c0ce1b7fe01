"""The customers example: `customer_order_history`, one dynamic partition per customer id.

Why a re-run is safe: the asset only upserts by (`customer_id`, `day`, `currency`), every
row is recomputed from the landing input rather than incremented, and the customer's rows
no longer in the input are swept when the partition finalizes. Being a `backfill_asset`,
it also gets checkpoints, fencing, the error taxonomy and the quarantine.

New customers become partitions when something adds their ids to the `customers`
dynamic partitions: `backfill_request_sensor` does it for requested keys.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from orders_example.customers.history import customer_history, customer_id_of
from orders_example.customers.tables import customer_order_history_table
from orders_example.orders.resources import LandingZone

CUSTOMER_PARTITIONS = "customers"
customer_partitions = dg.DynamicPartitionsDefinition(name=CUSTOMER_PARTITIONS)


def rows_of_customer(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.customer_id == customer_id_of(partition)


@backfill_asset(
    table=customer_order_history_table,
    partitions_def=customer_partitions,
    partition_scope=rows_of_customer,
)
def customer_order_history(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    """Paid orders and revenue per day and currency of one customer, re-synced from landing."""
    history = customer_history(landing.resolved_root(), customer_id_of(source.partition_key))
    for start in range(0, len(history), source.chunk_rows):
        yield history.iloc[start : start + source.chunk_rows]
