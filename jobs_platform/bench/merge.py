"""`bench merge`: the merge path, which a re-run after an input correction takes.

A populated table (`--rows`, 1,000,000 by default) is fed its whole input again with a
fraction of the rows changed (`--changed`, 1 %, 10 % and 100 % by default) and the rest
identical, the fractions one after another. Each fraction is measured for the
framework's writer (`upsert_frame`, 50,000-row chunks, one transaction each) and the
best plain script (`bench.baselines.best_plain_script`: COPY into a stage, one merging
`INSERT … ON CONFLICT DO UPDATE … WHERE … IS DISTINCT FROM`), each on its own copy of
the table, and reports the row versions each created: the changed rows, and no others.
"""

from __future__ import annotations

import time
from typing import cast

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.bench import baselines
from jobs_platform.bench.database import (
    fresh_schema,
    new_row_versions,
    server_facts,
    snapshot_row_versions,
)
from jobs_platform.bench.upsert import (
    CHUNK_ROWS,
    KEY,
    checkpoint,
    framework_upsert,
    libpq_dsn,
    orders_frame,
    orders_shaped,
)
from jobs_platform.store.db import normalize_url

DEFAULT_FRACTIONS = (0.01, 0.1, 1.0)


def changed_rows(frame: pd.DataFrame, fraction: float, round_number: int) -> pd.DataFrame:
    """`frame` with an evenly spread `fraction` of its rows given a new amount."""
    changed = frame.copy()
    count = round(len(frame) * fraction)
    picked = np.linspace(0, len(frame) - 1, num=count, dtype=np.int64)
    column = cast(int, changed.columns.get_loc("amount_cents"))  # the columns are unique
    changed.iloc[picked, column] = changed.iloc[picked, column] + round_number
    return changed


def run_merge_bench(database_url: str, rows: int, fractions=DEFAULT_FRACTIONS) -> dict:
    if rows < 1 or not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError("--rows must be at least 1 and each --changed in (0, 1]")
    frame = orders_frame(rows)
    results = []
    with fresh_schema(database_url, "merge") as url:
        engine = sa.create_engine(normalize_url(url))
        dsn = libpq_dsn(url)
        try:
            writer = orders_shaped(engine, "bench_merge_framework")
            plain = orders_shaped(engine, "bench_merge_plain")
            framework_upsert(engine, writer, frame)
            baselines.best_plain_script(dsn, plain.name, KEY, frame, CHUNK_ROWS)
            current = frame
            for number, fraction in enumerate(fractions, start=1):
                current = changed_rows(current, fraction, number)
                expected = round(rows * fraction)
                results.append(
                    _measure_round(engine, dsn, writer, plain, current, fraction, expected)
                )
        finally:
            engine.dispose()
    return {
        "rows": rows,
        "chunk_rows": CHUNK_ROWS,
        "results": results,
        "server": server_facts(database_url),
    }


def _measure_round(engine, dsn, writer, plain, frame, fraction, expected) -> dict:
    snapshot_row_versions(engine, writer.name, KEY[0])
    checkpoint(engine)
    began = time.perf_counter()
    counts = framework_upsert(engine, writer, frame)
    framework_seconds = time.perf_counter() - began
    framework_versions = new_row_versions(engine, writer.name, KEY[0])
    if counts.updated != expected:
        raise AssertionError(f"writer updated {counts.updated} rows, {expected} changed")

    snapshot_row_versions(engine, plain.name, KEY[0])
    checkpoint(engine)
    plain_seconds = baselines.best_plain_script(dsn, plain.name, KEY, frame, CHUNK_ROWS)
    plain_versions = new_row_versions(engine, plain.name, KEY[0])
    return {
        "changed_fraction": fraction,
        "changed_rows": expected,
        "framework_seconds": round(framework_seconds, 3),
        "best_plain_script_seconds": round(plain_seconds, 3),
        "framework_speed_vs_best_plain_script": round(plain_seconds / framework_seconds, 3),
        "framework_new_row_versions": framework_versions,
        "best_plain_script_new_row_versions": plain_versions,
    }
