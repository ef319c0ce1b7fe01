"""The alert rules and the dashboard under `deploy/`: checked and unit-tested by promtool."""

from __future__ import annotations

import json
import re
import subprocess

from jobs_platform.metrics.exposition import METRIC_NAMES
from jobs_platform_tests.metrics.prometheus_tools import (
    DASHBOARD,
    PROMETHEUS_DIR,
    dashboard_expressions,
    required_binary,
)

METRIC_NAME = re.compile(r"\bjobs_platform_[a-z_]+")
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [required_binary("promtool"), *args],
        cwd=PROMETHEUS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_promtool_checks_the_alert_rules():
    checked = promtool("check", "rules", "alerts.yaml")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout


def test_promtool_unit_tests_of_the_alert_rules_pass():
    tested = promtool("test", "rules", "alerts_test.yaml")

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_example_prometheus_config_is_valid_and_loads_the_rules():
    checked = promtool("check", "config", "prometheus.yml")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 rule files found" in checked.stdout


def test_every_alert_names_only_metrics_of_the_contract():
    names = set(METRIC_NAME.findall((PROMETHEUS_DIR / "alerts.yaml").read_text()))

    assert names and names <= set(METRIC_NAMES)


def test_the_dashboard_is_json_grafana_can_import():
    dashboard = json.loads(DASHBOARD.read_text())

    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        for target in panel.get("targets", []):
            assert target["refId"] and target["expr"], panel["title"]
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert variables == {"datasource", "asset"}


def test_the_dashboard_shows_depth_oldest_age_durations_and_outcomes():
    expressions = "\n".join(dashboard_expressions())

    for shown in (
        'jobs_platform_partitions{asset=~"$asset", status="missing"}',
        "jobs_platform_outbox_oldest_pending_age_seconds",
        "jobs_platform_oldest_lease_age_seconds",
        "histogram_quantile(0.5, sum by (le, asset) (rate(jobs_platform_attempt_duration_",
        "histogram_quantile(0.95, sum by (le, asset) (rate(jobs_platform_attempt_duration_",
        "sum by (outcome, error_class) (increase(jobs_platform_attempts_total",
    ):
        assert shown in expressions


def family_of(series: str) -> str:
    """The family a series belongs to (a histogram's `_bucket`, `_count`, `_sum` series)."""
    for suffix in HISTOGRAM_SERIES:
        if series.endswith(suffix) and series.removesuffix(suffix) in METRIC_NAMES:
            return series.removesuffix(suffix)
    return series


def test_the_dashboard_names_only_metrics_of_the_contract():
    series = METRIC_NAME.findall("\n".join(dashboard_expressions()))

    families = {family_of(name) for name in series}

    assert families <= set(METRIC_NAMES), families - set(METRIC_NAMES)
