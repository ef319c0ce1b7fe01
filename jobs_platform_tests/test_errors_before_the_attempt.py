"""An error before the attempt exists (gate, lease, attempt start) goes through the taxonomy.

It used to escape the runner unclassified and fall to Dagster's 25-retry crash policy.
"""

from __future__ import annotations

import dagster as dg
import pytest

from jobs_platform_tests.environments import enter_environment, platform_environment
from jobs_platform_tests.runs import materialize
from orders_example.orders.assets import orders

# Nothing listens on port 1; the password must never be printed.
UNREACHABLE_URL = "postgresql+psycopg://app:s3cret@127.0.0.1:1/warehouse"


@pytest.fixture
def unreachable_env(tmp_path, monkeypatch) -> dict[str, str]:
    return enter_environment(platform_environment(UNREACHABLE_URL, tmp_path), monkeypatch, tmp_path)


def step_events(result: dg.ExecuteInProcessResult, event_type: str) -> list:
    return [event for event in result.all_events if event.event_type_value == event_type]


def test_unreachable_warehouse_backs_off_and_stops_at_the_attempt_ceiling(unreachable_env):
    result = materialize([orders], "2024-01-03")

    assert not result.success
    # JOBS_PLATFORM_MAX_ATTEMPTS is 3: two retries, then the step fails for good.
    assert len(step_events(result, "STEP_UP_FOR_RETRY")) == 2
    (failure,) = step_events(result, "STEP_FAILURE")
    error = failure.step_failure_data.user_failure_data
    assert error.metadata["error_class"].value == "retryable"
    assert "s3cret" not in str(failure.event_specific_data)


def test_error_before_the_attempt_is_logged_with_its_class(unreachable_env, caplog):
    result = materialize([orders], "2024-01-03")

    (failure,) = step_events(result, "STEP_FAILURE")
    assert "before the attempt started" in failure.step_failure_data.user_failure_data.description
