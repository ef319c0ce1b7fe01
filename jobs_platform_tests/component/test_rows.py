"""The source's rows checked against the declared table: converted, or refused by row."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from jobs_platform.component.declaration import BackfillDeclaration
from jobs_platform.component.rows import IncomingRows, PartitionWindow
from jobs_platform.errors import InputValidationError
from jobs_platform_tests.component.test_declaration import DECLARED

DAY = PartitionWindow(
    "2024-01-01",
    dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    dt.datetime(2024, 1, 2, tzinfo=dt.UTC),
)


def incoming(reject=None) -> IncomingRows:
    return IncomingRows(BackfillDeclaration.model_validate(DECLARED), DAY, reject)


def csv_rows(*rows: tuple[str, str, str]) -> pd.DataFrame:
    """Rows as a CSV reader gives them: every value text, an extra column or two."""
    return pd.DataFrame(
        [(*row, "ignored") for row in rows],
        columns=["order_id", "amount_cents", "ordered_at", "note"],
    )


def test_text_values_become_the_columns_types_and_other_columns_are_dropped():
    rows = incoming().conform(csv_rows(("7", "1200", "2024-01-01T09:30:00+01:00")))
    assert list(rows.columns) == ["order_id", "amount_cents", "ordered_at"]
    assert rows.loc[0, "order_id"] == 7 and rows.loc[0, "amount_cents"] == 1200
    assert rows.loc[0, "ordered_at"] == pd.Timestamp("2024-01-01T08:30:00", tz="UTC")


def test_a_bad_value_stops_the_partition_naming_its_row_and_column():
    with pytest.raises(InputValidationError, match=r"row 2, column 'amount_cents': .*'twelve'"):
        incoming().conform(
            csv_rows(("1", "5", "2024-01-01T01:00:00"), ("2", "twelve", "2024-01-01T02:00:00"))
        )


def test_a_row_of_another_partition_is_refused():
    with pytest.raises(InputValidationError, match="falls outside the partition 2024-01-01"):
        incoming().conform(csv_rows(("1", "5", "2024-01-02T00:00:00")))


def test_an_empty_value_of_a_column_that_is_not_nullable_is_refused():
    with pytest.raises(InputValidationError, match="'amount_cents': is empty"):
        incoming().conform(csv_rows(("1", "", "2024-01-01T01:00:00")))


def test_a_missing_column_is_refused_naming_what_the_source_has():
    frame = csv_rows(("1", "5", "2024-01-01T01:00:00")).drop(columns=["amount_cents"])
    with pytest.raises(InputValidationError, match=r"no column 'amount_cents' .*'note'"):
        incoming().conform(frame)


def test_under_bad_rows_a_bad_row_is_rejected_by_its_number_across_chunks():
    rejected: list[tuple[int, str]] = []
    rows = incoming(lambda number, reason, values: rejected.append((number, reason)))
    first = rows.conform(csv_rows(("1", "5", "2024-01-01T01:00:00")))
    second = rows.conform(
        csv_rows(("2", "2.5", "2024-01-01T02:00:00"), ("3", "7", "2024-01-01T03:00:00"))
    )
    assert list(first["order_id"]) == [1] and list(second["order_id"]) == [3]
    assert rejected == [(2, "column 'amount_cents': must be an integer, got '2.5'")]
