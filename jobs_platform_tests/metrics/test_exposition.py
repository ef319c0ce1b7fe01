"""Specifications of `/metrics`: the contract's names, its labels, the cache, the server."""

from __future__ import annotations

import contextlib
import sys
import threading
import urllib.error
import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobs_platform.metrics.exposition import (
    METRIC_NAMES,
    CachedReading,
    metric_families,
    metrics_registry,
)
from jobs_platform.metrics.reader import read_metrics
from jobs_platform.metrics.server import bind, metrics_app
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import (
    AT,
    SECOND,
    a_partition,
    a_quarantine_entry,
    an_attempt,
)
from jobs_platform_tests.waiting import wait_for

NOW = AT + 3600 * SECOND
CLOCK = ManualClock(NOW)  # the database's clock, fixed: every reading is at NOW
KEYS = {"items": ["2024-01-01", "2024-01-02"]}
ALLOWED_LABELS = {"asset", "status", "outcome", "error_class", "reason", "le"}


def exposed(reading) -> dict[str, list]:
    """Each family's samples as Prometheus parses the text `/metrics` serves."""
    text = generate_latest(metrics_registry(CachedReading(lambda: reading))).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_the_families_are_the_contracts_names(connection):
    reading = read_metrics(connection, KEYS, clock=CLOCK)

    names = [family.name for family in metric_families(reading)]

    # prometheus_client names a counter family without `_total`; its samples have it.
    counters = (
        "jobs_platform_attempts",
        "jobs_platform_rows_written",
        "jobs_platform_redrives",
        "jobs_platform_rows_rejected",
    )
    assert [f"{n}_total" if n in counters else n for n in names] == list(METRIC_NAMES)


def test_partition_keys_are_never_labels(connection):
    for day in KEYS["items"]:
        a_partition(connection, partition=day, status="done", row_count=10)
        an_attempt(connection, partition=day, outcome="succeeded")

    families = exposed(read_metrics(connection, KEYS, clock=CLOCK))

    labels = {name for samples in families.values() for s in samples for name in s.labels}
    assert labels <= ALLOWED_LABELS
    values = {
        value for samples in families.values() for s in samples for value in s.labels.values()
    }
    assert not values & set(KEYS["items"])


def test_the_exposition_reads_back_the_figures(connection):
    a_partition(connection, partition="2024-01-01", status="done", row_count=10)
    an_attempt(connection, partition="2024-01-01", outcome="succeeded")
    an_attempt(connection, partition="2024-01-02", outcome="failed", error_class="terminal")

    families = exposed(read_metrics(connection, KEYS, clock=CLOCK))

    partitions = {s.labels["status"]: s.value for s in families["jobs_platform_partitions"]}
    assert partitions == {"done": 1, "failed": 0, "quarantined": 0, "missing": 1, "in_flight": 0}
    attempts = {
        (s.labels["outcome"], s.labels["error_class"]): s.value
        for s in families["jobs_platform_attempts"]
        if s.name == "jobs_platform_attempts_total"
    }
    assert attempts == {("succeeded", "none"): 1, ("failed", "terminal"): 1}
    durations = {s.name: s.value for s in families["jobs_platform_attempt_duration_seconds"]
                 if "le" not in s.labels}  # fmt: skip
    assert durations == {
        "jobs_platform_attempt_duration_seconds_count": 2,
        "jobs_platform_attempt_duration_seconds_sum": 2.0,
    }


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_scrapes_within_the_cache_age_cost_one_reading():
    reads = []
    clock = Clock()
    cache = CachedReading(lambda: reads.append(1) or len(reads), max_age_seconds=5, clock=clock)

    first = [cache.get() for _ in range(10)]
    clock.now = 5.0
    after = cache.get()

    assert (first, after) == ([1] * 10, 2)


def test_concurrent_scrapes_wait_for_one_reading_instead_of_starting_their_own():
    started, release, reads = threading.Event(), threading.Event(), []

    def slow_read():
        reads.append(1)
        started.set()
        release.wait(10)
        return len(reads)

    cache = CachedReading(slow_read, max_age_seconds=60)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get())) for _ in range(8)]
    threads[0].start()
    assert started.wait(10)
    for thread in threads[1:]:
        thread.start()

    def inside_get(thread: threading.Thread) -> bool:
        frame = sys._current_frames().get(thread.ident)
        return frame is not None and frame.f_code is CachedReading.get.__code__

    # Released only once the seven wait in `get` (or one started a reading of its own)
    # while the first is still being taken: a scrape that arrived after it would be served
    # the kept reading either way.
    wait_for(
        lambda: len(reads) > 1 or all(inside_get(thread) for thread in threads[1:]),
        timeout=10,
        what="the other scrapes to arrive during the reading",
    )
    release.set()
    for thread in threads:
        thread.join(10)

    assert (len(reads), results) == (1, [1] * 8)


def test_a_failed_reading_is_not_kept():
    outcomes = iter([RuntimeError("warehouse down"), 7])

    def read():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    cache = CachedReading(read, max_age_seconds=60)
    with contextlib.suppress(RuntimeError):
        cache.get()

    assert cache.get() == 7


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_reading_the_warehouse_refuses_answers_503_naming_why_and_nothing_else():
    def refused():
        raise RuntimeError("connection refused by 127.0.0.1:5432\nsecond line of the error")

    server = bind(metrics_app(metrics_registry(CachedReading(refused))), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        responses = {path: get(base + path) for path in ("/metrics", "/", "/other")}
    finally:
        server.shutdown()
        server.server_close()

    assert responses["/metrics"] == (503, "connection refused by 127.0.0.1:5432\n")
    assert responses["/"][0] == 200 and "/metrics" in responses["/"][1]
    assert responses["/other"][0] == 404


def test_quarantine_groups_is_one_unlabelled_gauge_of_the_open_causes(connection):
    a_quarantine_entry(connection, partition="2024-01-01", last_error="line 3: not valid JSON")
    a_quarantine_entry(connection, partition="2024-01-02", last_error="line 9: not valid JSON")
    a_quarantine_entry(connection, partition="2024-01-03", last_error="no input")

    (sample,) = exposed(read_metrics(connection, KEYS, clock=CLOCK))[
        "jobs_platform_quarantine_groups"
    ]

    assert (sample.labels, sample.value) == ({}, 2)


def test_rows_rejected_are_counted_per_asset_without_partition_labels(connection):
    from jobs_platform.writer.rejects import RejectedRow, record_rejects

    rejected = [RejectedRow(row=n, reason="malformed") for n in (3, 9)]
    for day in KEYS["items"]:
        record_rejects(
            connection, asset="items", partition=day, chunk_index=0, rejects=rejected, at=NOW
        )

    samples = exposed(read_metrics(connection, KEYS, clock=CLOCK))["jobs_platform_rows_rejected"]

    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("jobs_platform_rows_rejected_total", {"asset": "items"}, 4.0)
    ]
