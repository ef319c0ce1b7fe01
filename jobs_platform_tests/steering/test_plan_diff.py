"""`plan`'s expected change of a gated backfill's partition: the gate's diff, published never.

A `ledger` day on PostgreSQL and SQLite, loaded once by a real attempt; the plan then
stages a fan-out of it (40 % of the amounts changed) against a contract of 2 %.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobs_platform.gate.stage import GATE_STAGE_PREFIX
from jobs_platform.steering.plan_diff import expected_change
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.gate.test_change_contract import (
    DAY,
    STRICT,
    Ledger,
    attempt,
    day_rows,
    dump,
    fanned_out,
    ledger_settings,
    runner,
)


@pytest.fixture
def settings(upgraded_url, tmp_path):
    """PostgreSQL, and SQLite (the embedded default's backend)."""
    return ledger_settings(upgraded_url, tmp_path)


def chunks(rows: list[tuple[int, int]], partition: str = DAY):
    yield from Ledger({partition: rows}).read_chunks(_input(partition))


def _input(partition: str):
    from types import SimpleNamespace

    return SimpleNamespace(partition_key=partition, chunk_rows=100)


def stages(url: str) -> list[str]:
    names = sa.inspect(warehouse_engine(url)).get_table_names()
    return [name for name in names if name.startswith(GATE_STAGE_PREFIX)]


def test_a_fan_out_is_planned_as_refused_and_nothing_is_written(settings):
    url = settings.database_url
    loaded = runner(settings, Ledger({DAY: day_rows()}), STRICT)
    attempt(loaded)
    before = dump(url)
    spec = loaded.spec
    engine = warehouse_engine(url)
    with engine.connect() as connection:
        change = expected_change(connection, spec, DAY, chunks(fanned_out(day_rows())))
    assert (change.diff.inserted, change.diff.updated, change.diff.swept) == (0, 400, 0)
    assert change.refused and "updated" in change.broken[0]
    assert change.as_dict()["refused"] is True
    assert dump(url) == before
    assert stages(url) == []
    # The same input again changes nothing: within any contract.
    with engine.connect() as connection:
        same = expected_change(connection, spec, DAY, chunks(day_rows()))
    assert (same.diff.unchanged, same.refused) == (1_000, False)
