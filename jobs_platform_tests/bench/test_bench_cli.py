"""`jobs-platform bench`: both benchmarks run for real and report every figure (DESIGN §4).

Tiny sizes: these check the commands and their output, not the speed (docs/BENCHMARKS.md
has the figures).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sqlalchemy as sa

from jobs_platform_tests.support import run_cli

JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
UPSERT_METHODS = {
    "framework_upsert",
    "framework_upsert_unchanged",
    "raw_copy_append",
    "pandas_to_sql_multi",
    "executemany_upsert",
}


def bench(args: list[str], env: dict[str, str], tmp_path) -> dict:
    completed = run_cli([JOBS_PLATFORM, "bench", *args, "--json"], env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def bench_schemas(url: str) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as connection:
        query = (
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'jp_bench%'"
        )
        names = list(connection.execute(sa.text(query)).scalars())
    engine.dispose()
    return names


def test_bench_upsert_reports_seconds_and_rows_per_second_for_every_method(pg_url, tmp_path):
    figures = bench(["upsert", "--rows", "2000", "--database-url", pg_url], {}, tmp_path)

    assert set(figures) <= {"rows", "results", "notes"}
    assert figures["rows"] == 2000
    assert set(figures["results"]) == UPSERT_METHODS
    for result in figures["results"].values():
        assert set(result) == {"seconds", "rows_per_s"}
        assert result["seconds"] > 0 and result["rows_per_s"] > 0
    assert figures["notes"]["framework_upsert_unchanged_new_row_versions"] == 0
    assert bench_schemas(pg_url) == []


def test_bench_backfill_reports_both_times_and_their_ratio(pg_url, tmp_path):
    env = {"JOBS_PLATFORM_DATABASE_URL": pg_url}

    figures = bench(["backfill", "--partitions", "2", "--rows-per-partition", "200"], env, tmp_path)

    assert set(figures) <= {"dagster_backfill_seconds", "plain_script_seconds", "ratio", "notes"}
    for field in ("dagster_backfill_seconds", "plain_script_seconds", "ratio"):
        assert figures[field] > 0
    assert figures["notes"]["dagster_rerun_unchanged_new_row_versions"] == 0
    assert bench_schemas(pg_url) == []


def test_bench_without_a_reachable_postgresql_says_so(tmp_path):
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"

    completed = run_cli(
        [JOBS_PLATFORM, "bench", "upsert", "--rows", "10", "--database-url", unreachable],
        {},
        cwd=tmp_path,
    )

    assert completed.returncode == 2
    assert "cannot connect to PostgreSQL" in completed.stderr
