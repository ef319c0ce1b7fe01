"""`bench upsert --bad-every N`: what finding the rows the warehouse rejects costs.

The writer of a backfill under `bad_rows=RejectRows(...)`, chunk by chunk as the runner
does it: the plain upsert in one transaction and, only when the warehouse rejects it, the
chunk again in a new transaction, in parts under savepoints (`writer.rejecting_upsert`). Measured
on the same orders frame twice, alternately, into tables of the orders shape with a CHECK
(`amount_cents >= 0`): clean, and with one row in every N made negative (rejected). Each
pass twice: new rows (the COPY fast path) and the same frame again over the loaded table
(the merge, every good row unchanged).
"""

from __future__ import annotations

import functools
from typing import cast

import numpy as np
import pandas as pd
import sqlalchemy as sa

from benchmarks.upsert import KEY, chunks, orders_shaped, rate, timed
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.rejecting_upsert import upsert_rejecting_rows
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame


def measure_bad_rows(engine: sa.Engine, frame: pd.DataFrame, bad_every: int) -> dict:
    """Clean and bad, new rows then merge: seconds, rows/s and the statements spent."""
    if bad_every < 2:
        raise ValueError(f"--bad-every must be at least 2, got {bad_every}")
    bad = frame.copy()
    positions = np.arange(bad_every - 1, len(frame), bad_every)
    bad.loc[bad.index[positions], "amount_cents"] = -1
    figures: dict = {"every": bad_every, "rows_rejected_per_pass": len(positions)}
    for name, data in (("clean", frame), ("bad", bad)):
        target = orders_shaped(engine, f"bench_{name}_rows", checked=True)
        for path in ("new_rows", "merge_unchanged"):
            work = functools.partial(rejecting_rows, engine, target, data)
            seconds, outcome = timed(engine, work)
            counts, rejected, extra = cast("tuple[UpsertCounts, int, int]", outcome)
            expected = len(positions) if name == "bad" else 0
            if rejected != expected:
                raise AssertionError(f"{name}/{path}: {rejected} rejected, expected {expected}")
            figures[f"{name}_{path}"] = {
                **rate(len(data), seconds),
                "rows_written": counts.written,
                "extra_statements": extra,
            }
        target.drop(engine)
    for path in ("new_rows", "merge_unchanged"):
        clean, bad_pass = figures[f"clean_{path}"], figures[f"bad_{path}"]
        figures[f"{path}_bad_vs_clean_time"] = round(bad_pass["seconds"] / clean["seconds"], 3)
    return figures


def rejecting_rows(
    engine: sa.Engine, table: sa.Table, frame: pd.DataFrame
) -> tuple[UpsertCounts, int, int]:
    """Per chunk, as the runner: the plain upsert, then, if rejected, rejecting rows.

    Returns the counts, the rows rejected and the extra statements (parts tried) spent.
    """
    counts, rejected, extra = UpsertCounts(), 0, 0
    for chunk in chunks(frame):
        try:
            with engine.begin() as connection:
                counts += upsert_frame(connection, table, KEY, chunk)
            continue
        except RejectedValue as rejection:
            rejected_whole = rejection
        with engine.begin() as connection:
            result = upsert_rejecting_rows(
                connection, table, KEY, chunk, rejected_whole=rejected_whole
            )
        counts += result.counts
        rejected += len(result.rejected)
        extra += result.statements
    return counts, rejected, extra
