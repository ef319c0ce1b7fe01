"""The Dagster floor of `bench backfill --shape hourly --via daemon`: plain Dagster only.

`hourly_events` as an expert writes it in plain Dagster, with nothing of the framework:
the same hourly partitions and backfill policy as the framework's `hourly_location`
(`hourly_partitions`), and for each hour of the run's range the hour's file read with the
bench's reader and merged with the plain script's statements, one transaction an hour
(`hourly_plain.load_hours`, idempotent: a re-run changes no row that did not change);
one `MaterializeResult` for the range, which Dagster records per partition. Steps run as
the framework's do, each in a process forked from a forkserver that preloaded this
module, in Dagster's own executor configuration.

Launched like the framework's backfill (GraphQL `launchPartitionBackfill` on a webserver
and daemon of its own), its run window is what Dagster itself costs for these
partitions: the framework's run window minus it is the framework's own cost. The bench's
webserver and daemon load it with `-m benchmarks.hourly_floor_location`.
"""

import warnings

import dagster as dg
import psycopg

from benchmarks.hourly_partitions import hourly_partitions, policy_of_this_location
from benchmarks.hourly_plain import load_hours, plain_statements

# Where the bench tells the location its warehouse (a libpq connection string whose
# options select the measurement's schema) and its landing zone.
DSN_VARIABLE = "JOBS_PLATFORM_BENCH_FLOOR_DSN"
LANDING_VARIABLE = "JOBS_PLATFORM_LANDING"


class Warehouse(dg.ConfigurableResource):
    """PostgreSQL as psycopg connects to it."""

    dsn: str


class Landing(dg.ConfigurableResource):
    """The folder of the hours' files."""

    root: str


def _load_hours(
    context: dg.AssetExecutionContext, warehouse: Warehouse, landing: Landing
) -> dg.MaterializeResult:
    """Each hour of the run's range loaded in its own transaction."""
    keys = context.partition_keys
    statements = plain_statements()
    context.log.info(f"loading {len(keys)} hour(s) from {keys[0]}")
    rows = 0
    with psycopg.connect(warehouse.dsn) as connection:
        for key in keys:
            rows += load_hours(connection, landing.root, [key], statements)
    context.log.info(f"loaded {len(keys)} hour(s), {rows} row(s)")
    return dg.MaterializeResult(metadata={"rows": rows})


# `backfill_policy` is beta in Dagster 1.13: its warning would greet every process that
# loads the location.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    hourly_events = dg.asset(
        name="hourly_events",
        partitions_def=hourly_partitions,
        backfill_policy=policy_of_this_location(),
    )(_load_hours)


defs = dg.Definitions(
    assets=[hourly_events],
    resources={
        "warehouse": Warehouse(dsn=dg.EnvVar(DSN_VARIABLE)),
        "landing": Landing(root=dg.EnvVar(LANDING_VARIABLE)),
    },
    executor=dg.multiprocess_executor.configured({"start_method": {"forkserver": {}}}),
)
