"""Waiting for a condition without fixed sleeps."""

from __future__ import annotations

from collections.abc import Callable


def wait_for(
    predicate,
    *,
    timeout: float,
    interval: float = 0.1,
    what: str | Callable[[], str] = "condition",
):
    """Poll until `predicate()` is truthy; fail with `what` after `timeout` seconds.

    `what` may be a function, called at the deadline to say what was last seen.
    """
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what() if callable(what) else what}"
    )
