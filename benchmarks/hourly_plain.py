"""The expert's plain load of hourly events: no framework, no Dagster.

What `bench backfill --shape hourly` measures the framework against, used twice with the
same statements: by the plain scripts (`hourly.plain_script`: a batch of hours per
transaction, no Dagster at all) and by the Dagster floor (`hourly_floor_location`: an
hour per transaction inside a plain Dagster asset). The hours' files are read with the
bench's reader (`read_hour_rows`, each line validated), the rows COPYed (binary) into a
temporary stage and merged with one `INSERT … ON CONFLICT DO UPDATE … WHERE … IS
DISTINCT FROM`: a re-run of unchanged rows writes no new row version.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from benchmarks.hourly_events import EVENT_COLUMNS, events_table, hour_file, read_hour_rows

# The stage's columns as COPY sends them (`occurred_at` as UTC microseconds, what the
# reader returns; the merge turns it into a timestamptz).
STAGE_TYPES = ["int8", "int8", "text", "int8", "int8"]
CREATE_STAGE = sql.SQL(
    "CREATE TEMPORARY TABLE stage (event_id int8, user_id int8, kind text, "
    "value_cents int8, occurred_at_us int8) ON COMMIT DROP"
)
COPY_STAGE = sql.SQL("COPY stage FROM STDIN (FORMAT BINARY)")


@dataclass(frozen=True)
class PlainStatements:
    """The three statements of one batch's transaction."""

    create_stage: sql.SQL
    copy_stage: sql.SQL
    merge: sql.Composed


def plain_statements() -> PlainStatements:
    ident = sql.Identifier
    others = [name for name in EVENT_COLUMNS if name != "event_id"]
    merge = sql.SQL(
        "INSERT INTO {table} AS t ({names}) SELECT s.event_id, s.user_id, s.kind, "
        "s.value_cents, timestamptz '1970-01-01 00:00:00+00' + s.occurred_at_us * "
        "interval '1 microsecond' FROM stage AS s ON CONFLICT (event_id) DO UPDATE SET "
        "{sets} WHERE ({current}) IS DISTINCT FROM ({incoming})"
    ).format(
        table=ident(events_table.name),
        names=sql.SQL(", ").join(map(ident, EVENT_COLUMNS)),
        sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(ident(n)) for n in others),
        current=sql.SQL(", ").join(sql.SQL("t.{}").format(ident(n)) for n in others),
        incoming=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(ident(n)) for n in others),
    )
    return PlainStatements(CREATE_STAGE, COPY_STAGE, merge)


def load_hours(
    connection: psycopg.Connection, landing: str, keys: list[str], statements: PlainStatements
) -> int:
    """The hours `keys` read from `landing` and merged in ONE transaction; the rows sent
    (one per event id: the last line wins, as a merge of the batch must)."""
    latest: dict[int, tuple] = {}
    for key in keys:
        for row in read_hour_rows(hour_file(landing, key)):
            latest[row[0]] = row
    with connection.transaction(), connection.cursor() as cursor:
        cursor.execute(statements.create_stage)
        with cursor.copy(statements.copy_stage) as copy:
            copy.set_types(STAGE_TYPES)
            for row in latest.values():
                copy.write_row(row)
        cursor.execute(statements.merge)
    return len(latest)
