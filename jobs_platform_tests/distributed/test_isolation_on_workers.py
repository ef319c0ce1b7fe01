"""A poison day blocks only itself on Celery workers too: `dagster job execute` over a range
of five days with one poison day, steps on two workers, on RabbitMQ and on Redis."""

from __future__ import annotations

import json

import dagster as dg

from jobs_platform_tests.commands import DAGSTER, run_cli
from jobs_platform_tests.distributed.cluster import distributed_environment, runs_in_status
from jobs_platform_tests.test_isolation import (
    FIRST,
    LAST,
    POISON,
    RANGE_TAGS,
    assert_poison_day_alone_withheld,
)
from orders_example.orders.seed import seed_orders

RUN_SECONDS = 300


def test_a_job_run_over_a_range_on_workers_withholds_only_the_poison_days_revenue(
    pg_url, instance_home, broker, workers, tmp_path
):
    broker_url, backend_url = broker
    env = distributed_environment(pg_url, instance_home, tmp_path, broker_url, backend_url)
    seed_orders(env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=25, poison_days=[POISON])
    workers.start(2, env, cwd=tmp_path)

    executed = run_cli(
        [
            DAGSTER, "job", "execute", "-m", "orders_example.definitions", "-j", "orders_backfill",
            "--tags", json.dumps(RANGE_TAGS),
        ],
        env,
        timeout=RUN_SECONDS,
    )  # fmt: skip

    assert executed.returncode == 1, executed.stdout[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert runs_in_status(instance, dg.DagsterRunStatus.STARTED) == []
        assert_poison_day_alone_withheld(env, instance)
