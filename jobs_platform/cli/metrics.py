"""`jobs-platform metrics serve`: the warehouse's figures as a Prometheus endpoint."""

from __future__ import annotations

import argparse
import signal

from jobs_platform.location import add_module_option


def register(commands) -> None:
    from jobs_platform.metrics import DEFAULT_HOST, DEFAULT_PORT

    parser = commands.add_parser("metrics", help="Prometheus metrics of every backfill")
    actions = parser.add_subparsers(dest="metrics", required=True, metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        help="serve /metrics over HTTP, read from the warehouse on each scrape",
        description="Serve the warehouse's figures at http://HOST:PORT/metrics for Prometheus. "
        "Each scrape reads the warehouse (set-based), at most once per --cache-seconds.",
    )
    add_module_option(serve)
    serve.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT}; 0 picks a free one)"
    )
    serve.add_argument(
        "--cache-seconds",
        type=float,
        default=None,
        metavar="S",
        help="reuse a reading for this long, whoever scrapes (default 5; 0 reads every scrape)",
    )
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from jobs_platform.cli.warehouse import open_store
    from jobs_platform.location import dagster_instance, load_definitions, location_settings
    from jobs_platform.metrics import METRICS_PATH
    from jobs_platform.metrics.exposition import (
        DEFAULT_CACHE_SECONDS,
        CachedReading,
        metrics_registry,
    )
    from jobs_platform.metrics.reader import read_metrics
    from jobs_platform.metrics.server import bind, metrics_app
    from jobs_platform.orchestration.health import backfill_expected_keys

    cache_seconds = DEFAULT_CACHE_SECONDS if args.cache_seconds is None else args.cache_seconds
    if cache_seconds < 0:
        raise ValueError(f"--cache-seconds must be 0 or more, got {cache_seconds:g}")
    definitions = load_definitions(args.module)
    # The location's own warehouse (its bound resource), whatever the environment says;
    # fails in one line when it cannot be opened, before serving.
    settings = location_settings(definitions)
    store = open_store(settings)
    specs = definitions.resolve_all_asset_specs()
    with dagster_instance() as instance:

        def read():
            # The expected keys are the code location's as of now: a new day, or a new
            # dynamic key, is missing from the next reading on.
            keys = backfill_expected_keys(specs, instance)
            with store.connect() as connection:
                return read_metrics(
                    connection, keys, clock=store.clock, max_redrives=settings.max_redrives
                )

        registry = metrics_registry(CachedReading(read, cache_seconds))
        server = bind(metrics_app(registry), args.host, args.port)
        # SIGTERM (a service manager, a test) stops as Ctrl-C does: the port is released.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving metrics on http://{host}:{server.server_port}{METRICS_PATH}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
