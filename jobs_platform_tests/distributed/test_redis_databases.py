"""The tests' Redis databases: claimed per test, so that suites running at once on one
Redis never share one."""

from __future__ import annotations

import uuid

import redis

from jobs_platform_tests.distributed.cluster import (
    REDIS,
    REDIS_CLAIMS_DB,
    redis_claim_key,
    redis_database,
)


def number_of(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def test_tests_running_at_once_get_different_redis_databases():
    with redis_database() as first, redis_database() as second:
        assert number_of(first) != number_of(second)


def test_a_redis_database_is_claimed_while_in_use_and_released_empty():
    claims = redis.Redis(*REDIS, db=REDIS_CLAIMS_DB)
    key = f"jp_test_{uuid.uuid4().hex}"
    with redis_database() as url:
        number = number_of(url)
        holder = claims.get(redis_claim_key(number))
        assert holder is not None
        # Another suite trying to claim it now is refused.
        assert not claims.set(redis_claim_key(number), "another suite", nx=True)
        redis.Redis.from_url(url).set(key, "1")

    assert claims.get(redis_claim_key(number)) != holder
    assert not redis.Redis.from_url(url).exists(key)
    claims.close()
