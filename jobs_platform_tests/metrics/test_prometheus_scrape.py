"""Done when: a real Prometheus scrapes `jobs-platform metrics serve` with the project's
rules loaded, and after one good and one poison day of `orders` its HTTP API shows them.

Everything is on loopback; every wait polls with a deadline.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs_platform_tests.metrics.prometheus_tools import (
    PROMETHEUS_DIR,
    dashboard_expressions,
    required_binary,
)
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.assets import orders
from orders_example.orders.seed import seed_orders

GOOD = dt.date(2024, 6, 1)
POISON = dt.date(2024, 6, 2)
STARTUP_SECONDS = 60
FIGURES_SECONDS = 90  # scrapes every second, a cache of one second, rules every second


def stop(process: subprocess.Popen) -> None:
    """SIGTERM this process (and only it), then SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


def first_line(process: subprocess.Popen, timeout: float, log: Path) -> str:
    """The first line the process prints, or a failure with its log."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        line = ""
    if not line:
        pytest.fail(f"metrics serve printed nothing in {timeout}s (exit {process.poll()}): "
                    f"{log.read_text()[-3000:]}")  # fmt: skip
    return line.strip()


@pytest.fixture
def metrics_server(pg_platform_env, tmp_path) -> Iterator[str]:
    """`jobs-platform metrics serve` in a subprocess; yields its host:port."""
    log = tmp_path / "metrics_serve.log"
    command = [str(Path(sys.executable).with_name("jobs-platform")), "metrics", "serve",
               "--host", "127.0.0.1", "--port", "0", "--cache-seconds", "1"]  # fmt: skip
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command,
            env={**os.environ, **pg_platform_env},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        line = first_line(process, STARTUP_SECONDS, log)
        assert line.startswith("serving metrics on http://127.0.0.1:"), line
        yield urllib.parse.urlsplit(line.split()[-1]).netloc
    finally:
        stop(process)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@pytest.fixture
def prometheus(metrics_server, tmp_path) -> Iterator[str]:
    """A Prometheus scraping the server every second with the project's alert rules."""
    binary = required_binary("prometheus")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                           "evaluation_interval": "1s"},
                "rule_files": [str(PROMETHEUS_DIR / "alerts.yaml")],
                "scrape_configs": [{"job_name": "jobs_platform",
                                    "static_configs": [{"targets": [metrics_server]}]}],
            }
        )
    )  # fmt: skip
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"prometheus exited {process.returncode}: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
                    return response.status == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False

        wait_for(
            ready,
            interval=0.25,
            timeout=STARTUP_SECONDS,
            what=lambda: f"prometheus ready: {log.read_text()[-2000:]}",
        )
        yield base
    finally:
        stop(process)


def query(base: str, expression: str) -> dict | None:
    return http_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expression}))


def scalar(base: str, expression: str) -> float | None:
    """The single value of an instant query, or None (no series yet, or no answer)."""
    answer = query(base, expression)
    if not answer or answer["status"] != "success" or len(answer["data"]["result"]) != 1:
        return None
    return float(answer["data"]["result"][0]["value"][1])


def quarantine_alert_state(base: str) -> str | None:
    answer = http_json(f"{base}/api/v1/alerts") or {"data": {"alerts": []}}
    for alert in answer["data"]["alerts"]:
        labels = alert["labels"]
        if (
            labels["alertname"] == "JobsPlatformPartitionQuarantined"
            and labels.get("asset") == "orders"
        ):
            return alert["state"]
    return None


FIGURES = {
    "quarantined": 'jobs_platform_partitions{asset="orders", status="quarantined"}',
    "done": 'jobs_platform_partitions{asset="orders", status="done"}',
    "attempts": 'sum(jobs_platform_attempts_total{asset="orders"})',
    "duration_samples": 'jobs_platform_attempt_duration_seconds_count{asset="orders"}',
    "duration_buckets": 'count(jobs_platform_attempt_duration_seconds_bucket{asset="orders"})',
}


def test_prometheus_sees_one_done_one_quarantined_day_and_alerts(pg_platform_env, prometheus):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], GOOD, POISON, orders_per_day=50,
                poison_days=[POISON])  # fmt: skip
    for day in (GOOD, POISON):
        materialize([orders], day.isoformat())

    def figures() -> dict:
        seen = {name: scalar(prometheus, expression) for name, expression in FIGURES.items()}
        seen["quarantine_alert"] = quarantine_alert_state(prometheus)
        return seen

    def arrived() -> bool:
        seen = figures()
        return (
            (seen["quarantined"], seen["done"], seen["attempts"]) == (1, 1, 2)
            and (seen["duration_samples"] or 0) >= 1
            and seen["duration_buckets"] == 15  # 14 bounds and +Inf
            and seen["quarantine_alert"] in ("pending", "firing")
        )

    wait_for(
        arrived,
        timeout=FIGURES_SECONDS,
        interval=0.25,
        what=lambda: f"the figures; last seen {figures()}",
    )

    target = http_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"][0]
    assert (target["health"], target["lastError"]) == ("up", "")


def test_every_dashboard_expression_is_valid_promql_over_the_scraped_metrics(prometheus):
    wait_for(
        lambda: scalar(prometheus, "count(jobs_platform_partitions)"),
        timeout=FIGURES_SECONDS,
        interval=0.25,
        what="a first scrape",
    )

    for expression in dashboard_expressions():
        instant = expression.replace("$asset", ".*").replace("$__rate_interval", "1m")
        answer = query(prometheus, instant)

        assert answer and answer["status"] == "success", (expression, answer)
