"""The plain script: what a user would write instead of the framework, sharing no code
with it.

Nothing here imports the framework's writer: this is the baseline the writer is measured
against, written as an engineer loading PostgreSQL by hand would write it, with psycopg 3
only. The COPY floors are in `bench.floors`.

Per chunk, one transaction: the chunk deduplicated on its key (the last row wins), a
temporary stage filled the fastest way psycopg offers from a DataFrame
(`stage_copy.FASTEST`, chosen by `bin/bench staging --rows 200000 --repeats 3`), then one
merging statement. Idempotent, and no new row version for an unchanged row. Which merge
is fastest depends on the changed fraction and the chunk size, so there are four
(`PLAIN_VARIANTS`), and each bench reports the best:

- `on_conflict`: `INSERT … SELECT … ON CONFLICT DO UPDATE … WHERE (…) IS DISTINCT FROM
  (…)`.
- `not_exists`: the same, the unchanged rows filtered out first by `NOT EXISTS`, so that
  they are not locked. On a 1,000,000-row table its plan is a nested-loop anti-join (a
  probe per staged row) at 10,000-row chunks but a hash anti-join reading the whole
  table at 50,000, with or without ANALYZE of the stage.
- `scalar_probe`: the same filter as a correlated scalar subquery, which PostgreSQL
  cannot turn into a join: one index probe per staged row, whatever the sizes.
- `merge`: PostgreSQL 15's `MERGE`, after ANALYZE of the stage (its join is chosen from
  the stage's size; the other variants' plans were the same with or without it).

Each chunk's transaction sets `jit = off`, as the framework's merge does: its plans cross
PostgreSQL's JIT threshold at 50,000-row chunks, and compiling costs ~20 ms a chunk.

`merge_plan` EXPLAINs a variant on a staged chunk (rolled back), so that each bench can
show the plans it timed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import psycopg
from psycopg import sql

from benchmarks import stage_copy

PLAIN_VARIANTS = ("on_conflict", "not_exists", "scalar_probe", "merge")
_ANALYZED = {"merge"}
# Each chunk's transaction turns JIT off: `EXPLAIN ANALYZE` of the probe variants at
# 50,000-row chunks showed ~20 ms a chunk compiling expressions for a merge over indexes.
NO_JIT = "SET LOCAL jit = off"


@dataclass(frozen=True)
class PlainStatements:
    """One variant's statements for one table: what each chunk's transaction runs."""

    create_stage: sql.SQL | sql.Composed
    stage: sql.Composed  # `stage (col, …)`, what the COPY fills
    merge: sql.Composed
    analyze_stage: bool


def plain_script(
    dsn: str,
    table: str,
    key: Sequence[str],
    frame: pd.DataFrame,
    chunk_rows: int,
    variant: str = "on_conflict",
) -> float:
    """Seconds to stage-and-merge `frame` into `table`, chunk by chunk (all of it timed:
    the values' formatting too)."""
    statements = merge_statements(table, key, list(frame.columns), variant)
    with psycopg.connect(dsn) as connection:
        began = time.perf_counter()
        for start in range(0, len(frame), chunk_rows):
            merge_chunk(connection, statements, key, frame.iloc[start : start + chunk_rows])
        return time.perf_counter() - began


@dataclass(frozen=True)
class StageShape:
    """A stage unlike the table: how to create it, its columns in COPY order, and the
    table's columns it holds in another form (each an expression over the stage `s`).

    Example: an hour's events staged with `occurred_at_us int8`, the table's
    `occurred_at` computed from it by the server.
    """

    create: sql.SQL | sql.Composed
    columns: Sequence[str]
    computed: Mapping[str, sql.Composable]


def merge_statements(
    table: str,
    key: Sequence[str],
    columns: Sequence[str],
    variant: str,
    shape: StageShape | None = None,
) -> PlainStatements:
    """The statements of `variant` merging a stage into `table`'s `columns` (the stage is
    shaped like the table unless `shape` says otherwise; the key is staged as is)."""
    if variant not in PLAIN_VARIANTS:
        raise ValueError(f"unknown plain-script variant {variant!r}: one of {PLAIN_VARIANTS}")
    others = [name for name in columns if name not in key]
    ident = sql.Identifier
    names = sql.SQL(", ").join(map(ident, columns))
    computed = shape.computed if shape is not None else {}

    def listed(alias: str, names: Sequence[str]) -> sql.Composable:
        if alias == "s":  # the staged values, computed where the stage holds another form
            return sql.SQL(", ").join(
                computed.get(n, sql.SQL("s.{}").format(ident(n))) for n in names
            )
        return sql.SQL(", ").join(sql.SQL(alias + ".{}").format(ident(n)) for n in names)

    def matching(alias: str) -> sql.Composable:
        return sql.SQL(" AND ").join(
            sql.SQL(alias + ".{0} = s.{0}").format(ident(name)) for name in key
        )

    if shape is None:
        shape = StageShape(
            sql.SQL(
                "CREATE TEMPORARY TABLE stage (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP"
            ).format(ident(table)),
            columns,
            {},
        )
    if variant == "merge":
        merge = sql.SQL(
            "MERGE INTO {table} AS t USING stage AS s ON {matches} "
            "WHEN MATCHED AND ({current}) IS DISTINCT FROM ({incoming}) THEN UPDATE SET {sets} "
            "WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
        ).format(
            table=ident(table),
            matches=matching("t"),
            current=listed("t", others),
            incoming=listed("s", others),
            sets=sql.SQL(", ").join(
                sql.SQL("{} = {}").format(ident(n), listed("s", [n])) for n in others
            ),
            names=names,
            values=listed("s", columns),
        )
    else:
        unchanged_filter = {
            "on_conflict": sql.SQL(""),
            "not_exists": sql.SQL(
                " WHERE NOT EXISTS (SELECT 1 FROM {table} AS c WHERE {matches} "
                "AND ({current}) IS NOT DISTINCT FROM ({incoming}))"
            ),
            # A scalar subquery in WHERE stays a SubPlan: one probe of the key's index
            # per staged row (NULL when the key is new).
            "scalar_probe": sql.SQL(
                " WHERE (SELECT ({current}) IS NOT DISTINCT FROM ({incoming}) "
                "FROM {table} AS c WHERE {matches}) IS NOT TRUE"
            ),
        }[variant].format(
            table=ident(table),
            matches=matching("c"),
            current=listed("c", others),
            incoming=listed("s", others),
        )
        merge = sql.SQL(
            "INSERT INTO {table} AS t ({names}) SELECT {values} FROM stage AS s{filtered} "
            "ON CONFLICT ({keys}) DO UPDATE SET {sets} "
            "WHERE ({current}) IS DISTINCT FROM ({incoming})"
        ).format(
            table=ident(table),
            names=names,
            values=listed("s", columns),
            filtered=unchanged_filter,
            keys=sql.SQL(", ").join(map(ident, key)),
            sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(ident(n)) for n in others),
            current=listed("t", others),
            incoming=listed("EXCLUDED", others),
        )
    return PlainStatements(
        shape.create, stage_copy.target("stage", shape.columns), merge, variant in _ANALYZED
    )


def _stage(cursor: psycopg.Cursor, statements: PlainStatements, key, chunk: pd.DataFrame) -> None:
    # One row per key, the last one (ON CONFLICT refuses to touch a row twice).
    latest = chunk.drop_duplicates(list(key), keep="last")
    cursor.execute(NO_JIT)
    cursor.execute(statements.create_stage)
    stage_copy.WAYS[stage_copy.FASTEST](cursor, statements.stage, latest)
    _analyze(cursor, statements)


def _analyze(cursor: psycopg.Cursor, statements: PlainStatements) -> None:
    if statements.analyze_stage:
        cursor.execute("ANALYZE stage")


def merge_chunk(
    connection: psycopg.Connection,
    statements: PlainStatements,
    key: Sequence[str],
    chunk: pd.DataFrame,
) -> None:
    """One chunk of a DataFrame, one transaction: stage it, merge it, commit."""
    with connection.transaction(), connection.cursor() as cursor:
        _stage(cursor, statements, key, chunk)
        cursor.execute(statements.merge)


def merge_rows(
    connection: psycopg.Connection,
    statements: PlainStatements,
    key_positions: Sequence[int],
    types: Sequence[str],
    rows: list[tuple],
) -> int:
    """`merge_chunk` for rows a reader made of Python values: staged by the same binary
    COPY of Python values, without a DataFrame in between. The rows staged (one a key)."""
    latest = {tuple(row[i] for i in key_positions): row for row in rows}
    with connection.transaction(), connection.cursor() as cursor:
        cursor.execute(NO_JIT)
        cursor.execute(statements.create_stage)
        stage_copy.write_binary_rows(cursor, statements.stage, types, latest.values())
        _analyze(cursor, statements)
        cursor.execute(statements.merge)
    return len(latest)


def merge_plan(
    connection: psycopg.Connection,
    statements: PlainStatements,
    key: Sequence[str],
    chunk: pd.DataFrame,
) -> str:
    """The plan of `statements`' merge of `chunk` (EXPLAIN, the transaction rolled back)."""
    with connection.transaction(force_rollback=True), connection.cursor() as cursor:
        _stage(cursor, statements, key, chunk)
        lines = cursor.execute(sql.SQL("EXPLAIN {}").format(statements.merge)).fetchall()
    return "\n".join(line for (line,) in lines)


def every_variant(
    table: str, key: Sequence[str], columns: Sequence[str], shape: StageShape | None = None
) -> dict[str, PlainStatements]:
    """`merge_statements` of each of `PLAIN_VARIANTS`."""
    return {v: merge_statements(table, key, columns, v, shape) for v in PLAIN_VARIANTS}


def merge_plans(
    dsn: str,
    variants: Mapping[str, PlainStatements],
    key: Sequence[str],
    chunk: pd.DataFrame,
    label: str,
) -> dict[str, dict[str, str]]:
    """`{variant: {label: plan}}`: each variant's plan of merging `chunk` (shaped like its
    stage) into its table as it stands (off the clock: nothing is written)."""
    with psycopg.connect(dsn) as connection:
        return {
            variant: {label: merge_plan(connection, statements, key, chunk)}
            for variant, statements in variants.items()
        }


def add_plans(into: dict[str, dict[str, str]], plans: dict[str, dict[str, str]]) -> None:
    """Merge `merge_plans` outputs: `into[variant]` gains each label's plan."""
    for variant, labelled in plans.items():
        into.setdefault(variant, {}).update(labelled)
