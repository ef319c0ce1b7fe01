"""Fixtures of the store's specifications."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_tables


@pytest.fixture
def connection(warehouse_url) -> Iterator[sa.Connection]:
    """One transaction on a fresh warehouse that has the framework's tables."""
    engine = warehouse_engine(warehouse_url)
    create_tables(engine)
    with engine.connect() as connection, connection.begin() as transaction:
        yield connection
        transaction.rollback()
    engine.dispose()  # no connection left open for the database's drop to break
