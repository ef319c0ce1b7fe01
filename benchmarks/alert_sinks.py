"""`python -m benchmarks.alert_sinks`: how long a burst's webhook alerts take with Slack dead.

A fresh schema holds `--entries` new quarantine entries of the orders example. Its
`dead_letter_sensor` is ticked in this process as the daemon ticks it (`build_sensor_context`
+ `evaluate_tick`), with three sinks: the log, a webhook (a real HTTP server on loopback,
answering 200) and Slack (a real server on loopback that reads each request and never
answers, so each send ends by Slack's client timeout, `--slack-timeout`).

The ticks run back to back; the time reported is the daemon's: a tick starts
`DEAD_LETTER_TICK_SECONDS` after the previous one started, or when it ended if it took
longer. `time_to_all_delivered_seconds` is when the webhook has had every entry, from the
first tick's start. Prints JSON; `met` when that is within one tick interval.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.server
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import sqlalchemy as sa

from benchmarks import EXAMPLE_MODULE
from benchmarks.database import fresh_schema, json_report_main, server_facts
from jobs_platform.alerts.resource import AlertsResource
from jobs_platform.alerts.sinks import AlertSink, LogSink, SlackSink, WebhookSink
from jobs_platform.dead_letter.asset import DEAD_LETTER_TICK_SECONDS, dead_letter_sensor
from jobs_platform.location import load_definitions
from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import EntryStatus, quarantine


class BenchAlerts(AlertsResource):
    """The log, the webhook and a Slack at the given URLs (the Slack stand-in's included)."""

    bench_webhook_url: str
    bench_slack_url: str
    bench_slack_timeout: int

    def sinks(self, settings: Settings | None = None) -> list[AlertSink]:
        return [
            LogSink(),
            WebhookSink(self.bench_webhook_url),
            SlackSink(
                "xoxb-bench",
                "alerts",
                timeout=self.bench_slack_timeout,
                base_url=f"{self.bench_slack_url}/api/",
            ),
        ]


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, dict[str, float]]]:
    """A loopback HTTP server answering 200; yields its URL and each key's first arrival."""
    arrivals: dict[str, float] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            arrivals.setdefault(self.headers.get("Idempotency-Key", ""), time.monotonic())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", arrivals
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def dead_slack() -> Iterator[str]:
    """A loopback server that accepts each request and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


def seed_burst(engine: sa.Engine, count: int) -> None:
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as connection:
        connection.execute(
            sa.insert(quarantine),
            [
                {
                    "asset": "orders",
                    "partition": f"burst-{number:04d}",
                    "episode": 1,
                    "status": EntryStatus.QUARANTINED,
                    "attempts": 1,
                    "error_class": "terminal",
                    "last_error": "burst",
                    "first_failed_at": now,
                    "last_failed_at": now,
                    "quarantined_at": now,
                }
                for number in range(count)
            ],
        )


def bench(database_url: str, args: argparse.Namespace) -> dict:
    defs = load_definitions(EXAMPLE_MODULE)
    resources = dict(defs.resources or {})
    ticks: list[dict[str, float]] = []
    with (
        fresh_schema(database_url, "alert_sinks") as url,
        tempfile.TemporaryDirectory() as home,
        webhook_receiver() as (webhook_url, arrivals),
        dead_slack() as slack_url,
    ):
        os.environ["JOBS_PLATFORM_DATABASE_URL"] = url
        engine = warehouse_engine(url)
        upgrade_warehouse(engine)
        seed_burst(engine, args.entries)
        alerts = BenchAlerts(
            bench_webhook_url=webhook_url,
            bench_slack_url=slack_url,
            bench_slack_timeout=args.slack_timeout,
        )
        cursor, started_at = None, 0.0  # the daemon's time of each tick's start
        with dg.DagsterInstance.local_temp(home) as instance:
            for _ in range(args.max_ticks):
                began = time.monotonic()
                with dg.build_sensor_context(
                    instance=instance,
                    instance_ref=instance.get_ref(),
                    cursor=cursor,
                    definitions=defs,
                    resources={**resources, "alerts": alerts},
                ) as context:
                    cursor = dead_letter_sensor.evaluate_tick(context).cursor
                seconds = time.monotonic() - began
                ticks.append(
                    {
                        "began": began,
                        "at": started_at,
                        "seconds": round(seconds, 2),
                        "delivered": len(arrivals),
                    }
                )
                if len(arrivals) >= args.entries:
                    break
                started_at += max(DEAD_LETTER_TICK_SECONDS, seconds)
    last = ticks[-1]
    done = last["delivered"] >= args.entries
    # The last arrival, on the daemon's time: its tick's start plus its offset in that tick.
    to_all = last["at"] + (max(arrivals.values()) - last["began"]) if done else None
    return {
        "entries": args.entries,
        "slack_timeout_seconds": args.slack_timeout,
        "tick_interval_seconds": DEAD_LETTER_TICK_SECONDS,
        "ticks_to_all_delivered": len(ticks) if done else None,
        "time_to_all_delivered_seconds": round(to_all, 2) if to_all is not None else None,
        "ticks": [
            {"seconds": tick["seconds"], "webhook_delivered": tick["delivered"]} for tick in ticks
        ],
        "met": to_all is not None and to_all <= DEAD_LETTER_TICK_SECONDS,
        "notes": {"server": server_facts(database_url), "max_ticks": args.max_ticks},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alert_sinks", description=__doc__)
    parser.add_argument("--entries", type=int, default=30)
    parser.add_argument("--slack-timeout", type=int, default=10, metavar="SECONDS")
    parser.add_argument("--max-ticks", type=int, default=30)
    return json_report_main(parser, argv, bench)


if __name__ == "__main__":
    sys.exit(main())
