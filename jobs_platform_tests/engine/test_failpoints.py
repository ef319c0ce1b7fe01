"""Specifications of failpoints: the documented rule syntax and what each action does."""

from __future__ import annotations

import multiprocessing
import signal
import time

import pytest

from jobs_platform.engine.failpoints import (
    Failpoint,
    FailpointError,
    Point,
    parse_failpoints,
    trigger_failpoints,
)
from jobs_platform.errors import RetryableError, TerminalError

ASSET, PARTITION = "orders", "2024-01-03"


def trigger(
    text: str,
    point: Point = Point.READ,
    *,
    asset: str = ASSET,
    partition: str = PARTITION,
    chunk: int | None = 0,
    attempts_before: int = 0,
) -> None:
    trigger_failpoints(
        parse_failpoints(text),
        point,
        asset=asset,
        partition=partition,
        chunk=chunk,
        attempts_before=attempts_before,
    )


# Parsing


@pytest.mark.parametrize("text", [None, "", "   ", ",", " , "])
def test_unset_or_empty_value_gives_no_failpoints(text):
    assert parse_failpoints(text) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("read=transient", Failpoint(Point.READ, "transient"), id="point-only"),
        pytest.param(
            "before_commit@orders=terminal",
            Failpoint(Point.BEFORE_COMMIT, "terminal", asset="orders"),
            id="asset",
        ),
        pytest.param(
            "after_commit@orders/2024-01-03#1=crash*1",
            Failpoint(
                Point.AFTER_COMMIT,
                "crash",
                asset="orders",
                partition="2024-01-03",
                chunk=1,
                times=1,
            ),
            id="asset-partition-chunk-times",
        ),
        pytest.param(
            "finalize=sleep:2.5",
            Failpoint(Point.FINALIZE, "sleep", sleep_seconds=2.5),
            id="sleep-fraction",
        ),
        pytest.param(
            "read=sleep:3", Failpoint(Point.READ, "sleep", sleep_seconds=3.0), id="sleep-whole"
        ),
        pytest.param(
            "read#0=transient*2",
            Failpoint(Point.READ, "transient", chunk=0, times=2),
            id="chunk-without-asset",
        ),
        pytest.param(
            "read@orders/2024-01-03=terminal",
            Failpoint(Point.READ, "terminal", asset="orders", partition="2024-01-03"),
            id="partition-without-chunk",
        ),
    ],
)
def test_each_documented_rule_form_parses(text, expected):
    assert parse_failpoints(text) == (expected,)


def test_several_comma_separated_rules_parse_in_order():
    rules = parse_failpoints(" read=transient*1, before_commit@orders#2=terminal ,finalize=crash,")

    assert rules == (
        Failpoint(Point.READ, "transient", times=1),
        Failpoint(Point.BEFORE_COMMIT, "terminal", asset="orders", chunk=2),
        Failpoint(Point.FINALIZE, "crash"),
    )


@pytest.mark.parametrize(
    "rule",
    [
        "read",
        "read=",
        "read=explode",
        "read=sleep:",
        "read=sleep:-1",
        "read=sleep:soon",
        "read#x=crash",
        "read#-1=crash",
        "read=crash*",
        "read=crash*-1",
        "read=crash*2*3",
        "@orders=crash",
        "READ=crash",
        "read@=crash",
        "read = crash",
    ],
)
def test_malformed_rule_is_refused_with_the_rule_and_the_syntax(rule):
    with pytest.raises(FailpointError) as refused:
        parse_failpoints(f"finalize=crash,{rule}")

    message = str(refused.value)
    assert repr(rule.strip()) in message
    assert "POINT[@ASSET[/PARTITION]][#CHUNK]=ACTION[*TIMES]" in message


def test_unknown_point_is_refused_with_the_known_points():
    with pytest.raises(FailpointError) as refused:
        parse_failpoints("on_start=crash")

    message = str(refused.value)
    assert "'on_start'" in message
    assert all(point.value in message for point in Point)


def test_failpoint_error_is_a_value_error():
    assert issubclass(FailpointError, ValueError)


# Actions


def test_transient_action_raises_a_retryable_error_naming_the_place():
    with pytest.raises(RetryableError, match=r"failpoint read@orders/2024-01-03#0"):
        trigger("read=transient")


def test_terminal_action_raises_a_terminal_error():
    with pytest.raises(TerminalError, match="injected terminal failure"):
        trigger("before_commit=terminal", Point.BEFORE_COMMIT)


def test_sleep_action_pauses_for_its_seconds():
    began = time.monotonic()

    trigger("finalize=sleep:0.2", Point.FINALIZE, chunk=None)

    assert time.monotonic() - began >= 0.2


def _trigger_crash() -> None:
    trigger("after_commit=crash", Point.AFTER_COMMIT)


def test_crash_action_kills_its_own_process():
    process = multiprocessing.get_context("fork").Process(target=_trigger_crash)
    process.start()
    process.join(timeout=30)

    assert process.exitcode == -signal.SIGKILL


# Matching


def test_rule_fires_only_at_its_point():
    trigger("finalize=transient", Point.READ)
    trigger("finalize=transient", Point.AFTER_COMMIT)

    with pytest.raises(RetryableError):
        trigger("finalize=transient", Point.FINALIZE, chunk=None)


def test_rule_for_an_asset_fires_only_for_that_asset():
    trigger("read@customers=transient", asset="orders")

    with pytest.raises(RetryableError):
        trigger("read@customers=transient", asset="customers")


def test_rule_for_a_partition_fires_only_for_that_partition():
    trigger("read@orders/2024-01-04=transient", partition="2024-01-03")

    with pytest.raises(RetryableError):
        trigger("read@orders/2024-01-04=transient", partition="2024-01-04")


def test_rule_for_a_chunk_fires_only_at_that_chunk():
    trigger("read#2=transient", chunk=0)
    trigger("read#2=transient", chunk=None)

    with pytest.raises(RetryableError):
        trigger("read#2=transient", chunk=2)


def test_rule_without_a_chunk_fires_at_every_chunk():
    for chunk in (0, 1, 7):
        with pytest.raises(RetryableError):
            trigger("read=transient", chunk=chunk)


@pytest.mark.parametrize("attempts_before", [0, 1])
def test_times_rule_fires_while_the_attempts_before_is_below_times(attempts_before):
    with pytest.raises(RetryableError):
        trigger("read=transient*2", attempts_before=attempts_before)


@pytest.mark.parametrize("attempts_before", [2, 3, 10])
def test_times_rule_lets_later_retries_pass(attempts_before):
    trigger("read=transient*2", attempts_before=attempts_before)


def test_times_zero_never_fires():
    trigger("read=transient*0", attempts_before=0)


def test_rule_without_times_fires_on_every_retry():
    for attempts_before in (0, 5, 50):
        with pytest.raises(RetryableError):
            trigger("read=transient", attempts_before=attempts_before)


def test_first_matching_rule_acts():
    with pytest.raises(TerminalError):
        trigger("read#1=transient,read=terminal,read=transient")
