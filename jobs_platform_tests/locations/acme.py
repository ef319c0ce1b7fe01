"""A user's own code location, as a team would write it outside the framework's package.

One backfill, `acme_events`, over its own table `acme_events` (natural key: `day`,
`source`, `event_id`), reading `<landing>/acme_events/YYYY-MM-DD.csv` with the header
`source,event_id,amount_cents`. A row that does not parse is a terminal error, so a
poison day is quarantined after one attempt. It imports only the public `jobs_platform`.
The CLI tests load it with `-m`; no test imports it into its own process, so its
backfill stays out of the suite's registry.

Why a re-run is safe: rows are upserted by their natural key and a day's rows are the
day's alone (`events_of_day`), so the rows of a day that left the input are swept.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import InputValidationError, PartitionInput, backfill_asset, platform_definitions

COLUMNS = ["source", "event_id", "amount_cents"]

acme_metadata = sa.MetaData()

acme_events_table = sa.Table(
    "acme_events",
    acme_metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("source", sa.String(32), primary_key=True),
    sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)


def events_of_day(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(partition)


class AcmeLanding(dg.ConfigurableResource):
    """Where ACME's daily CSV exports land."""

    root: str

    def csv(self, day: str) -> Path:
        return Path(self.root) / "acme_events" / f"{day}.csv"


@backfill_asset(
    table=acme_events_table,
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
    partition_scope=events_of_day,
)
def acme_events(source: PartitionInput, landing: AcmeLanding) -> Iterator[pd.DataFrame]:
    """ACME's events of one day, from the landing zone's CSV."""
    path = landing.csv(source.partition_key)
    if not path.exists():
        raise InputValidationError(f"no input: {path} does not exist")
    day = dt.date.fromisoformat(source.partition_key)
    for chunk in pd.read_csv(path, dtype=str, chunksize=source.chunk_rows):
        if list(chunk.columns) != COLUMNS:
            raise InputValidationError(f"expected the header {','.join(COLUMNS)}")
        frame = chunk.assign(day=day)
        for column in ("event_id", "amount_cents"):
            numbers = pd.to_numeric(frame[column], errors="coerce")
            bad = numbers.isna()
            if bad.any():
                line = int(bad.to_numpy().argmax()) + int(chunk.index[0]) + 2  # 1 + header
                raise InputValidationError("not an integer", line=line, field=column)
            frame[column] = numbers.astype("int64")
        yield frame[["day", *COLUMNS]]


defs = dg.Definitions.merge(
    platform_definitions([acme_events]),
    # The suite's landing folder, read when a step runs.
    dg.Definitions(resources={"landing": AcmeLanding(root=dg.EnvVar("JOBS_PLATFORM_LANDING"))}),
)
