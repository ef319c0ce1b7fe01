"""`jobs-platform status`: per backfill asset, where its partitions stand.

Without a window it answers from the backfill catalog (`store.catalog`): what the code
location serves and its partition keys, written to the warehouse at deploy and by each
`platform_health` materialization. Neither Dagster nor the location is imported then
(a fraction of a second instead of seconds). Without a catalog of the location in the
warehouse the environment names, with `--from/--to` (a window needs the partitions'
definitions) or with `--load-location`, it loads the location, as before the catalog.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jobs_platform.location import add_module_option, code_location_module
from jobs_platform.suggested_commands import suggested_command


def register(commands) -> None:
    parser = commands.add_parser("status", help="health of every backfill at a glance")
    add_module_option(parser)
    parser.add_argument(
        "--from",
        dest="first",
        metavar="KEY",
        help="count only the partitions from this time partition key on (inclusive)",
    )
    parser.add_argument(
        "--to",
        dest="last",
        metavar="KEY",
        help="count only the partitions up to this time partition key (inclusive)",
    )
    parser.add_argument(
        "--load-location",
        action="store_true",
        help="load the code location for its backfills instead of reading the catalog",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    windowed = args.first is not None or args.last is not None
    location = code_location_module(args.module)
    source: dict[str, Any] = {"source": "location", "catalog_updated_at": None}
    source |= {"catalog_age_seconds": None, "catalog_stale": None}
    if not windowed and not args.load_location:
        answered = _from_catalog(location)
        if answered is not None:
            report, source = answered
            return _show(args, report, source, location)
        source["catalog_missing"] = True
    return _show(args, _from_location(args, windowed), source, location)


def _from_catalog(location: str) -> tuple[dict, dict[str, Any]] | None:
    """The report from `location`'s catalog in the environment's warehouse; None without one.

    The warehouse is the one $JOBS_PLATFORM_DATABASE_URL names: a location binding
    another finds no catalog of its own there, and is loaded (its warehouse is its
    resource's). Nothing is created: a warehouse that cannot be read here is left to the
    location's path, which says why in one line.
    """
    from jobs_platform.cli.warehouse import WarehouseUnavailable, open_store
    from jobs_platform.settings import Settings
    from jobs_platform.steering.circuit_report import circuits_report
    from jobs_platform.steering.holds import steering_status
    from jobs_platform.store.db import normalize_url
    from jobs_platform.store.migrate import SchemaNotReady

    settings = Settings.from_env()
    url = normalize_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).exists()):
        return None  # opening it would create it (the embedded default, or any SQLite file)
    try:
        store = open_store(settings)
    except (WarehouseUnavailable, SchemaNotReady):
        return None
    with store.connect() as connection:
        catalog = store.catalog.read(connection, location)
        if catalog is None:
            return None
        report = store.health.backfill_status(connection, catalog.partition_keys())
        report["steering"] = steering_status(connection, report["assets"])
        report["circuits"] = circuits_report(connection, list(report["assets"]))
    report["partitions_per_run"] = {e.asset: e.max_partitions_per_run for e in catalog.entries}
    return report, {
        "source": "catalog",
        "catalog_updated_at": catalog.updated_at.isoformat(),
        "catalog_age_seconds": catalog.age_seconds,
        "catalog_stale": catalog.stale,
    }


def _from_location(args: argparse.Namespace, windowed: bool) -> dict:
    from jobs_platform.cli.warehouse import open_warehouse
    from jobs_platform.location import dagster_instance, load_definitions, location_settings
    from jobs_platform.orchestration.health import partitions_per_run_of, status_report
    from jobs_platform.orchestration.windows import status_window

    definitions = load_definitions(args.module)
    # The location's own warehouse (its bound resource), whatever the environment says.
    settings = location_settings(definitions)
    open_warehouse(settings)  # fails in one line when it cannot be opened, before any work
    specs = definitions.resolve_all_asset_specs()
    # A bad key fails here, in one line naming what keys look like, before any query.
    window = status_window(specs, args.first, args.last) if windowed else None
    with dagster_instance() as instance:
        report = status_report(specs, instance, settings, window)
    report["partitions_per_run"] = partitions_per_run_of(definitions.assets or ())
    return report


def _show(args: argparse.Namespace, report: dict, source: dict[str, Any], location: str) -> int:
    from jobs_platform.steering.estimate import backfill_progress
    from jobs_platform.store.health import health_as_dict

    assets = health_as_dict(report["assets"])
    steering, circuits = report.get("steering", {}), report.get("circuits", {})
    for asset, figures in assets.items():
        figures.update(steering.get(asset, {}))
        figures["circuits"] = circuits.get(asset, [])
    going = backfill_progress(report["assets"], report.get("partitions_per_run", {}))
    for asset, progress in going.items():
        assets[asset]["progress"] = progress.as_dict()
    windowed = "window" in report
    if args.json:
        shown = {
            "assets": assets,
            "oldest_pending_request_age_seconds": report["oldest_pending_request_age_seconds"],
        }
        if windowed:
            shown |= {"window": report["window"], "not_windowed": report["not_windowed"]}
        shown |= {name: value for name, value in source.items() if name != "catalog_missing"}
        print(json.dumps(shown, indent=2))
        return 0
    if windowed:
        span = report["window"]
        print(
            f"window: partitions starting from {span['start'] or 'the first'} "
            f"until before {span['end'] or 'now'}\n"
        )
    header = f"{'asset':<24}{'done':>7}{'failed':>8}{'quarant.':>9}{'missing':>9}{'in flight':>10}"
    print(header + f"{'p50 s':>8}{'p95 s':>8}{'rows/s':>10}{'rejected':>10}{'ETA':>9}")
    for asset, health in assets.items():
        print(
            f"{asset:<24}{health['done']:>7}{health['failed']:>8}{health['quarantined']:>9}"
            f"{health['missing']:>9}{health['in_flight']:>10}"
            f"{_num(health['duration_p50_seconds']):>8}{_num(health['duration_p95_seconds']):>8}"
            f"{_num(health['rows_per_second']):>10}{health['rows_rejected']:>10}"
            f"{_eta(health['progress']):>9}"
        )
    _show_steering(steering)
    for line in _circuit_lines(circuits):
        print(line)
    if windowed and report["not_windowed"]:
        print(f"\nnot time-partitioned, left out: {', '.join(report['not_windowed'])}")
    age = report["oldest_pending_request_age_seconds"]
    print(f"\noldest pending backfill request: {f'{age:.0f}s ago' if age is not None else 'none'}")
    note = _source_note(source, location)
    if note:
        print(note)
    return 0


def _show_steering(steering: dict[str, dict]) -> None:
    """A line per backfill that is paused or holds partitions: by whom, and what waits."""
    from jobs_platform.steering.pauses import describe_pause

    lines = []
    for asset, figures in steering.items():
        held = figures["held"]
        if figures["paused"] is None and not any(held.values()):
            continue
        what = [describe_pause(figures["paused"])] if figures["paused"] else []
        if held["paused"]:
            what.append(f"{held['paused']} partitions held by the pause (launched on resume)")
        if held["not_ready"]:
            late = figures["not_ready_past_max_wait"]
            what.append(
                f"{held['not_ready']} held as not ready"
                + (f", {late} of them past their max_wait" if late else "")
            )
        lines.append(f"{asset}: {'; '.join(what)}")
    if lines:
        print("\nsteering:\n  " + "\n  ".join(lines))


def _circuit_lines(circuits: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One paragraph per open circuit: the cause, since when, and when the next probe tries."""
    lines = []
    for asset, opened in circuits.items():
        for circuit in opened:
            probe = (
                f"probing {circuit['probe_partition']}"
                if circuit["probe_partition"]
                else f"next probe at {circuit['next_probe_at']}"
            )
            lines += [
                f"\nCIRCUIT OPEN {asset}: cause {circuit['signature']} "
                f"({circuit['error_class']}: {circuit['last_error'][:120]})",
                f"  since {circuit['opened_at']} (opened on {circuit['partitions']} partitions); "
                f"{probe}; {circuit['probes_failed']} probe(s) failed, "
                f"{circuit['snoozes']} snooze(s); partitions wait, spending nothing",
            ]
    return lines


def _source_note(source: dict[str, Any], location: str) -> str | None:
    """Where the backfills and their keys came from, when a person should know."""
    from jobs_platform.store.catalog import CATALOG_STALE_AFTER_SECONDS

    refresh = (
        f"materialize platform_health, or run: {suggested_command('db', 'upgrade', '-m', location)}"
    )
    if source.get("catalog_missing"):
        return (
            f"no catalog of {location} in this warehouse: loaded the code location instead "
            f"(to write it, {refresh})"
        )
    if source["source"] != "catalog":
        return None
    age = _age(source["catalog_age_seconds"])
    if source["catalog_stale"]:
        return (
            f"STALE: from the catalog of {location} written {age} ago (over "
            f"{_age(CATALOG_STALE_AFTER_SECONDS)}): backfills and partition keys as of "
            f"{source['catalog_updated_at']}; to refresh, {refresh}"
        )
    return f"from the catalog of {location}, written {age} ago"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _eta(progress: dict[str, Any]) -> str:
    """The time left for what remains: `done` when nothing does, `-` without history."""
    if not progress["remaining"]:
        return "done"
    seconds = progress["eta_seconds"]
    return "-" if seconds is None else _age(seconds)


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"
