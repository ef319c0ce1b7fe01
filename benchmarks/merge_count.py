"""What the writer's inserted/updated count costs on the merge path.

    python -m benchmarks.merge_count [--rows N] [--changed F …] [--repeats K] [--json]

`bench merge`'s set-up (a populated table of `--rows` orders, re-fed with a fraction of
its rows changed, 50,000-row chunks, each run on a fresh vacuumed copy), three methods
alternated after a warm-up round: the framework's writer as it is; the same writer with
its count taken out (the merge run without `RETURNING xmax = 0` through a CTE, its row
count kept: the same rows written, only the inserted/updated split lost); and the plain
script's variant that won `bench merge` at that fraction (`scalar_probe` when few rows
changed, `on_conflict` when all did). The gap between the first two is the count's
price; docs/BENCHMARKS.md quotes it where the merge path misses its target.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
from collections.abc import Callable, Iterator

import pandas as pd
import sqlalchemy as sa

from benchmarks.database import bench_database, server_facts
from benchmarks.merge import MergeRound, changed_rows, loaded_template
from benchmarks.timing import alternated, median_ratio
from benchmarks.upsert import CHUNK_ROWS, framework_upsert, orders_frame
from jobs_platform.writer import upsert as writer_upsert

DEFAULT_FRACTIONS = (0.1, 1.0)


def best_plain_variant(fraction: float) -> str:
    """The variant that won `bench merge` at d3a91e7 at this changed fraction."""
    return "scalar_probe" if fraction < 0.5 else "on_conflict"


@contextlib.contextmanager
def writer_without_count() -> Iterator[None]:
    """The writer's merge run as a plain statement: rows written from its row count, the
    inserted/updated split not asked for."""
    counting = writer_upsert._merge_counting_inserts

    def uncounted(connection: sa.Connection, statement: sa.Insert) -> tuple[int, int]:
        written = connection.execute(
            statement, execution_options={"preserve_rowcount": True}
        ).rowcount
        return 0, written

    writer_upsert._merge_counting_inserts = uncounted
    try:
        yield
    finally:
        writer_upsert._merge_counting_inserts = counting


class CountRound(MergeRound):
    """`bench merge`'s round of one changed input, with the writer's count taken out as a
    method, and the plain `variant` to compare with."""

    def __init__(self, engine: sa.Engine, dsn: str, changed: pd.DataFrame, variant: str):
        super().__init__(engine, dsn, changed)
        self.variant = variant

    def methods(self) -> dict[str, Callable[[], float | None]]:
        return {
            "framework": self.framework,
            "framework_without_count": self.framework_without_count,
            f"plain_script_{self.variant}": functools.partial(self.plain, self.variant),
        }

    def framework_without_count(self) -> float:
        def work(table: sa.Table) -> object:
            with writer_without_count():
                return framework_upsert(self.engine, table, self.changed)

        return self._run("framework_without_count", work)


def run(database_url: str, rows: int, fractions, repeats: int, warmup: int) -> dict:
    frame = orders_frame(rows)
    results = []
    with loaded_template(database_url, "merge_count", frame) as (engine, dsn):
        for fraction in fractions:
            changed = changed_rows(frame, fraction, 1)
            round_ = CountRound(engine, dsn, changed, best_plain_variant(fraction))
            runs = alternated(round_.methods(), repeats, warmup)
            plain = f"plain_script_{round_.variant}"
            results.append(
                {
                    "changed_fraction": fraction,
                    "methods": {name: kept.figures(rows) for name, kept in runs.items()},
                    "new_row_versions": round_.versions,
                    # Run by run: the first's seconds over the second's (> 1: slower).
                    "framework_over_without_count": median_ratio(
                        runs["framework"], runs["framework_without_count"]
                    ),
                    "framework_over_best_plain": median_ratio(runs["framework"], runs[plain]),
                    "without_count_over_best_plain": median_ratio(
                        runs["framework_without_count"], runs[plain]
                    ),
                }
            )
    return {
        "rows": rows,
        "chunk_rows": CHUNK_ROWS,
        "repeats": repeats,
        "results": results,
        "server": server_facts(database_url),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.merge_count")
    parser.add_argument("--rows", type=int, default=1_000_000, metavar="N")
    parser.add_argument(
        "--changed", type=float, action="append", metavar="F", help="repeatable; 0.1 and 1.0"
    )
    parser.add_argument("--repeats", type=int, default=5, metavar="K")
    parser.add_argument("--warmup", type=int, default=1, metavar="W")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fractions = tuple(args.changed or DEFAULT_FRACTIONS)
    if args.rows < 1 or any(not 0 < f <= 1 for f in fractions):
        parser.error("--rows must be at least 1 and each --changed in (0, 1]")
    with bench_database(args.database_url) as database:
        figures = run(database.url, args.rows, fractions, args.repeats, args.warmup)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for result in figures["results"]:
            seconds = {n: m["seconds"] for n, m in result["methods"].items()}
            print(
                f"{result['changed_fraction']:.0%} changed: {seconds}; framework / without "
                f"its count {result['framework_over_without_count']}, framework / best plain "
                f"{result['framework_over_best_plain']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
