"""Specifications of attempt traces: one trace from a backfill request to every attempt.

Spans are caught by the OpenTelemetry SDK's in-memory exporter; runs go through the
outbox sensor as the daemon drives it (a tick, then each run request materialized here).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import dagster as dg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobs_platform import request_backfill
from jobs_platform.engine import tracing
from jobs_platform.outbox.sensor import backfill_request_sensor
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.runs import materialize
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

GOOD = dt.date(2024, 6, 1)
POISON = dt.date(2024, 6, 2)


@pytest.fixture
def spans(monkeypatch) -> Iterator[InMemorySpanExporter]:
    """Attempt spans, caught in memory as the tracing module would export them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The tracer the process decided on, as `active_tracer` keeps it; restored after.
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer(tracing.TRACER_NAME))
    yield exporter
    provider.shutdown()


def launch_through_the_outbox(env: dict[str, str], partitions: list[str], **request) -> None:
    """`request_backfill`, one outbox sensor tick, then each run it requests, here."""
    from orders_example.definitions import defs

    with engine_from(env).begin() as connection:
        request_backfill(connection, "orders", partitions, reason="invoice corrected", **request)
    instance = dg.DagsterInstance.get()
    context = dg.build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        definitions=defs,
        resources=dict(defs.resources),
    )
    runs = backfill_request_sensor.evaluate_tick(context).run_requests
    assert len(runs) == len(partitions)
    for run in runs:
        materialize([orders, daily_revenue], run.partition_key, tags=run.tags)


def test_every_attempt_of_a_request_is_in_the_trace_its_correlation_id_names(platform_env, spans):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], GOOD, POISON, poison_days=[POISON])

    launch_through_the_outbox(
        platform_env, [GOOD.isoformat(), POISON.isoformat()], correlation_id="invoice-4711"
    )

    finished = spans.get_finished_spans()
    # orders on both days; daily_revenue on the good day (the poison day's step is skipped).
    attempted = sorted(
        (s.attributes["jobs_platform.asset"], s.attributes["jobs_platform.partition"])
        for s in finished
    )
    assert attempted == [
        ("daily_revenue", GOOD.isoformat()),
        ("orders", GOOD.isoformat()),
        ("orders", POISON.isoformat()),
    ]
    assert {s.context.trace_id for s in finished} == {tracing.trace_id_for("invoice-4711")}
    assert {s.parent.span_id for s in finished} == {tracing.request_span_id_for("invoice-4711")}
    assert {s.attributes["jobs_platform.correlation_id"] for s in finished} == {"invoice-4711"}
    assert {s.name for s in finished} == {tracing.SPAN_NAME}


def test_an_attempt_span_says_its_outcome_attempt_and_rows(platform_env, spans):
    seed_orders(
        platform_env["JOBS_PLATFORM_LANDING"], GOOD, POISON, orders_per_day=40, poison_days=[POISON]
    )

    launch_through_the_outbox(platform_env, [GOOD.isoformat(), POISON.isoformat()])

    by_key = {
        (s.attributes["jobs_platform.asset"], s.attributes["jobs_platform.partition"]): s
        for s in spans.get_finished_spans()
    }
    good = by_key[("orders", GOOD.isoformat())]
    assert good.attributes["jobs_platform.outcome"] == "succeeded"
    assert good.attributes["jobs_platform.attempt"] == 1
    assert good.attributes["jobs_platform.rows"] == 40
    assert good.status.is_ok
    poison = by_key[("orders", POISON.isoformat())]
    assert poison.attributes["jobs_platform.outcome"] == "failed"
    assert poison.attributes["jobs_platform.error_class"] == "terminal"
    assert poison.attributes["jobs_platform.next_step"] == "quarantine"
    assert poison.attributes["jobs_platform.attempt"] == 1
    assert not poison.status.is_ok
    # Without a correlation id of the caller's, the sensor names the request: one trace.
    assert len({s.context.trace_id for s in by_key.values()}) == 1


def test_a_run_without_a_correlation_id_is_one_trace_derived_from_its_run(platform_env, spans):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], GOOD, GOOD)

    result = materialize([orders, daily_revenue], GOOD.isoformat())

    finished = spans.get_finished_spans()
    assert len(finished) == 2
    assert {s.context.trace_id for s in finished} == {tracing.trace_id_for(f"run:{result.run_id}")}
    assert all("jobs_platform.correlation_id" not in s.attributes for s in finished)


def test_an_attempt_inside_a_span_of_the_caller_links_to_it(platform_env, spans):
    from opentelemetry import trace

    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], GOOD, GOOD)
    caller = TracerProvider().get_tracer("caller")

    with caller.start_as_current_span("caller's work") as outer:
        materialize([orders], GOOD.isoformat())

    (span,) = spans.get_finished_spans()
    assert [link.context.span_id for link in span.links] == [outer.get_span_context().span_id]
    assert span.context.trace_id != outer.get_span_context().trace_id
    assert trace.get_current_span() is trace.INVALID_SPAN


OFF_PROBE = """
import json, sys
from jobs_platform.engine import tracing
print(json.dumps({"tracer": tracing.active_tracer() is None,
                  "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def test_tracing_is_off_and_imports_nothing_without_an_endpoint():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

    probe = subprocess.run(
        [sys.executable, "-c", OFF_PROBE], env=env, capture_output=True, text=True, check=True
    )

    assert json.loads(probe.stdout) == {"tracer": True, "imported": []}


def test_tracing_is_off_when_the_sdk_is_disabled(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.setattr(tracing, "_tracer", tracing._UNSET)  # decided afresh, from the env

    assert tracing.active_tracer() is None


def test_trace_ids_are_the_same_in_every_process_and_differ_per_request():
    assert tracing.trace_id_for("invoice-4711") == tracing.trace_id_for("invoice-4711")
    assert tracing.trace_id_for("invoice-4711") != tracing.trace_id_for("invoice-4712")
    assert 0 < tracing.trace_id_for("x") < 2**128
    assert 0 < tracing.request_span_id_for("x") < 2**64


class OtlpReceiver:
    """A loopback OTLP/HTTP endpoint that keeps the spans it is sent (a collector's role)."""

    def __init__(self):
        import http.server
        import threading

        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        received = self.spans = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        received.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, format, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_step_processes_export_their_attempt_spans_over_otlp_before_they_exit(platform_env):
    from jobs_platform_tests.commands import dagster_job_execute
    from jobs_platform_tests.waiting import wait_for

    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], GOOD, GOOD)
    receiver = OtlpReceiver()
    try:
        # The default executor: each step in a process of its own, which ends with os._exit.
        finished = dagster_job_execute(
            {**platform_env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
            GOOD.isoformat(),
        )
        assert finished.returncode == 0, finished.stderr[-2000:]
        spans = wait_for(
            lambda: len(receiver.spans) >= 2 and receiver.spans,
            timeout=30,
            what="both attempt spans at the OTLP endpoint",
        )
    finally:
        receiver.close()

    attributes = [{a.key: a.value for a in span.attributes} for span in spans]
    assert sorted(a["jobs_platform.asset"].string_value for a in attributes) == [
        "daily_revenue",
        "orders",
    ]
    assert {a["jobs_platform.outcome"].string_value for a in attributes} == {"succeeded"}
    assert len({span.trace_id for span in spans}) == 1
