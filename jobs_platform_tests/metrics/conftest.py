"""Fixtures of the metrics specifications."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobs_platform_tests.support import upgraded_warehouse


@pytest.fixture
def connection(warehouse_url) -> Iterator[sa.Connection]:
    """One transaction on a fresh warehouse that has the framework's tables."""
    engine = upgraded_warehouse(warehouse_url)
    with engine.connect() as connection, connection.begin() as transaction:
        yield connection
        transaction.rollback()
    engine.dispose()
