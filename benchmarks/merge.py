"""`bench merge`: the merge path, which a re-run after an input correction takes.

A table of `--rows` orders (1,000,000 by default) is fed its whole input again with a
fraction of the rows changed (`--changed`, 1 %, 10 % and 100 % by default) and the rest
identical. For each fraction the framework's writer (`upsert_frame`, 50,000-row chunks,
one transaction each) and each variant of the expert's plain script
(`bench.baselines.plain_script`, each of `baselines.PLAIN_VARIANTS`) run `--repeats`
times after a warm-up round, alternated, each run on a fresh copy of the populated table
(copied from a loaded template and vacuumed, off the clock). The warm-up run of each
method counts the row versions it created: the changed rows, and no others. Off the
clock, each variant's merge of the first changed chunk is EXPLAINed against the
populated table (`plans`, by chunk size, table size and changed fraction).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np
import pandas as pd
import sqlalchemy as sa

from benchmarks import baselines
from benchmarks.database import (
    fresh_schema,
    new_row_versions,
    server_facts,
    snapshot_row_versions,
)
from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import (
    CHUNK_ROWS,
    DEFAULT_REPEATS,
    KEY,
    checkpoint,
    framework_upsert,
    libpq_dsn,
    orders_frame,
    orders_shaped,
    timed,
)
from jobs_platform.store.db import normalize_url

DEFAULT_FRACTIONS = (0.01, 0.1, 1.0)
TEMPLATE = "bench_merge_template"


def changed_rows(frame: pd.DataFrame, fraction: float, round_number: int) -> pd.DataFrame:
    """`frame` with an evenly spread `fraction` of its rows given a new amount."""
    changed = frame.copy()
    count = round(len(frame) * fraction)
    picked = np.linspace(0, len(frame) - 1, num=count, dtype=np.int64)
    column = cast(int, changed.columns.get_loc("amount_cents"))  # the columns are unique
    changed.iloc[picked, column] = changed.iloc[picked, column] + round_number
    return changed


def run_merge_bench(
    database_url: str,
    rows: int,
    fractions=DEFAULT_FRACTIONS,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = 1,
) -> dict:
    if rows < 1 or not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError("--rows must be at least 1 and each --changed in (0, 1]")
    frame = orders_frame(rows)
    results = []
    plans: dict[str, dict[str, str]] = {}
    with loaded_template(database_url, "merge", frame) as (engine, dsn):
        for fraction in fractions:
            rounds = MergeRound(engine, dsn, changed_rows(frame, fraction, 1))
            baselines.add_plans(plans, rounds.plans(fraction))
            runs = alternated(rounds.methods(), repeats, warmup)
            results.append(_figures(rows, fraction, runs, rounds.versions))
    return {
        "rows": rows,
        "chunk_rows": CHUNK_ROWS,
        "repeats": repeats,
        "results": results,
        "plans": plans,
        "server": server_facts(database_url),
    }


@contextlib.contextmanager
def loaded_template(
    database_url: str, label: str, frame: pd.DataFrame
) -> Iterator[tuple[sa.Engine, str]]:
    """A scratch schema whose `TEMPLATE` table the writer loaded with `frame` (each
    `MergeRound` copies it): its engine and libpq DSN."""
    with fresh_schema(database_url, label) as url:
        engine = sa.create_engine(normalize_url(url))
        try:
            framework_upsert(engine, orders_shaped(engine, TEMPLATE), frame)
            yield engine, libpq_dsn(url)
        finally:
            engine.dispose()


class MergeRound:
    """One changed input, and each method as a callable run on a fresh populated table."""

    def __init__(self, engine: sa.Engine, dsn: str, changed: pd.DataFrame):
        self.engine, self.dsn, self.changed = engine, dsn, changed
        self.versions: dict[str, int] = {}  # counted on each method's first (warm-up) run
        self._tables = 0

    def methods(self) -> dict[str, Callable[[], float | None]]:
        methods: dict[str, Callable[[], float | None]] = {"framework": self.framework}
        for variant in baselines.PLAIN_VARIANTS:
            methods[f"plain_script_{variant}"] = functools.partial(self.plain, variant)
        return methods

    def plans(self, fraction: float) -> dict[str, dict[str, str]]:
        """Each variant's plan of the first changed chunk, on a fresh populated table."""
        table = self._populated("plans")
        chunk = self.changed.head(CHUNK_ROWS)
        label = f"chunk_rows={len(chunk)},table_rows={len(self.changed)},changed={fraction}"
        plans = baselines.merge_plans(
            self.dsn,
            baselines.every_variant(table.name, KEY, list(chunk.columns)),
            KEY,
            chunk,
            label,
        )
        table.drop(self.engine)
        return plans

    def _populated(self, name: str) -> sa.Table:
        self._tables += 1
        table = orders_shaped(self.engine, f"bench_merge_{name}_{self._tables}")
        with self.engine.begin() as connection:
            connection.execute(sa.insert(table).from_select(list(table.c.keys()), _template()))
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(sa.text(f'VACUUM ANALYZE "{table.name}"'))
        return table

    def _run(self, name: str, work: Callable[[sa.Table], object]) -> float:
        table = self._populated(name)
        counting = name not in self.versions
        if counting:
            snapshot_row_versions(self.engine, table.name, KEY[0])
        seconds, _ = timed(self.engine, lambda: work(table))
        if counting:
            self.versions[name] = new_row_versions(self.engine, table.name, KEY[0])
        table.drop(self.engine)
        return seconds

    def framework(self) -> float:
        return self._run("framework", lambda t: framework_upsert(self.engine, t, self.changed))

    def plain(self, variant: str) -> float:
        def work(table: sa.Table) -> float:
            return baselines.plain_script(
                self.dsn, table.name, KEY, self.changed, CHUNK_ROWS, variant
            )

        checkpoint(self.engine)
        return self._run(f"plain_script_{variant}", work)


def _template() -> sa.Select:
    return sa.select(sa.text("*")).select_from(sa.table(TEMPLATE))


def _figures(rows: int, fraction: float, runs: dict, versions: dict[str, int]) -> dict:
    figures = {name: kept.figures(rows) for name, kept in runs.items()}
    plain = [f"plain_script_{variant}" for variant in baselines.PLAIN_VARIANTS]
    best = min(plain, key=lambda name: figures[name]["seconds"])
    return {
        "changed_fraction": fraction,
        "changed_rows": round(rows * fraction),
        "framework_seconds": figures["framework"]["seconds"],
        "best_plain_script": best.removeprefix("plain_script_"),
        "best_plain_script_seconds": figures[best]["seconds"],
        # The best variant's seconds over the framework's, run by run (> 1: faster).
        "framework_speed_vs_best_plain_script": median_ratio(runs[best], runs["framework"]),
        "framework_new_row_versions": versions["framework"],
        "best_plain_script_new_row_versions": versions[best],
        "methods": {
            name: {**figures[name], "new_row_versions": versions[name]} for name in figures
        },
    }
