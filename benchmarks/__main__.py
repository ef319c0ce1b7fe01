"""`bin/bench upsert|merge|staging|gate|rerun|backfill|memory|status|triage|holds|scale|plan`:
measure the writer, a backfill and the operator commands on PostgreSQL."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks import EXAMPLE_MODULE

# Targets the figures are read against (docs/BENCHMARKS.md says why these).
UPSERT_TARGETS = (
    (
        "copy_floor_server_binary",
        0.85,
        "framework upsert (new rows) >= 0.85 x a server-side binary COPY",
    ),
    ("best_plain_script", 1.0, "framework upsert >= 1.0 x the best plain script"),
    ("pandas_to_sql_multi", 15.0, "framework upsert >= 15 x pandas to_sql multi"),
    ("executemany_upsert", 3.0, "framework upsert >= 3 x executemany upsert"),
)
UNCHANGED_TARGET = 0.5  # an unchanged re-run takes at most half the first run's time
BACKFILL_TARGET = 1.2  # the in-process Dagster backfill takes at most 1.2 x the plain script
UI_BACKFILL_TARGET = 2.0  # UI path, first run created to last run ended, vs the plain script
RERUN_TARGET = 1.5  # a corrected day through dagster asset materialize, vs the best script
UI_RERUN_TARGET = 0.25  # an unchanged UI-path re-run, vs the first
HOURLY_TARGET = 1.5  # a year of hourly partitions: the UI path's run window, vs the best script
STATUS_TARGET = 1.0  # seconds for `status` / `dead-letter list` at 10,000 partitions per asset


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from jobs_platform.settings import SettingsError

    try:
        return args.handler(args)
    except (SettingsError, ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        from jobs_platform.store.db import dispose_engines

        dispose_engines()


def add_module_option(
    parser: argparse.ArgumentParser, default: str | None = EXAMPLE_MODULE
) -> None:
    """`-m/--module MODULE`: the code location to run (default: the orders example's)."""
    parser.add_argument(
        "-m", "--module", metavar="MODULE", default=default,
        help=f"the code location: a module with `defs` (default {EXAMPLE_MODULE})",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bin/bench", description="Benchmark the upsert writer, a backfill, the commands."
    )
    kinds = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")

    upsert = kinds.add_parser("upsert", help="the upsert writer against COPY, pandas, executemany")
    upsert.add_argument("--rows", type=int, required=True, metavar="N")
    upsert.add_argument(
        "--bad-every",
        type=int,
        default=None,
        metavar="N",
        help="also measure bad_rows=RejectRows(...) with one rejected row in every N "
        "(figures under notes.bad_rows)",
    )
    _repeats_argument(upsert)
    _common_arguments(upsert, run_upsert)

    merge = kinds.add_parser(
        "merge", help="the merge path: a populated table re-fed with a fraction changed"
    )
    merge.add_argument("--rows", type=int, default=1_000_000, metavar="N")
    merge.add_argument(
        "--changed",
        type=float,
        nargs="+",
        default=[0.01, 0.1, 1.0],
        metavar="F",
        help="fractions of the rows changed, one round each (default 0.01 0.1 1.0)",
    )
    _repeats_argument(merge)
    _common_arguments(merge, run_merge)

    staging = kinds.add_parser(
        "staging", help="the ways psycopg COPYs a DataFrame (what the plain script uses)"
    )
    staging.add_argument("--rows", type=int, default=200_000, metavar="N")
    _repeats_argument(staging)
    _common_arguments(staging, run_staging)

    gate = kinds.add_parser(
        "gate", help="a partition staged, diffed and published (expect=) vs the direct path"
    )
    gate.add_argument("--rows", type=int, default=1_000_000, metavar="N")
    _repeats_argument(gate)
    _common_arguments(gate, run_gate)

    rerun = kinds.add_parser(
        "rerun", help="a corrected day re-run with dagster asset materialize vs a script"
    )
    add_module_option(rerun)
    rerun.add_argument("--rows", type=int, default=1_200_000, metavar="N")
    rerun.add_argument("--changed", type=float, default=0.1, metavar="F")
    rerun.add_argument("--chunk-rows", type=int, default=10_000, metavar="C")
    rerun.add_argument(
        "--profile", type=Path, default=None, metavar="FILE",
        help="then one more framework round under py-spy (raw stacks written to FILE): "
        "the attempt's seconds by phase",
    )  # fmt: skip
    _repeats_argument(rerun)
    _common_arguments(rerun, run_rerun)

    backfill = kinds.add_parser("backfill", help="the orders backfill through Dagster vs a script")
    add_module_option(backfill, None)  # with --via daemon: a location serving orders, daily_revenue
    backfill.add_argument("--partitions", type=int, required=True, metavar="P")
    backfill.add_argument("--rows-per-partition", type=int, required=True, metavar="R")
    # The default is the asset's (engine.spec.DEFAULT_CHUNK_ROWS), looked up when the
    # bench runs: importing the engine here would load pandas for every CLI command.
    backfill.add_argument(
        "--chunk-rows", type=int, default=None, metavar="C",
        help="rows per chunk (default: the backfill's default, 10,000)",
    )  # fmt: skip
    backfill.add_argument(
        "--runs",
        choices=("one", "per-partition"),
        default="one",
        help="one Dagster run over the partition range (default) or one run per partition",
    )
    backfill.add_argument(
        "--via",
        choices=("process", "daemon"),
        default="process",
        help="process: materialize in this process (default); daemon: a webserver and a "
        "daemon on a scratch instance, launched with GraphQL launchPartitionBackfill as the "
        "UI does (--runs does not apply: the backfill policy groups the runs)",
    )
    backfill.add_argument(
        "--execution",
        choices=("default", "spawn", "forkserver", "in_process"),
        default="default",
        help="with --via daemon: run config the launchpad would add for the runs' executor "
        "(default: none, so step processes fork from a forkserver that preloaded the code "
        "location; spawn: a fresh interpreter per step, Dagster's own default; forkserver: "
        "Dagster's `forkserver: {}`, which preloads only its executor module; in_process: "
        "steps in the run worker)",
    )
    backfill.add_argument(
        "--no-rerun",
        action="store_true",
        help="with --via daemon: skip the unchanged re-run (a long backfill takes as long again)",
    )
    backfill.add_argument(
        "--shape",
        choices=("daily", "hourly"),
        default="daily",
        help="daily: the orders example (default); hourly: hourly_events from "
        "2025-01-01-00:00, small rows, one landing file per hour "
        "(benchmarks.hourly_location), against plain scripts batching an hour, "
        "a day or the whole range",
    )
    backfill.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="POLICY",
        help="with --shape hourly --via daemon: the backfill policy set on the asset, "
        "single_run (default) or multi_run:N; repeat it to run one UI backfill per policy",
    )
    backfill.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --shape hourly --via process: run the step under cProfile, its stats "
        "written to FILE, and report where each partition's time goes",
    )
    backfill.add_argument(
        "--dagster-storage",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="with --shape hourly: the Dagster instance's storage, postgres (default: a "
        "scratch database on the bench's server, as a deployment has) or sqlite (as "
        "`dagster dev` has; it writes a planned event per partition before a run starts)",
    )
    # The in-process path; with --shape hourly --via daemon, the UI path and its
    # Dagster floor too (the daily UI path runs once).
    _repeats_argument(backfill)
    _common_arguments(backfill, run_backfill)

    memory = kinds.add_parser(
        "memory", help="peak RSS of one large orders partition (dagster asset materialize)"
    )
    add_module_option(memory)  # a location serving `orders`
    memory.add_argument("--rows", type=int, required=True, metavar="N")
    memory.add_argument("--chunk-rows", type=int, default=50_000, metavar="C",
                        help="rows per chunk (default 50,000)")  # fmt: skip
    _common_arguments(memory, run_memory)

    status = kinds.add_parser(
        "status", help="status, dead-letter list and platform_health on a large warehouse"
    )
    add_module_option(status)
    status.add_argument("--partitions", type=int, default=10_000, metavar="N",
                        help="partition rows per backfill asset (default 10,000)")  # fmt: skip
    status.add_argument("--quarantined", type=int, default=1_000, metavar="Q",
                        help="quarantine entries over all assets (default 1,000)")  # fmt: skip
    status.add_argument("--repeats", type=int, default=5, metavar="K",
                        help="times each is timed after a warm-up (default 5)")  # fmt: skip
    _common_arguments(status, run_status)

    holds = kinds.add_parser(
        "holds", help="one holds_sensor tick over thousands of held partitions"
    )
    holds.add_argument("--held", type=int, default=2000, metavar="N",
                       help="held days of one daily backfill (default 2,000)")  # fmt: skip
    _common_arguments(holds, run_holds)
    triage = kinds.add_parser(
        "triage", help="dead-letter groups over a dead letter of many entries and causes"
    )
    triage.add_argument("--entries", type=int, default=10_000, metavar="N",
                        help="open dead-letter entries, three assets (default 10,000)")  # fmt: skip
    triage.add_argument("--repeats", type=int, default=5, metavar="K",
                        help="times each is timed (default 5)")  # fmt: skip
    _common_arguments(triage, run_triage)

    scale = kinds.add_parser(
        "scale",
        help="status, a metrics scrape, dead-letter groups and a redrive tick on an hourly "
        "backfill of 100,000 partitions",
    )
    scale.add_argument("--partitions", type=int, default=100_000, metavar="N",
                       help="hourly partitions of the backfill (default 100,000)")  # fmt: skip
    scale.add_argument("--entries", type=int, default=10_000, metavar="E",
                       help="open dead-letter entries (default 10,000)")  # fmt: skip
    _repeats_argument(scale)
    _common_arguments(scale, run_scale)

    plan = kinds.add_parser(
        "plan", help="jobs-platform plan over a year of hourly partitions (8,760)"
    )
    plan.add_argument("--hours", type=int, default=8_760, metavar="N",
                      help="hourly partitions planned (default 8,760: a year)")  # fmt: skip
    plan.add_argument("--repeats", type=int, default=5, metavar="K",
                      help="times each is timed (default 5)")  # fmt: skip
    _common_arguments(plan, run_plan)
    return parser


def _common_arguments(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> None:
    """What every bench takes (--json, --database-url), and the function that runs it."""
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="PostgreSQL to run on (default: JOBS_PLATFORM_DATABASE_URL if it is PostgreSQL, "
        "else a scratch database on 127.0.0.1:5432, dropped afterwards)",
    )
    parser.set_defaults(handler=handler)


def run_upsert(args: argparse.Namespace) -> int:
    from benchmarks.bad_rows import measure_bad_rows
    from benchmarks.upsert import run_upsert_bench

    bad_every = args.bad_every
    also = None if bad_every is None else lambda e, f: measure_bad_rows(e, f, bad_every)
    return _run(
        args,
        lambda url: run_upsert_bench(url, args.rows, also, args.repeats, args.warmup),
        _print_upsert,
    )


def run_merge(args: argparse.Namespace) -> int:
    from benchmarks.merge import run_merge_bench

    return _run(
        args,
        lambda url: run_merge_bench(url, args.rows, args.changed, args.repeats, args.warmup),
        _print_merge,
    )


def run_gate(args: argparse.Namespace) -> int:
    from benchmarks.gate import run_gate_bench, show_gate

    return _run(
        args, lambda url: run_gate_bench(url, args.rows, args.repeats, args.warmup), show_gate
    )


def run_rerun(args: argparse.Namespace) -> int:
    from benchmarks.rerun import run_rerun_bench

    module = args.module
    return _run(
        args,
        lambda url: run_rerun_bench(
            url,
            args.rows,
            args.changed,
            args.repeats,
            args.chunk_rows,
            module,
            args.warmup,
            profile=args.profile,
        ),
        _print_rerun,
    )


def run_staging(args: argparse.Namespace) -> int:
    from benchmarks.staging import run_staging_bench

    return _run(
        args,
        lambda url: run_staging_bench(url, args.rows, args.repeats, args.warmup),
        _print_staging,
    )


def _print_merge(figures: dict) -> None:
    print(
        f"\n{figures['rows']:,} rows in the table, chunks of {figures['chunk_rows']:,}; "
        f"median (min - max) of {figures['repeats']} alternated runs after a warm-up\n"
    )
    print(f"  {'changed':>8} {'method':<26} {'seconds':>26} {'new versions':>13} {'load':>5}")
    for result in figures["results"]:
        for name, method in result["methods"].items():
            print(
                f"  {result['changed_fraction']:>7.0%} {name:<26} {_spread(method):>26} "
                f"{method['new_row_versions']:>13,} {method['load_average']:>5.2f}"
            )
    print("\ntargets (the best plain-script variant's seconds / the framework's, run by run)")
    for result in figures["results"]:
        ratio = result["framework_speed_vs_best_plain_script"]
        exact = result["framework_new_row_versions"] == result["changed_rows"]
        print(
            f"  {_verdict(ratio >= 1.0 and exact)}  {result['changed_fraction']:.0%} changed: "
            f">= 1.0 x the best plain script ({result['best_plain_script']}: {ratio:.2f} x), "
            "new row versions = changed rows"
        )


def _spread(figures: dict) -> str:
    return f"{figures['seconds']:.3f} ({figures['min_seconds']:.3f} - {figures['max_seconds']:.3f})"


def _repeats_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        metavar="K",
        help="timed runs of each method, alternated, after the warm-up rounds (default 5)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        metavar="W",
        help="rounds run first and not kept (default 1)",
    )


def run_backfill(args: argparse.Namespace) -> int:
    from benchmarks.backfill import run_backfill_bench
    from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS

    if args.module and args.via != "daemon":  # before a scratch database is made
        raise ValueError("-m applies to --via daemon: --via process loads no code location")
    if args.shape == "hourly":
        return _run_hourly(args)
    if args.policy or args.profile:
        raise ValueError("--policy and --profile apply to --shape hourly")

    def bench(url: str) -> dict:
        return run_backfill_bench(
            url,
            args.partitions,
            args.rows_per_partition,
            chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS,
            runs=args.runs,
            via=args.via,
            execution=args.execution,
            rerun=not args.no_rerun,
            module=args.module,
            repeats=args.repeats,
            warmup=args.warmup,
        )

    return _run(args, bench, _print_backfill)


def _run_hourly(args: argparse.Namespace) -> int:
    from benchmarks.hourly import DEFAULT_POLICIES, run_hourly_bench

    if args.module:
        raise ValueError("-m does not apply to --shape hourly: its location is the bench's own")
    if args.policy and args.via != "daemon":
        raise ValueError("--policy applies to --via daemon (the in-process run is one run)")
    if args.profile and args.via != "process":
        raise ValueError("--profile applies to --via process")

    def bench(url: str) -> dict:
        return run_hourly_bench(
            url,
            args.partitions,
            args.rows_per_partition,
            policies=tuple(args.policy or DEFAULT_POLICIES),
            via=args.via,
            chunk_rows=args.chunk_rows,
            rerun=not args.no_rerun,
            repeats=args.repeats,
            warmup=args.warmup,
            profile=args.profile,
            dagster_storage=args.dagster_storage,
        )

    return _run(args, bench, _print_hourly)


def run_memory(args: argparse.Namespace) -> int:
    from benchmarks.memory import run_memory_bench

    module = args.module
    return _run(
        args, lambda url: run_memory_bench(url, args.rows, args.chunk_rows, module), _print_memory
    )


def _print_memory(figures: dict) -> None:
    load = figures["notes"]["load_average_1m"]
    print(
        f"\n{figures['rows']:,} rows in one partition, chunks of {figures['chunk_rows']:,}: "
        f"peak RSS {figures['peak_rss_mib']:,.1f} MiB, {figures['seconds']:.1f} s "
        f"(attempt {figures['attempt_duration_seconds']} s); load {load['before']} -> "
        f"{load['after']}"
    )


def run_status(args: argparse.Namespace) -> int:
    from benchmarks.status import run_status_bench

    def bench(url: str) -> dict:
        return run_status_bench(
            url, args.partitions, args.quarantined, args.repeats, module=args.module
        )

    return _run(args, bench, _print_status)


def run_holds(args: argparse.Namespace) -> int:
    from benchmarks.holds import run_holds_bench

    return _run(args, lambda url: run_holds_bench(url, args.held), _print_holds)


def _print_holds(figures: dict) -> None:
    print(f"\none holds_sensor tick, {figures['held']:,} held days of a daily backfill:")
    for name, what in (
        ("resume", "a pause lifted (every 15th done meanwhile)"),
        ("again", "the next tick, no run found yet"),
        ("ready", f"all not ready, all landed ({figures['notes']['checks_per_tick']} checked)"),
    ):
        result = figures["results"][name]
        print(f"  {what:<48} {result['runs']:>5} runs  {result['seconds']:.2f} s")


def run_plan(args: argparse.Namespace) -> int:
    from benchmarks.plan import run_plan_bench

    return _run(args, lambda url: run_plan_bench(url, args.hours, args.repeats), _print_plan)


def _print_plan(figures: dict) -> None:
    seeded, totals = figures["seeded"], figures["totals"]
    print(
        f"\n{figures['hours']:,} hourly partitions planned ({seeded['partitions']:,} with a "
        f"state, {seeded['entries']} quarantined, {seeded['leases']} in flight): run "
        f"{totals['run']:,}, skip {totals['skip']:,} ({totals['by_reason']})"
    )
    print(f"median (min - max) of {figures['repeats']} runs after a warm-up, seconds\n")
    for name, result in figures["results"].items():
        print(f"  {name:<29} {_spread_of(result):>26}")
    target = figures["target"]
    print(
        f"\n  {_verdict(target['met'])}  plan in process < {target['plan_in_process_seconds']} s"
        f"; load {figures['notes']['load_average_1m']}"
    )
    print(
        f"  {_verdict(target['met_asking_ready'])}  the same asking ready= about each hour it "
        f"runs ({figures['totals_asking_ready']['by_reason']})"
    )


def _spread_of(result: dict) -> str:
    return (
        f"{result['median_seconds']:.3f} ({result['min_seconds']:.3f} - "
        f"{result['max_seconds']:.3f})"
    )


def run_triage(args: argparse.Namespace) -> int:
    from benchmarks.triage import run_triage_bench

    return _run(args, lambda url: run_triage_bench(url, args.entries, args.repeats), _print_triage)


def _print_triage(figures: dict) -> None:
    notes = figures["notes"]
    print(
        f"\n{figures['entries']:,} open entries over {', '.join(figures['assets'])} "
        f"(+{notes['resolved_entries']:,} resolved), {figures['causes_seeded']} causes seeded, "
        f"{figures['groups']} groups found (largest {figures['largest_groups']}); built in "
        f"{notes['build_seconds']} s\n"
    )
    print(f"  {'':<32} {'median s':>9} {'min s':>8} {'max s':>8}")
    for name, result in figures["results"].items():
        print(
            f"  {name:<32} {result['median_seconds']:>9.3f} {result['min_seconds']:>8.3f} "
            f"{result['max_seconds']:>8.3f}"
        )
    target = figures["target_seconds"]
    print(f"\n  {_load_average(notes)}\ntargets")
    print(
        f"  {_verdict(figures['groups'] == figures['causes_seeded'])}  one group per cause: "
        f"{figures['groups']} groups of {figures['causes_seeded']} causes"
    )
    for name, result in figures["results"].items():
        median = result["median_seconds"]
        print(f"  {_verdict(median < target)}  {name} < {target} s (median): {median:.3f} s")


def run_scale(args: argparse.Namespace) -> int:
    from benchmarks.scale import run_scale_bench

    def bench(url: str) -> dict:
        return run_scale_bench(url, args.partitions, args.entries, args.repeats, args.warmup)

    return _run(args, bench, _print_scale)


def _print_scale(figures: dict) -> None:
    notes = figures["notes"]
    seeded = notes["seed_seconds"]
    print(
        f"\n{figures['asset']}: {figures['partitions']:,} hourly partitions from "
        f"{figures['first_partition']}, {figures['entries']:,} open dead-letter entries; "
        f"seeded in {seeded['copy']} s (COPY) + {seeded['analyze']} s (ANALYZE) + "
        f"{seeded['catalog']} s (catalog)"
    )
    print(f"status says: {notes['status_figures']}\n")
    print(f"  {'':<26} {'median s':>9} {'min-max s':>15} {'load':>6}")
    for name, result in figures["results"].items():
        spread = f"{result['min_seconds']:.3f}-{result['max_seconds']:.3f}"
        print(f"  {name:<26} {result['seconds']:>9.3f} {spread:>15} {result['load_average']:>6}")
    print(f"\n  {_load_average(notes)}\ntargets")
    target = figures["target_seconds"]
    for name, result in figures["results"].items():
        print(
            f"  {_verdict(figures['met'][name])}  {name} < {target:g} s (median): "
            f"{result['seconds']:.3f} s"
        )


def _run(args: argparse.Namespace, bench, show) -> int:
    from benchmarks.database import BenchDatabaseError, bench_database

    try:
        with bench_database(args.database_url) as database:
            if not args.json:
                print(f"database: {database.shown}", flush=True)
            figures = bench(database.url)
    except BenchDatabaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures.setdefault("notes", {})["database"] = database.shown
    if args.json:
        print(json.dumps(figures))
    else:
        show(figures)
    return 0


def _print_upsert(figures: dict) -> None:
    results, notes = figures["results"], figures["notes"]
    relative = notes["framework_speed_relative_to"]
    print(
        f"\n{figures['rows']:,} orders rows, chunks of {notes['chunk_rows']:,}; median (min - max) "
        f"of {notes['repeats']} alternated runs after a warm-up\n"
    )
    print(
        f"  {'method':<36} {'rows':>10} {'seconds':>26} {'rows/s':>11} "
        f"{'framework / this':>17} {'load':>5}"
    )
    for name, result in results.items():
        rows = result["rows"]
        ratio = f"{relative[name]:.2f}x" if name in relative else "1.00x"
        print(
            f"  {name:<36} {rows:>10,} {_spread(result):>26} {result['rows_per_s']:>11,.0f} "
            f"{ratio:>17} {result['load_average']:>5.2f}"
        )
    sample = notes["sample_rows"]
    if sample < figures["rows"]:
        print(f"\n  pandas and executemany ran on the first {sample:,} rows (too slow for more)")
    if isinstance(notes.get("copy_floor_server"), str):
        print(f"  copy_floor_server {notes['copy_floor_server']}")
    print(
        f"  best plain script: {results['best_plain_script']['variant']} (new rows), "
        f"{results['best_plain_script_unchanged']['variant']} (unchanged)"
    )
    print(
        "  unchanged re-run: "
        f"{notes['framework_upsert_unchanged_new_row_versions']} new row versions, "
        f"{notes['framework_upsert_unchanged_time_vs_first_run']:.2f} x the first run's time"
    )
    print("\ntargets (framework speed / the method's, the median of the runs' ratios)")
    for method, floor, label in UPSERT_TARGETS:
        if method in relative:
            print(f"  {_verdict(relative[method] >= floor)}  {label}: {relative[method]:.2f} x")
    unchanged_vs_plain = notes["unchanged_speed_relative_to_best_plain_script_unchanged"]
    print(
        f"  {_verdict(unchanged_vs_plain >= 1.0)}  unchanged re-run >= 1.0 x the best plain "
        f"script's: {unchanged_vs_plain:.2f} x"
    )
    unchanged = notes["framework_upsert_unchanged_time_vs_first_run"]
    no_versions = notes["framework_upsert_unchanged_new_row_versions"] == 0
    print(
        f"  {_verdict(no_versions and unchanged <= UNCHANGED_TARGET)}  unchanged re-run: 0 new row "
        f"versions, time <= {UNCHANGED_TARGET} x the first run: {unchanged:.2f} x"
    )
    if "bad_rows" in notes:
        _print_bad_rows(notes["bad_rows"])


def _print_bad_rows(bad: dict) -> None:
    print(
        f"\nbad_rows=RejectRows(...): one rejected row in every {bad['every']:,} "
        f"({bad['rows_rejected_per_pass']:,} a pass), into a table with a CHECK"
    )
    print(f"  {'pass':<24} {'seconds':>9} {'rows/s':>11} {'extra statements':>17}")
    for path in ("new_rows", "merge_unchanged"):
        for name in ("clean", "bad"):
            result = bad[f"{name}_{path}"]
            print(
                f"  {name + ' ' + path:<24} {result['seconds']:>9.3f} "
                f"{result['rows_per_s']:>11,.0f} {result['extra_statements']:>17}"
            )
        print(f"  {path}: bad / clean time {bad[f'{path}_bad_vs_clean_time']:.2f} x")


def _print_backfill(figures: dict) -> None:
    if figures.get("via") == "daemon":
        _print_daemon_backfill(figures)
        return
    notes = figures["notes"]
    partitions = notes["partitions"]
    print(
        f"\n{partitions} partitions x {notes['rows_per_partition']:,} orders, "
        f"chunks of {notes['chunk_rows']:,}; Dagster: {notes['dagster_runs']}; median (min - "
        f"max) of {notes['repeats']} alternated runs after a warm-up\n"
    )
    print(f"  {'':<32} {'seconds':>26} {'per partition':>14} {'load':>5}")
    for label, result in (
        ("Dagster backfill", notes["dagster_backfill"]),
        ("plain script", notes["plain_script"]),
    ):
        print(
            f"  {label:<32} {_spread(result):>26} {result['seconds'] / partitions:>14.3f} "
            f"{result['load_average']:>5.2f}"
        )
    rerun = notes["dagster_rerun_unchanged_seconds"]
    print(f"  {'Dagster re-run, input unchanged':<32} {rerun:>26.3f} {rerun / partitions:>14.3f}")
    print(
        f"\n  ratio (Dagster / plain, run by run): {figures['ratio']:.2f}; unchanged re-run: "
        f"{notes['dagster_rerun_unchanged_new_row_versions']} new row versions, "
        f"{notes['dagster_rerun_unchanged_vs_first_run_time']:.2f} x the first run's time"
    )
    peaks = ", ".join(f"{phase} {mib:g}" for phase, mib in notes["peak_rss_mib"].items())
    print(f"  peak RSS of this process (MiB): {peaks}")
    print(f"  {_load_average(notes)}")
    met = figures["ratio"] <= BACKFILL_TARGET
    print(f"\ntargets\n  {_verdict(met)}  Dagster backfill <= {BACKFILL_TARGET} x the plain script")


def _print_daemon_backfill(figures: dict) -> None:
    notes, rerun = figures["notes"], figures["rerun_unchanged"]
    plain = figures["plain_script_seconds"]
    print(
        f"\n{notes['partitions']} partitions x {notes['rows_per_partition']:,} orders, chunks of "
        f"{notes['chunk_rows']:,}; UI path (webserver + daemon, launchPartitionBackfill)\n"
    )
    rows = [
        ("plain script", plain),
        ("UI backfill, end to end", figures["end_to_end_seconds"]),
        ("  wait for the first run", figures["wait_for_first_run_seconds"]),
        ("  first run created -> last ended", figures["dagster_backfill_seconds"]),
    ]
    if rerun:
        again = rerun["first_run_created_to_last_run_ended_seconds"]
        rows += [
            ("UI re-run unchanged, end to end", rerun["end_to_end_seconds"]),
            ("  first run created -> last ended", again),
        ]
    print(f"  {'':<36} {'seconds':>9} {'x plain':>8}")
    for label, seconds in rows:
        print(f"  {label:<36} {seconds:>9.3f} {seconds / plain:>8.2f}")
    print(
        f"\n  per run (median): created -> started "
        f"{figures['run_created_to_started_median_seconds']:.1f} s, started -> ended "
        f"{figures['run_started_to_ended_median_seconds']:.1f} s; execution: {notes['execution']}"
    )
    print(
        f"  no run existed for {figures['idle_between_runs_seconds']:.1f} s of the window "
        "(the daemon's tick between a run's end and the next run)"
    )
    print(f"  runs created: {figures['runs_created']}")
    if rerun:
        print(
            f"  re-run: {rerun['runs_created']} runs, {rerun['new_row_versions']} new row "
            f"versions, {rerun['vs_first_run_time']:.2f} x the first run"
        )
    peaks = ", ".join(f"{role} {mib:g}" for role, mib in figures["peak_rss_mib"].items() if mib)
    print(f"  peak RSS (MiB): {peaks}")
    print(f"  {_load_average(notes)}")
    met = figures["ratio"] <= UI_BACKFILL_TARGET
    print(
        f"\ntargets\n  {_verdict(met)}  UI backfill, first run created -> last ended <= "
        f"{UI_BACKFILL_TARGET} x the plain script: {figures['ratio']:.2f} x"
    )
    if rerun:
        rerun_met = rerun["vs_first_run_time"] <= UI_RERUN_TARGET and not rerun["new_row_versions"]
        print(
            f"  {_verdict(rerun_met)}  unchanged UI re-run <= {UI_RERUN_TARGET} x the first, 0 "
            f"new row versions: {rerun['vs_first_run_time']:.2f} x, {rerun['new_row_versions']}"
        )


def _print_hourly(figures: dict) -> None:
    plain, partitions = figures["plain_script"], figures["partitions"]
    seed = figures["seed"]
    print(
        f"\n{partitions:,} hourly partitions x {figures['rows_per_partition']:,} events "
        f"({figures['rows']:,} rows); seeded in {seed['seconds']:.2f} s "
        f"({seed['bytes'] / 1e6:.1f} MB, {seed['files']:,} files, streamed)\n"
    )
    print(f"  {'plain script, one transaction per':<36} {'seconds':>26} {'load':>5}")
    for name in ("per_hour", "per_day", "whole_range"):
        mark = "  (best)" if name == plain["best"] else ""
        print(f"  {name:<36} {_spread(plain[name]):>26} {plain[name]['load_average']:>5.2f}{mark}")
    best = plain[plain["best"]]["seconds"]
    runs: list[tuple[str, dict]] = list(figures["ui"].items())
    if figures["in_process"]:
        runs.append(("in process, one run", figures["in_process"]))
    for policy, ui in runs:
        if "first_run_created_to_last_run_ended_seconds" not in ui:
            print(
                f"\n  {policy}: {ui['seconds']:.2f} s, {1000 * ui['per_partition']:.1f} ms a "
                f"partition, {ui['ratio']:.2f} x the best plain script, "
                f"{ui['ratio_to_per_hour_plain_script']:.2f} x the per-hour one"
            )
            for label, row in ui.get("profile", {}).items():
                print(
                    f"    {label:<48} {row['seconds']:>9.3f} s {row['ms_per_partition']:>8.2f} ms"
                )
            for name in ("statements_per_partition", "dagster_events_per_partition"):
                if name in ui:
                    shown = ", ".join(f"{k} {v:g}" for k, v in ui[name].items())
                    print(f"    {name.replace('_', ' ')}: {shown}")
            continue
        breakdown = ui["breakdown"]
        print(f"\n  UI path, policy {policy}: {ui['runs_created']} run(s)")
        window = ui["first_run_created_to_last_run_ended_seconds"]
        after = ui["last_run_ended_to_backfill_complete_seconds"]
        for label, seconds in (
            ("launch -> first run created", ui["wait_for_first_run_seconds"]),
            ("first run created -> last ended (window)", window),
            ("last run ended -> backfill complete", after),
            ("launch -> backfill complete", ui["end_to_end_seconds"]),
        ):
            print(f"    {label:<44} {seconds:>9.2f} s {seconds / best:>7.2f} x best plain")
        print("    the runs' phases, summed over runs:")
        for phase, seconds in breakdown["seconds_summed_over_runs"].items():
            print(f"      {phase:<42} {seconds:>9.2f} s")
        print(
            f"    step seconds per partition: {1000 * breakdown['step_seconds_per_partition']:.1f}"
            f" ms; Dagster events per partition: "
            + ", ".join(f"{k} {v:g}" for k, v in breakdown["dagster_events_per_partition"].items())
        )
        print(
            f"    window: {ui['ratio']:.2f} x the best plain script "
            f"({plain['best']}), {ui['ratio_to_per_hour_plain_script']:.2f} x the per-hour one; "
            f"load {ui['load_average_1m']['at_launch']} -> {ui['load_average_1m']['after']}"
        )
        _print_floor(ui)
        met = ui["ratio"] <= HOURLY_TARGET
        print(f"    {_verdict(met)}  run window <= {HOURLY_TARGET} x the best plain script")
    print(f"\n  Dagster storage: {figures['notes']['dagster_storage']}")
    print(f"  {_load_average(figures['notes'])}")


def _print_floor(ui: dict) -> None:
    """The framework's run window against the Dagster floor's, and its split per partition."""
    floor, split = ui["dagster_floor"], ui["per_partition_split"]
    windows = ui["run_window"], floor["run_window"]
    print(
        f"    run window, median (min - max) of {len(windows[0]['runs_seconds'])} alternated: "
        f"framework {_spread(windows[0])} s, Dagster floor {_spread(windows[1])} s"
    )
    print(
        f"    framework / floor {ui['framework_to_floor_ratio']:.2f} x (pairwise); floor / best "
        f"plain {floor['ratio_to_best_plain_script']:.2f} x; per partition: window "
        f"{split['window_ms']:.1f} ms = Dagster floor {split['dagster_floor_ms']:.1f} ms + "
        f"framework {split['framework_own_ms']:.1f} ms (rounds' differences' median "
        f"{split['framework_own_ms_pairwise']:.1f} ms; floor share "
        f"{split['dagster_floor_share']:.0%})"
    )
    print(f"    {'phase, ms a partition (summed over runs)':<44} {'framework':>10} {'floor':>8}")
    for phase, row in split["phases_ms_summed_over_runs"].items():
        print(f"      {phase:<42} {row['framework']:>10.2f} {row['dagster_floor']:>8.2f}")
    events = split["dagster_events_per_partition"]
    floor_events = floor["breakdown"]["dagster_events_per_partition"]
    print(
        f"    Dagster events per partition: framework {events['framework']:g}, "
        f"floor {events['dagster_floor']:g} ("
        + ", ".join(f"{k} {v:g}" for k, v in floor_events.items())
        + ")"
    )


def _print_rerun(figures: dict) -> None:
    notes = figures["notes"]
    print(
        f"\none day of {figures['rows']:,} orders, {figures['changed_fraction']:.0%} of them "
        f"corrected each round; chunks of {notes['chunk_rows']:,}; median (min - max) of "
        f"{notes['repeats']} alternated runs after a warm-up\n"
    )
    print(f"  {'method':<26} {'seconds':>26} {'load':>5}")
    for name, result in figures["methods"].items():
        print(f"  {name:<26} {_spread(result):>26} {result['load_average']:>5.2f}")
    print("\n  where the framework's seconds went (medians):")
    for part, seconds in figures["framework_seconds_split_median"].items():
        print(f"    {part:<40} {seconds:>8.3f}")
    if profiled := figures.get("attempt_profile"):
        print(f"\n  one more round under py-spy: {profiled['command']}")
        for phase, seconds in profiled["attempt_seconds_by_phase"].items():
            print(f"    {phase:<52} {seconds:>8.3f}")
    ratio = figures["ratio"]
    print(
        f"\ntargets\n  {_verdict(ratio <= RERUN_TARGET)}  the re-run through `dagster asset "
        f"materialize` <= {RERUN_TARGET} x the best plain script "
        f"({figures['best_plain_script']}): {ratio:.2f} x"
    )


def _print_staging(figures: dict) -> None:
    print(
        f"\n{figures['rows']:,} orders rows into a temporary stage; median (min - max) of "
        f"{figures['repeats']} alternated runs after a warm-up\n"
    )
    print(f"  {'way':<18} {'seconds':>26} {'client CPU s':>13} {'load':>5}")
    for name, result in sorted(figures["results"].items(), key=lambda kv: kv[1]["seconds"]):
        print(
            f"  {name:<18} {_spread(result):>26} {result['cpu_seconds']:>13.3f} "
            f"{result['load_average']:>5.2f}"
        )
    print(
        f"\n  fastest: {figures['fastest']}; the plain script stages with "
        f"{figures['plain_script_stages_with']}"
    )


def _print_status(figures: dict) -> None:
    notes = figures["notes"]
    print(
        f"\n{figures['partitions_per_asset']:,} partitions per asset "
        f"({', '.join(figures['assets'])}), {figures['quarantine_entries']:,} quarantine entries; "
        f"built in {notes['build_seconds']} s\n"
    )
    print(f"  {'':<40} {'median s':>9} {'min-max s':>15}")
    for name, result in figures["results"].items():
        spread = f"{result['min_seconds']:.3f}-{result['max_seconds']:.3f}"
        print(f"  {name:<40} {result['median_seconds']:>9.3f} {spread:>15}")
    ratio = figures["results"]["status_cli_load_location"]["ratio_to_first"]
    print(f"\n  loading the location / the catalog (median of the pairs): {ratio:.2f} x")
    print(f"  {_load_average(notes)}\ntargets")
    for name in ("status_cli_catalog", "dead_letter_list_cli"):
        median = figures["results"][name]["median_seconds"]
        print(f"  {_verdict(median < STATUS_TARGET)}  {name} < {STATUS_TARGET} s: {median:.3f} s")


def _load_average(notes: dict) -> str:
    """The one-minute load average before and after the bench: how quiet the machine was."""
    load = notes["load_average_1m"]
    return f"load average (1 min): {load['before']} -> {load['after']}"


def _verdict(met: bool) -> str:
    return "met    " if met else "NOT MET"


if __name__ == "__main__":
    sys.exit(main())
