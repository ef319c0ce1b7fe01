"""A programming error in a backfill's own code is quarantined after one attempt, named.

It fails the same way on every attempt, so spending the budget on it only delays the
quarantine; the entry names the function, file and line the error came from.
"""

from __future__ import annotations

import inspect

import dagster as dg
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.dead_letter.entries import active_entry
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import materialize

DAY = "2024-02-01"

tallies_metadata = sa.MetaData()
tallies_table = sa.Table(
    "test_tallies",
    tallies_metadata,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("total", sa.BigInteger, nullable=False),
)


def total_of(amounts: list[object]) -> object:
    """A helper of the reader, with the bug: one amount arrives as text."""
    total = 0
    for amount in amounts:
        total += amount
    return total


@backfill_asset(
    table=tallies_table,
    partitions_def=dg.StaticPartitionsDefinition([DAY]),
    partition_scope=lambda table, day: table.c.day == day,
)
def tallies(source: PartitionInput):
    """A day's total (a test-only backfill whose helper raises TypeError)."""
    yield [{"day": source.partition_key, "total": total_of([1, 2, "3"])}]


def test_a_type_error_in_a_reader_is_quarantined_after_one_attempt_naming_the_function(
    pg_platform_env,
):
    result = materialize([tallies], DAY)

    assert not result.success
    engine = engine_from(pg_platform_env)
    history = attempts_of(engine, "tallies", DAY)
    assert [(row.error_class, row.error_type) for row in history] == [("terminal", "TypeError")]
    lines, first = inspect.getsourcelines(total_of)
    line = first + next(n for n, text in enumerate(lines) if "total += amount" in text)
    assert history[0].message == (
        f"TypeError in total_of() at {__file__}:{line}: "
        "unsupported operand type(s) for +=: 'int' and 'str'"
    )
    with engine.connect() as connection:
        entry = active_entry(connection, "tallies", DAY)
    assert entry is not None
    assert (entry.attempts, entry.error_class, entry.last_error) == (
        1, "terminal", history[0].message,
    )  # fmt: skip
