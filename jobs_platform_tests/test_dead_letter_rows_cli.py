"""`jobs-platform dead-letter rows (ASSET PARTITION | --asset ASSET) [--json]`: rows set aside."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from jobs_platform.writer.rejects import RejectedRow, record_rejects
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.environments import engine_from

JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
AT = dt.datetime(2024, 8, 2, tzinfo=dt.UTC)


def rows(env, *args: str):
    finished = run_cli([JOBS_PLATFORM, "dead-letter", "rows", *args], env)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    return finished.stdout


def test_rows_lists_a_partitions_rejects_in_input_order_as_json_and_text(pg_platform_env):
    with engine_from(pg_platform_env).begin() as connection:
        record_rejects(
            connection,
            asset="orders",
            partition="2024-08-01",
            chunk_index=1,
            rejects=[
                RejectedRow(12, "out of range", "amount_cents", "22003", {"amount_cents": "9e99"}),
                RejectedRow(3, "line 3: not valid JSON", values={"line": "{oops"}),
            ],
            at=AT,
        )

    listed = json.loads(rows(pg_platform_env, "orders", "2024-08-01", "--json"))
    shown = rows(pg_platform_env, "orders", "2024-08-01")

    assert listed == [
        {
            "row": 3,
            "column": None,
            "sqlstate": None,
            "reason": "line 3: not valid JSON",
            "values": {"line": "{oops"},
        },
        {
            "row": 12,
            "column": "amount_cents",
            "sqlstate": "22003",
            "reason": "out of range",
            "values": {"amount_cents": "9e99"},
        },
    ]
    assert "row 12 (column 'amount_cents', 22003): out of range" in shown
    assert "2 row(s) rejected" in shown
    assert json.loads(rows(pg_platform_env, "orders", "2024-08-02", "--json")) == []


def test_rows_of_an_asset_summarises_the_rows_still_rejected_per_reason(pg_platform_env):
    with engine_from(pg_platform_env).begin() as connection:
        for day, version in (("2024-08-01", "v1"), ("2024-08-02", "v2")):
            record_rejects(
                connection,
                asset="orders",
                partition=day,
                chunk_index=0,
                rejects=[
                    RejectedRow(1, "amount must be >= 0", "amount_cents"),
                    RejectedRow(2, "amount must be >= 0", "amount_cents"),
                    RejectedRow(5, "line 5: not valid JSON"),
                ],
                at=AT,
                version=version,
            )

    listed = json.loads(rows(pg_platform_env, "--asset", "orders", "--json"))
    shown = rows(pg_platform_env, "--asset", "orders")

    assert listed == [
        {
            "reason": "amount must be >= 0",
            "column": "amount_cents",
            "sqlstate": None,
            "rows": 4,
            "partitions": 2,
            "versions": ["v1", "v2"],
        },
        {
            "reason": "line 5: not valid JSON",
            "column": None,
            "sqlstate": None,
            "rows": 2,
            "partitions": 2,
            "versions": ["v1", "v2"],
        },
    ]
    assert "orders: 6 row(s) still rejected" in shown
    assert json.loads(rows(pg_platform_env, "--asset", "shipments", "--json")) == []
