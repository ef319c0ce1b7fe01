"""Traces of partition attempts: one OpenTelemetry span per attempt, off and free by default.

On when the `otel` extra is installed (`pip install 'jobs_platform[otel]'`) and
`OTEL_EXPORTER_OTLP_ENDPOINT` is set; spans go to that OTLP endpoint (`http/protobuf`, the
protocol OpenTelemetry specifies as the default, or `grpc` by
`OTEL_EXPORTER_OTLP_PROTOCOL`), the exporter reading its own `OTEL_*` variables. Off, an
attempt costs one check of a cached None; nothing of OpenTelemetry is imported.

One trace per request, derived rather than propagated: the trace id is a hash of the
correlation id (`trace_id_for`), and every attempt span is a child of a span id derived
the same way, which stands for the request. The correlation id is the one thing already
carried end to end: `request_backfill` stores it in the outbox row, the outbox sensor puts
it in each run's tags, each step reads it into `Attempter`, and the attempt history
keeps it. Deriving the trace from it needs no new column, tag or migration, and every
process computes the same trace on its own: the application that wrote the request
inside its transaction, the daemon, step processes on any host, retries, re-requested
runs of a sensor tick that died, all without a context to lose on the way. A traceparent
in the run tags instead would start the trace at the sensor, cut off from the request
(the outbox row holds no trace context), and a repeated tick would give the same
request's runs different parents. A person holding a correlation id, from a log line or
`jobs-platform outbox list`, finds its trace by computing the id. The cost: the request
itself is not a recorded span, so a trace viewer shows the attempts under a root span it
never received. A run without a correlation id (the UI, a schedule) gets one trace per
run, derived from the run id. When the caller already is inside a span (OpenTelemetry
instrumentation of its own), the attempt span links to it.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import (
    TYPE_CHECKING,
    Concatenate,
    Final,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    assert_never,
)

from jobs_platform.engine.attempt import Attempter
from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.outcomes import (
    Blocked,
    BudgetSpent,
    Busy,
    Failed,
    Held,
    NotDue,
    Outcome,
    PartitionReport,
    Refused,
)
from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.errors import Classification

if TYPE_CHECKING:  # at run time OpenTelemetry is imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
SPAN_NAME = "jobs_platform.attempt"
TRACER_NAME = "jobs_platform"
DEFAULT_SERVICE_NAME = "jobs_platform"  # unless OTEL_SERVICE_NAME names another
# The spec's default; `grpc` needs a collector's gRPC port (4317) instead of 4318.
DEFAULT_PROTOCOL = "http/protobuf"


class _Unset(enum.Enum):
    """Not decided yet: the environment is read on the first attempt."""

    UNSET = enum.auto()


_UNSET: Final = _Unset.UNSET
_tracer: Tracer | Literal[_Unset.UNSET] | None = _UNSET
# The provider this module made, kept so its exporter lives.
_provider: SdkTracerProvider | None = None
_lock = threading.Lock()


def trace_id_for(key: str) -> int:
    """The 128-bit trace id of a correlation id (or `run:<run id>`)."""
    return int.from_bytes(_digest(key)[:16], "big") or 1


def request_span_id_for(key: str) -> int:
    """The 64-bit span id that stands for the request: every attempt span's parent."""
    return int.from_bytes(_digest(key)[16:24], "big") or 1


def trace_key(attempter: Attempter) -> str | None:
    """What an attempt's trace is derived from: its correlation id, else its run."""
    if attempter.correlation_id:
        return attempter.correlation_id
    return f"run:{attempter.run_id}" if attempter.run_id else None


def _digest(key: str) -> bytes:
    return hashlib.sha256(f"jobs_platform/trace/{key}".encode()).digest()


class _Runner(Protocol):
    """What the span reads of the runner whose attempt it wraps (`PartitionRunner`)."""

    @property
    def spec(self) -> BackfillSpec: ...


_RunnerT = TypeVar("_RunnerT", bound=_Runner)
_ResultT = TypeVar("_ResultT", bound=Outcome)
_Rest = ParamSpec("_Rest")


def traced_attempt(
    attempt: Callable[Concatenate[_RunnerT, str, Attempter, _Rest], _ResultT],
) -> Callable[Concatenate[_RunnerT, str, Attempter, _Rest], _ResultT]:
    """Wrap `PartitionRunner.attempt` in a span when tracing is on; else call it as is."""

    @functools.wraps(attempt)
    def traced(
        runner: _RunnerT,
        partition: str,
        attempter: Attempter,
        /,
        *args: _Rest.args,
        **kwargs: _Rest.kwargs,
    ) -> _ResultT:
        tracer = active_tracer()
        if tracer is None:
            return attempt(runner, partition, attempter, *args, **kwargs)
        with _attempt_span(tracer, runner.spec.asset, partition, attempter) as span:
            try:
                result = attempt(runner, partition, attempter, *args, **kwargs)
            except BaseException:
                # A shutdown the runner re-raises; the span records the exception itself.
                span.set_attribute("jobs_platform.outcome", "interrupted")
                raise
            _describe(span, result)
            return result

    return traced


def outcome_attributes(outcome: Outcome) -> dict[str, str | int]:
    """What an attempt's span says of its outcome (which, its attempt number, rows)."""
    match outcome:
        case PartitionReport():
            return {
                "jobs_platform.outcome": "succeeded",
                "jobs_platform.attempt": outcome.attempt,
                "jobs_platform.rows": outcome.input_rows,
                "jobs_platform.rows_inserted": outcome.counts.inserted,
                "jobs_platform.rows_updated": outcome.counts.updated,
            }
        case Refused():
            # Already quarantined: refused before any work, and it stays quarantined (the
            # refusal is a TerminalError).
            return _attributes("gated", NextStep.QUARANTINE, Classification.TERMINAL)
        case Blocked():
            # An upstream partition is not done: not attempted, it runs with its upstream.
            return {"jobs_platform.outcome": "blocked", "jobs_platform.next_step": "blocked"}
        case Held():
            # Paused or not ready: not attempted, launched again by the holds sensor.
            return {"jobs_platform.outcome": "held", "jobs_platform.next_step": "held"}
        case Busy():
            # Another worker's lease, or the backfill's open circuit (not its probe).
            return _attributes("busy", outcome.decision.next_step)
        case NotDue():
            # Never an attempt's outcome: `PartitionRunner.not_due` is not traced.
            return _attributes("not_due", outcome.decision.next_step)
        case BudgetSpent():
            classification = outcome.verdict.classification
            return _attributes("failed", NextStep.QUARANTINE, classification)
        case Failed():
            attributes = _attributes(
                "failed", outcome.decision.next_step, outcome.verdict.classification
            )
            if outcome.attempt is not None:
                attributes["jobs_platform.attempt"] = outcome.attempt
            return attributes
        case _:
            assert_never(outcome)


def _attributes(
    outcome: str, next_step: NextStep, error_class: Classification | None = None
) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "jobs_platform.outcome": outcome,
        "jobs_platform.next_step": str(next_step),
    }
    if error_class is not None:
        attributes["jobs_platform.error_class"] = str(error_class)
    return attributes


def _attempt_span(
    tracer: Tracer, asset: str, partition: str, attempter: Attempter
) -> AbstractContextManager[Span]:
    from opentelemetry import trace

    attributes: dict[str, str] = {
        "jobs_platform.asset": asset,
        "jobs_platform.partition": partition,
    }
    if attempter.correlation_id:
        attributes["jobs_platform.correlation_id"] = attempter.correlation_id
    if attempter.run_id:
        attributes["jobs_platform.run_id"] = attempter.run_id
    current = trace.get_current_span().get_span_context()
    links = [trace.Link(current)] if current.is_valid else []
    key = trace_key(attempter)
    parent = None
    if key is not None:
        request = trace.SpanContext(
            trace_id=trace_id_for(key),
            span_id=request_span_id_for(key),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        parent = trace.set_span_in_context(trace.NonRecordingSpan(request))
    return tracer.start_as_current_span(
        SPAN_NAME, context=parent, attributes=attributes, links=links
    )


def _describe(span: Span, outcome: Outcome) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes(outcome_attributes(outcome))
    if isinstance(outcome, Failed | BudgetSpent):
        span.set_status(Status(StatusCode.ERROR, outcome.message[:500]))


def active_tracer() -> Tracer | None:
    """The tracer attempts report to, or None when tracing is off (decided once a process)."""
    global _tracer
    if _tracer is _UNSET:
        with _lock:
            if _tracer is _UNSET:
                _tracer = _tracer_from_environment()
    return _tracer


def _tracer_from_environment() -> Tracer | None:
    global _provider
    # OpenTelemetry's own variables, read where they are used, as its SDK reads them.
    if not os.environ.get(ENDPOINT_VARIABLE):
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exporter = _otlp_exporter()
    except ImportError:
        return None  # the `otel` extra is not installed: off
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _flush_at_exit(provider)
    _provider = provider
    return provider.get_tracer(TRACER_NAME)


def _otlp_exporter() -> SpanExporter:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or DEFAULT_PROTOCOL
    ).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _flush_at_exit(provider: SdkTracerProvider) -> None:
    """Export what is batched before the process ends.

    The provider flushes at interpreter exit (atexit); a multiprocessing child, which is
    what a step process of the multiprocess executor is, ends with os._exit and runs no
    atexit handler, only multiprocessing's own finalizers: flush there too.
    """
    import multiprocessing.util

    multiprocessing.util.Finalize(None, provider.force_flush, exitpriority=100)
