"""A user's own code location whose backfill waits for its input: `ready=` and `max_wait=`.

One backfill, `landed_events`, daily from 2020-01-01, reading
`<landing>/landed_events/YYYY-MM-DD.csv` (`event_id,amount_cents`) into its own table.
A day whose file has not landed is not ready (`file_landed`, which takes the landing
resource as the reader does): it is held, not attempted, and launched by the holds sensor
once the file is there (a read takes `$STEERED_READ_SECONDS` more, 0 by default).
Past `max_wait` (`$STEERED_MAX_WAIT_SECONDS`, 3600 s by
default) a day still waiting is reported once. Ten partitions per run, so a Dagster
backfill of a few weeks is several runs. It imports only the public `jobs_platform`.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset, platform_definitions

steered_metadata = sa.MetaData()

landed_events_table = sa.Table(
    "landed_events",
    steered_metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


class Landing(dg.ConfigurableResource):
    """Where the daily CSV exports land."""

    root: str

    def csv(self, day: str) -> Path:
        return Path(self.root) / "landed_events" / f"{day}.csv"


def file_landed(source: PartitionInput, landing: Landing) -> bool:
    """A day is ready once its export has landed."""
    return landing.csv(source.partition_key).exists()


@backfill_asset(
    table=landed_events_table,
    partitions_def=dg.DailyPartitionsDefinition(start_date="2020-01-01"),
    partition_scope=lambda table, partition: table.c.day == dt.date.fromisoformat(partition),
    ready=file_landed,
    max_wait=dt.timedelta(seconds=float(os.environ.get("STEERED_MAX_WAIT_SECONDS", "3600"))),
    backfill_policy=dg.BackfillPolicy.multi_run(10),
)
def landed_events(source: PartitionInput, landing: Landing) -> Iterator[pd.DataFrame]:
    """One day's events, from its landed CSV."""
    # A test stretches each day's read to pause a backfill while its runs are in flight.
    time.sleep(float(os.environ.get("STEERED_READ_SECONDS", "0")))
    day = dt.date.fromisoformat(source.partition_key)
    frame = pd.read_csv(landing.csv(source.partition_key), dtype="int64")
    yield frame.assign(day=day)[["day", "event_id", "amount_cents"]]


defs = dg.Definitions.merge(
    platform_definitions([landed_events]),
    dg.Definitions(resources={"landing": Landing(root=dg.EnvVar("JOBS_PLATFORM_LANDING"))}),
)
