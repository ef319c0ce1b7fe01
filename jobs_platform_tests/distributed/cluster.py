"""Real brokers, a PostgreSQL Dagster instance and Celery worker processes for the tests.

Each test gets its own RabbitMQ virtual host (or Redis database, claimed so that suites
running at once on one Redis never share one), its own instance database and its own
workers, so tests running side by side never take each other's tasks. A broker that does
not answer fails the test with a message saying how to start it.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest

from deploy import stack
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.databases import prepare_warehouse
from jobs_platform_tests.environments import platform_environment

RABBITMQ = ("127.0.0.1", 5672)
REDIS = ("127.0.0.1", 6379)
WORKER_READY_SECONDS = 90.0
START_RABBITMQ = "rabbitmq-server -detached"
# bin/stack's broker and results use databases 0 and 1 (deploy/stack.py); a test takes one
# of the others, claimed in the last one.
REDIS_TEST_DATABASES = list(range(2, 15))
REDIS_CLAIMS_DB = 15
REDIS_CLAIM_SECONDS = 3600  # longer than any test (pytest's timeout is 600 s)
REDIS_CLAIM_WAIT_SECONDS = 120.0
# Released only by its holder: a claim that lapsed may be another test's by now.
_RELEASE_CLAIM = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
START_REDIS = (
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
    "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
)


def require_service(address: tuple[str, int], name: str, start: str) -> None:
    try:
        with socket.create_connection(address, timeout=3):
            return
    except OSError as error:
        pytest.fail(
            f"{name} is required for the distributed tests and does not answer at "
            f"{address[0]}:{address[1]} ({error}). Start it with: {start}",
            pytrace=False,
        )


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A fresh RabbitMQ virtual host for one test; its broker URL.

    Created with its permission in one `rabbitmqctl` call (each costs about a second, most
    of it waiting), and deleted in the background: its name is this test's alone, so the
    next test need not wait for it (`finish_vhost_deletions` waits at the session's end).
    """
    require_service(RABBITMQ, "RabbitMQ", START_RABBITMQ)
    vhost = f"jp_test_{uuid.uuid4().hex[:12]}"
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    definitions = {
        "vhosts": [{"name": vhost}],
        "permissions": [{"user": "guest", "vhost": vhost, **everything}],
    }
    # From stdin: rabbitmqctl runs as the rabbitmq user, who cannot read a test's files.
    _rabbitmqctl("import_definitions", stdin=json.dumps(definitions))
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        _vhost_deletions.append(
            subprocess.Popen(
                ["rabbitmqctl", "-q", "delete_vhost", vhost],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )


_vhost_deletions: list[subprocess.Popen] = []


def finish_vhost_deletions() -> list[str]:
    """Wait for the virtual hosts' deletions started so far; what each that failed said."""
    failures = []
    while _vhost_deletions:
        deletion = _vhost_deletions.pop()
        _, errors = deletion.communicate(timeout=60)
        if deletion.returncode != 0:
            failures.append(f"{' '.join(deletion.args)}: {errors.decode(errors='replace')}")
    return failures


@contextmanager
def redis_database() -> Iterator[str]:
    """A Redis database of this test's own, emptied before and after.

    Claimed for the test's duration with `SET NX` in the database of claims, so that suites
    running at once on one Redis (two checkouts, two CI jobs) never share one; a claim
    left by a test process that died lapses after `REDIS_CLAIM_SECONDS`.
    """
    import redis

    require_service(REDIS, "Redis", START_REDIS)
    claims = redis.Redis(*REDIS, db=REDIS_CLAIMS_DB)
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    number = _claim_redis_database(claims, holder)
    url = f"redis://{REDIS[0]}:{REDIS[1]}/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
        claims.eval(_RELEASE_CLAIM, 1, redis_claim_key(number), holder)
        claims.close()


def redis_claim_key(number: int) -> str:
    return f"jobs_platform_tests:claim:{number}"


def _claim_redis_database(claims, holder: str) -> int:
    deadline = time.monotonic() + REDIS_CLAIM_WAIT_SECONDS
    while time.monotonic() < deadline:
        for number in random.sample(REDIS_TEST_DATABASES, len(REDIS_TEST_DATABASES)):
            if claims.set(redis_claim_key(number), holder, nx=True, ex=REDIS_CLAIM_SECONDS):
                return number
        time.sleep(0.2)
    holders = {n: claims.get(redis_claim_key(n)) for n in REDIS_TEST_DATABASES}
    pytest.fail(
        f"no Redis database free for this test after {REDIS_CLAIM_WAIT_SECONDS:.0f}s; "
        f"held by {holders}",
        pytrace=False,
    )


def _rabbitmqctl(*args: str, stdin: str | None = None) -> None:
    subprocess.run(
        ["rabbitmqctl", "-q", *args],
        input=stdin,
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )


def postgres_instance_home(folder: Path, instance_url: str) -> Path:
    """A DAGSTER_HOME whose instance lives in PostgreSQL, written by the stack's template."""
    home = folder / "dagster_home_pg"
    stack.write_instance(home, instance_url, max_concurrent_runs=4)
    # Create the storage once now: processes starting together race on its migrations.
    with dg.DagsterInstance.from_config(str(home)):
        pass
    return home


def distributed_environment(
    warehouse_url: str, instance_home: Path, folder: Path, broker: str, backend: str, **extra
) -> dict[str, str]:
    """Variables of a run and its workers on Celery; the warehouse is prepared as a deploy does."""
    prepare_warehouse(warehouse_url)
    env = platform_environment(warehouse_url, folder)
    env.update(
        DAGSTER_HOME=str(instance_home),
        JOBS_PLATFORM_EXECUTOR="celery",
        JOBS_PLATFORM_CELERY_BROKER=broker,
        JOBS_PLATFORM_CELERY_BACKEND=backend,
        PATH=f"{stack.BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra)
    return env


@dataclass
class Workers:
    """Celery workers started by one test, stopped by their pids at its end."""

    layout: stack.StackLayout
    names: list[str] = field(default_factory=list)

    def start(
        self, count: int, env: dict[str, str], *, cwd: Path, unset: tuple[str, ...] = ()
    ) -> list[str]:
        """Start `count` workers (`launch`) and wait until each is ready."""
        started = self.launch(count, env, cwd=cwd, unset=unset)
        self.wait_until_ready(started)
        return started

    def launch(
        self, count: int, env: dict[str, str], *, cwd: Path, unset: tuple[str, ...] = ()
    ) -> list[str]:
        """Start `count` workers with this process's variables, `env`, less `unset`; they
        are ready seconds later (`wait_until_ready`): prepare the test meanwhile."""
        env = {k: v for k, v in {**os.environ, **env}.items() if k not in unset}
        self.layout.folder.mkdir(parents=True, exist_ok=True)
        self.layout.worker_config.write_text(stack.render_worker_config(_settings_of(env)))
        started = []
        for _ in range(count):
            name = f"w{len(self.names) + 1}"
            stack.start_process(
                self.layout, name, stack.worker_command(self.layout, name), env, cwd=cwd
            )
            self.names.append(name)
            started.append(name)
        return started

    def wait_until_ready(self, names: list[str]) -> None:
        for name in names:
            stack.wait_for_log(self.layout, name, " ready.", WORKER_READY_SECONDS)

    def process_groups(self) -> set[int]:
        return {int(self.layout.pid_file(name).read_text()) for name in self.names}

    def log(self, name: str) -> str:
        return self.layout.log_file(name).read_text(errors="replace")

    def stop_all(self) -> None:
        for name in list(self.names):
            if self.layout.pid_file(name).exists():
                stop_now(self.layout, name)
            self.names.remove(name)


def stop_now(layout: stack.StackLayout, name: str) -> None:
    """Kill the process group started as `name` at once and wait until nothing of it runs.

    For a test that is over: a warm shutdown buys nothing (a Celery worker's or the
    daemon's took 1 to 6 s here), and what the process leaves in the broker or the
    instance goes with the test's virtual host, Redis database or instance database.
    """
    stack.stop_process(layout, name, timeout=0)


def _settings_of(env: dict[str, str]):
    from jobs_platform.settings import Settings

    return Settings.from_env(env)


def process_group_of(pid: int) -> int | None:
    """The process group of a live `pid`; None once it has exited, zombie or reaped.

    A stack process outlives `bin/stack up`, so its parent is whatever reaps orphans here;
    where that is slow or never (a container's PID 1), an exited leader stays a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, _parent, group = stat.rsplit(")", 1)[1].split()[:3]
    return None if state in ("Z", "X") else int(group)


def celery_step_hosts(instance: dg.DagsterInstance, run_id: str) -> dict[str, list[str]]:
    """Step key → the Celery workers (`wN@host`) that picked it up, in order."""
    hosts: dict[str, list[str]] = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        metadata = event.engine_event_data.metadata if event.engine_event_data else {}
        worker = metadata.get("Celery worker")
        if worker is not None:
            hosts.setdefault(event.step_key, []).append(worker.value)
    return hosts


def step_start_pids(instance: dg.DagsterInstance, run_id: str, step_key: str) -> list[int]:
    """The pids of the processes that started `step_key` in the run, in order."""
    return [
        entry.dagster_event.pid
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        if entry.step_key == step_key
    ]


def step_failure_messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    messages = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = entry.dagster_event.step_failure_data
        messages.append(
            " ".join(
                filter(
                    None,
                    [
                        data.error.to_string() if data.error else "",
                        data.user_failure_data.description if data.user_failure_data else "",
                    ],
                )
            )
        )
    return messages


def runs_in_status(instance: dg.DagsterInstance, *statuses: dg.DagsterRunStatus) -> list:
    """The backfills' runs in `statuses`; not the health schedule's, which the daemon may be
    starting at any 10-minute mark beside them."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=list(statuses)))
    return [run for run in runs if "dagster/schedule_name" not in run.tags]


def seed(env: dict[str, str], start: str, end: str, orders_per_day: int = 300) -> None:
    """Landing files for the days from `start` to `end` (`orders-example seed`)."""
    seeded = run_cli(
        [str(stack.BIN / "orders-example"), "seed", "--start", start, "--end", end,
         "--orders-per-day", str(orders_per_day)],
        env,
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr
