"""Bad rows without losing the day, end to end: README's `shop/defs.py` in real processes.

The test writes the package of README "Bad rows without losing the day" into a temporary
folder and drives it with `jobs-platform … -m shop.defs` and `dagster asset materialize`
on PostgreSQL: a day with rows the reader rejects and rows the warehouse rejects, a crash
right after the first chunk committed, the rejects listed once, then the input fixed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.landing import order_line, write_landing_lines
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import stored_materialization_metadata

README = Path(__file__).resolve().parents[1] / "docs" / "bad-rows.md"
BIN = Path(sys.executable).parent
MODULE = "shop.defs"
ASSET = "shop_orders_backfill"
DAY = "2024-01-04"
CHUNK_ROWS = 10
LINES = 500  # 4 bad rows of 500: under the 1% the README allows
TOO_MUCH = 200_000_000  # rejected by the table's CHECK (amount_cents < 100000000)


def readme_code_location() -> str:
    section = README.read_text().split("# Bad rows without losing the day", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture
def shop(pg_url, tmp_path) -> dict[str, str]:
    package = tmp_path / "project" / "shop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(readme_code_location())
    home = tmp_path / "dagster_home"
    home.mkdir()
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "project"), os.environ.get("PYTHONPATH", "")]
        ),
        "JOBS_PLATFORM_DATABASE_URL": pg_url,
        "JOBS_PLATFORM_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(home),
        "JOBS_PLATFORM_LEASE_SECONDS": "10",
        "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.2",
    }


def good_day() -> list[dict | str]:
    return [order_line(1000 + n, day=DAY, second=n) for n in range(1, LINES + 1)]


def day_with_bad_rows() -> list[dict | str]:
    lines = good_day()
    lines[4] = "{not json"  # row 5, chunk 0: the reader's
    lines[6] = order_line(1007, day=DAY, amount_cents=TOO_MUCH)  # row 7, chunk 0: the CHECK
    lines[11] = order_line(1012, day=DAY, amount_cents=TOO_MUCH)  # row 12, chunk 1: the CHECK
    lines[24] = order_line(1025, day=DAY, amount_cents=-1)  # row 25: the reader's
    return lines


def jobs_platform(env, *args: str):
    return run_cli([str(BIN / "jobs-platform"), *args], env)


def listed_rejects(env) -> list[dict]:
    listed = jobs_platform(env, "dead-letter", "rows", "-m", MODULE, ASSET, DAY, "--json")
    return json.loads(ok(listed))


def materialize(env, **extra: str):
    config = {"ops": {ASSET: {"config": {"chunk_rows": CHUNK_ROWS}}}}
    return run_cli(
        [
            str(BIN / "dagster"), "asset", "materialize", "-m", MODULE, "--select", ASSET,
            "--partition", DAY, "--config-json", json.dumps(config),
        ],
        {**env, **extra},
    )  # fmt: skip


def ok(completed) -> str:
    assert completed.returncode == 0, (
        f"{completed.args}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def stored_order_ids(url: str) -> list[int]:
    with sa.create_engine(url).connect() as connection:
        return list(
            connection.execute(sa.text("SELECT order_id FROM shop_orders ORDER BY 1")).scalars()
        )


@pytest.mark.slow
def test_a_day_with_bad_rows_commits_the_rest_through_a_crash_and_converges_once_fixed(
    shop, pg_url
):
    env = shop
    ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    write_landing_lines(env["JOBS_PLATFORM_LANDING"], DAY, day_with_bad_rows())

    # A crash right after chunk 0 (and its two rejects) committed: the step's retry resumes
    # after it, rejects the rest, and no row is rejected twice.
    ok(materialize(env, JOBS_PLATFORM_FAILPOINTS=f"after_commit@{ASSET}#0=crash*1"))

    attempts = attempts_of(sa.create_engine(pg_url), ASSET, DAY)
    history = [(row.outcome, row.error_class) for row in attempts]
    assert history == [("failed", "crash"), ("succeeded", None)], history
    rejected = listed_rejects(env)
    assert [(r["row"], r["sqlstate"]) for r in rejected] == [
        (5, None),
        (7, "23514"),
        (12, "23514"),
        (25, None),
    ]
    assert "not valid JSON" in rejected[0]["reason"]
    assert "shop_orders_under_a_million" in rejected[1]["reason"]
    assert rejected[1]["values"]["amount_cents"] == str(TOO_MUCH)
    assert "must be >= 0" in rejected[3]["reason"]
    assert rejected[0]["values"] == {"line": "{not json"}
    assert stored_order_ids(pg_url) == [
        1000 + n for n in range(1, LINES + 1) if n not in (5, 7, 12, 25)
    ]
    status = json.loads(ok(jobs_platform(env, "status", "-m", MODULE, "--json")))
    assert status["assets"][ASSET]["rows_rejected"] == 4
    assert status["assets"][ASSET]["done"] == 1
    shown = ok(jobs_platform(env, "status", "-m", MODULE))
    header, row = shown.splitlines()[:2]
    assert row.split()[0] == ASSET
    # Right-aligned columns: the value ends where its header does.
    assert row[: header.index("rejected") + len("rejected")].split()[-1] == "4"
    metadata = stored_materialization_metadata(env, ASSET, DAY)
    assert metadata["rows_rejected"] == 4
    assert [record.data["row"] for record in metadata["rejected_rows"].records] == [5, 7, 12, 25]

    # The input is fixed: the partition converges to it and its rejects are cleared.
    write_landing_lines(env["JOBS_PLATFORM_LANDING"], DAY, good_day())
    ok(materialize(env))

    assert stored_order_ids(pg_url) == [1000 + n for n in range(1, LINES + 1)]
    assert listed_rejects(env) == []
    assert stored_materialization_metadata(env, ASSET, DAY)["rows_rejected"] == 0


def test_more_bad_rows_than_the_limit_quarantine_the_day_naming_them(shop, pg_url):
    env = shop
    ok(jobs_platform(env, "db", "upgrade", "-m", MODULE))
    lines: list[dict | str] = [order_line(2000 + n, day=DAY, second=n) for n in range(120)]
    for n in range(0, 120, 60):
        lines[n] = "{not json"  # 2 of 120 rows: more than 1%
    write_landing_lines(env["JOBS_PLATFORM_LANDING"], DAY, lines)

    assert materialize(env).returncode == 1

    (entry,) = json.loads(ok(jobs_platform(env, "dead-letter", "list", "-m", MODULE, "--json")))
    assert (entry["asset"], entry["partition"], entry["error_class"]) == (ASSET, DAY, "terminal")
    assert "2 rows rejected, more than max_fraction=0.01 of 120 input rows" in entry["last_error"]
    assert "row 1:" in entry["last_error"] and "row 61:" in entry["last_error"]
    # max_fraction is judged once the whole input is read: the chunks committed stay (the
    # partition is not done, its downstream not computed), as when a later chunk fails.
    assert len(stored_order_ids(pg_url)) == 118
