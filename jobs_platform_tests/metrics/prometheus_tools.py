"""Debian's `prometheus` package in the tests (its binaries, required, never skipped), and
the project's files it reads: the alert rules and the dashboard's queries."""

from __future__ import annotations

import json
import shutil

import pytest

from jobs_platform_tests.commands import REPO_ROOT

PROMETHEUS_DIR = REPO_ROOT / "deploy" / "prometheus"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "jobs_platform.json"

INSTALL_HINT = (
    "install Debian's prometheus package (it brings prometheus and promtool): "
    "apt-get update && apt-get install -y prometheus (.ci/run does this)"
)


def required_binary(name: str) -> str:
    """The path of `name`, or the test fails saying how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not installed and this test needs it: {INSTALL_HINT}",
                    pytrace=False)  # fmt: skip
    return path


def dashboard_expressions() -> list[str]:
    """The PromQL of every panel of the dashboard, as written (with Grafana's variables)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
