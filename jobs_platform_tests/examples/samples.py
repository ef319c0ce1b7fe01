"""Small sample inputs of the bundled examples, each returning the partitions it seeded:
what the generic idempotency suite (test_generic_backfills.py) runs every backfill on."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from orders_example.customers.assets import CUSTOMER_PARTITIONS
from orders_example.customers.history import busiest_customers
from orders_example.orders.seed import seed_orders

EXAMPLE_DAYS = (dt.date(2024, 1, 2), dt.date(2024, 1, 3))
EXAMPLE_CUSTOMERS = 3


def seed_example_orders(landing_root: str) -> list[str]:
    """Two days of the orders example's input, as its daily partitions."""
    seed_orders(landing_root, EXAMPLE_DAYS[0], EXAMPLE_DAYS[-1], orders_per_day=60)
    return [day.isoformat() for day in EXAMPLE_DAYS]


def seed_example_customers(landing_root: str) -> list[str]:
    """The orders example's sample input, and its busiest customers as partitions.

    The keys are added to the `customers` dynamic partitions of the Dagster instance that
    `DAGSTER_HOME` names, so that runs of them can start.
    """
    seed_example_orders(landing_root)
    keys = [str(customer) for customer in busiest_customers(landing_root, EXAMPLE_CUSTOMERS)]
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(CUSTOMER_PARTITIONS, keys)  # adds only new keys
    return keys
