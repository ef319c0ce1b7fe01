"""An open circuit is visible where a person looks: `status` (text and `--json`),
`dead-letter groups`, `/metrics` and the `platform_health` figures."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification, Verdict
from jobs_platform.metrics.exposition import metric_families
from jobs_platform.metrics.reader import read_metrics
from jobs_platform.steering.circuit_rule import CircuitRule
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.environments import engine_from, settings_from

OUTAGE = "Server error '503 Service Unavailable' for url 'http://orders.internal/v1?day={day}'"
RULE = CircuitRule(partitions=3, window_seconds=300, probe_seconds=10, probe_max_seconds=300)


def open_a_circuit(engine: sa.Engine, asset: str = "orders") -> str:
    """Three partitions of `asset` failed with one cause: its circuit opened."""
    store = Warehouse(engine, DATABASE_CLOCK)
    verdict = Verdict(Classification.RETRYABLE, None, "HTTP 503")
    with store.begin() as connection:
        for number, day in enumerate(["2024-06-01", "2024-06-02", "2024-06-03"]):
            store.circuits.record_failure(
                connection,
                RULE,
                asset=asset,
                partition=day,
                attempt_id=1000 + number,
                token=1,
                verdict=verdict,
                error_type="HTTPStatusError",
                message=OUTAGE.format(day=day),
            )
        return connection.execute(sa.text("SELECT signature FROM jp_circuits")).scalar_one()


@pytest.fixture
def signature(platform_env) -> str:
    return open_a_circuit(engine_from(platform_env))


def test_status_json_shows_each_open_circuit_under_its_backfill(platform_env, signature):
    shown = jobs_platform_in_process(["status", "--json"], platform_env)

    assert shown.returncode == 0, shown.stderr
    assets = json.loads(shown.stdout)["assets"]
    (circuit,) = assets["orders"]["circuits"]
    assert (circuit["signature"], circuit["partitions"], circuit["error_class"]) == (
        signature,
        3,
        "retryable",
    )
    assert circuit["opened_at"] and circuit["next_probe_at"]
    assert assets["daily_revenue"]["circuits"] == []


def test_status_text_says_the_circuit_is_open_and_when_the_next_probe_tries(
    platform_env, signature
):
    shown = jobs_platform_in_process(["status"], platform_env)

    assert shown.returncode == 0, shown.stderr
    assert f"CIRCUIT OPEN orders: cause {signature}" in shown.stdout
    assert "next probe at" in shown.stdout


def test_dead_letter_groups_show_the_open_circuit_though_nothing_is_quarantined(
    platform_env, signature
):
    shown = jobs_platform_in_process(["dead-letter", "groups"], platform_env)

    assert shown.returncode == 0, shown.stderr
    assert f"CIRCUIT OPEN  {signature}  orders" in shown.stdout
    assert "the dead letter is empty" in shown.stdout


def test_metrics_expose_the_open_circuits_per_backfill(platform_env, signature):
    with engine_from(platform_env).connect() as connection:
        reading = read_metrics(
            connection, {"orders": [], "daily_revenue": []}, clock=DATABASE_CLOCK
        )

    (family,) = [f for f in metric_families(reading) if f.name == "jobs_platform_circuit_open"]
    assert {sample.labels["asset"]: sample.value for sample in family.samples} == {
        "daily_revenue": 0,
        "orders": 1,
    }


def test_platform_health_shows_the_open_circuit_in_its_figures_and_dead_letter_groups(
    platform_env, signature
):
    import dagster as dg

    from jobs_platform.orchestration.health import (
        _health_metadata,
        dead_letter_causes,
        status_report,
    )
    from orders_example.definitions import defs

    specs = list(defs.resolve_all_asset_specs())
    settings = settings_from(platform_env)

    report = status_report(specs, dg.DagsterInstance.get(), settings)
    causes = dead_letter_causes(specs, settings, "orders_example.definitions")

    metadata = _health_metadata(report)
    assert (metadata["orders/circuits_open"], metadata["daily_revenue/circuits_open"]) == (1, 0)
    assert metadata["orders/circuits"].data[0]["signature"] == signature
    assert (
        f"**Circuit open** for cause `{signature}` on orders" in causes["dead_letter_groups"].value
    )
