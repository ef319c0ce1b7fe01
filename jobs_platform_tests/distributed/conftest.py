"""Fixtures of the distributed suite: a broker of the test's own, a PostgreSQL instance,
and Celery workers that are stopped by their pids when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from deploy.stack import StackLayout
from jobs_platform_tests.databases import pg_database
from jobs_platform_tests.distributed.cluster import (
    Workers,
    finish_vhost_deletions,
    postgres_instance_home,
    rabbitmq_vhost,
    redis_database,
)


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.distributed)


@pytest.fixture
def rabbitmq_url() -> Iterator[str]:
    with rabbitmq_vhost() as url:
        yield url


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_database() as url:
        yield url


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request) -> tuple[str, str]:
    """(broker URL, result backend URL) on each broker the framework supports."""
    if request.param == "rabbitmq":
        return request.getfixturevalue("rabbitmq_url"), "rpc://"
    url = request.getfixturevalue("redis_url")
    return url, url


@pytest.fixture(scope="session", autouse=True)
def _vhosts_deleted() -> Iterator[None]:
    """The tests' RabbitMQ virtual hosts, deleted in the background, are gone at the end."""
    yield
    failures = finish_vhost_deletions()
    assert not failures, failures


@pytest.fixture(scope="session")
def instance_template(tmp_path_factory) -> Iterator[str]:
    """A database holding a new instance's storage, created once per test process by
    Dagster itself (dagster-postgres, psycopg2); its name."""
    with pg_database("jp_instance_template") as url:
        postgres_instance_home(tmp_path_factory.mktemp("instance_template"), url)
        yield sa.make_url(url).database


@pytest.fixture
def instance_home(tmp_path, instance_template) -> Iterator[Path]:
    """A DAGSTER_HOME on a fresh PostgreSQL database (dagster-postgres, psycopg2): a copy of
    a new instance's storage (0.2 s, where creating it takes 1 to 3 s here)."""
    with pg_database("jp_instance", template=instance_template) as url:
        yield postgres_instance_home(tmp_path, url)


@pytest.fixture
def workers(tmp_path) -> Iterator[Workers]:
    started = Workers(StackLayout(tmp_path / "stack"))
    try:
        yield started
    finally:
        started.stop_all()
