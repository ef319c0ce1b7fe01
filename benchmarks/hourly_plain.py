"""The expert's plain load of hourly events: no framework, no Dagster.

What `bench backfill --shape hourly` measures the framework against, used twice with the
same statements: by the plain scripts (`hourly.plain_script`: a batch of hours per
transaction, no Dagster at all) and by the Dagster floor (`hourly_floor_location`: an
hour per transaction inside a plain Dagster asset). The hours' files are read with the
bench's reader (`read_hour_rows`, each line validated), the rows COPYed (binary, Python
values: the plain script's staging, `bench.baselines`) into a temporary stage and merged
with a variant of `baselines.merge_statements`, by default `on_conflict`: every hour is
new, so the variants filtering unchanged rows would only add work. A re-run of
unchanged rows writes no new row version.
"""

from __future__ import annotations

import pandas as pd
import psycopg
from psycopg import sql

from benchmarks import baselines
from benchmarks.hourly_events import EVENT_COLUMNS, events_table, hour_file, read_hour_rows

KEY = ("event_id",)
DEFAULT_VARIANT = "on_conflict"
# The stage's columns as COPY sends them: `occurred_at` as UTC microseconds, what the
# reader returns; the merge turns it into a timestamptz.
STAGE_TYPES = ["int8", "int8", "text", "int8", "int8"]
STAGE = baselines.StageShape(
    sql.SQL(
        "CREATE TEMPORARY TABLE stage (event_id int8, user_id int8, kind text, "
        "value_cents int8, occurred_at_us int8) ON COMMIT DROP"
    ),
    ("event_id", "user_id", "kind", "value_cents", "occurred_at_us"),
    {
        "occurred_at": sql.SQL(
            "(timestamptz '1970-01-01 00:00:00+00' + s.occurred_at_us * interval '1 microsecond')"
        )
    },
)


def plain_statements(variant: str = DEFAULT_VARIANT) -> baselines.PlainStatements:
    return baselines.merge_statements(events_table.name, KEY, EVENT_COLUMNS, variant, STAGE)


def load_hours(
    connection: psycopg.Connection,
    landing: str,
    keys: list[str],
    statements: baselines.PlainStatements,
) -> int:
    """The hours `keys` read from `landing` and merged in ONE transaction; the rows sent
    (one per event id: the last line wins, as a merge of the batch must)."""
    rows = [row for key in keys for row in read_hour_rows(hour_file(landing, key))]
    return baselines.merge_rows(connection, statements, [0], STAGE_TYPES, rows)


def plain_plans(dsn: str, landing: str, batches: dict[str, list[str]], rows: int) -> dict:
    """Each variant's plan of each batch's first merge (`batches`: name → its hours),
    into the empty `events_table` at `dsn` and into it loaded with every hour (`rows`)."""
    variants = {variant: plain_statements(variant) for variant in baselines.PLAIN_VARIANTS}
    plans: dict[str, dict[str, str]] = {}
    for table_rows in (0, rows):
        if table_rows:
            every_hour = sorted({key for keys in batches.values() for key in keys})
            with psycopg.connect(dsn) as connection:
                load_hours(connection, landing, every_hour, plain_statements())
        for name, keys in batches.items():
            rows_read = [row for key in keys for row in read_hour_rows(hour_file(landing, key))]
            chunk = pd.DataFrame(rows_read, columns=list(STAGE.columns))
            label = f"batch={name},chunk_rows={len(chunk)},table_rows={table_rows}"
            baselines.add_plans(plans, baselines.merge_plans(dsn, variants, KEY, chunk, label))
    return plans
