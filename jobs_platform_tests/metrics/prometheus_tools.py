"""Debian's `prometheus` package in the tests: its binaries, required, never skipped."""

from __future__ import annotations

import shutil

import pytest

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
