"""`bin/stack up|down`: the distributed topology on one machine.

`up [-m MODULE]` checks that the broker and PostgreSQL answer, deploys the warehouse for
the code location MODULE (as `jobs-platform db upgrade -m`), writes the instance's
`dagster.yaml` and the workers' `worker.yaml` from `templates/` beside this module,
creates the instance's storage once (`dagster instance migrate`), then starts the Dagster
daemon and the webserver on MODULE and N Celery workers, each in its own process group
with a pid file and a log file under `.jobs_platform/stack/`. `down` stops what `up`
started, by those pids. A deployment runs the same processes on many machines
(`deploy/docker-compose.yaml`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template

import sqlalchemy as sa

from jobs_platform.location import named_module
from jobs_platform.orchestration.step_bounds import celery_app_settings, step_deadline_seconds
from jobs_platform.settings import Settings
from jobs_platform.store.db import normalize_url, redact_url

TEMPLATES = Path(__file__).parent / "templates"
# The code location `up` serves unless -m or $JOBS_PLATFORM_MODULE names one (it says which).
EXAMPLE_MODULE = "orders_example.definitions"
BIN = Path(sys.executable).parent

# Local services as this machine runs them; a deployment passes its own URLs.
BROKERS = {
    "rabbitmq": ("amqp://guest:guest@127.0.0.1:5672//", "rpc://"),
    "redis": ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
}
DEFAULT_WAREHOUSE_URL = "postgresql://postgres@127.0.0.1:5432/jobs_platform"
DEFAULT_INSTANCE_URL = "postgresql://postgres@127.0.0.1:5432/jobs_platform_dagster"
RUNS_PER_WORKER = 2  # a run process mostly waits for its steps; two keep a worker busy
START_TIMEOUT_SECONDS = 120.0
MIGRATE_TIMEOUT_SECONDS = 120.0  # about 3 s on an empty database, 2 s on a current one
MIGRATE_LOG = "instance-migrate"
# The daemon logs this once it has opened the instance and started its daemon threads.
DAEMON_READY = "Instance is configured with the following daemons"
STOP_TIMEOUT_SECONDS = 60.0  # a worker finishes its step on SIGTERM (warm shutdown)
POLL_SECONDS = 0.5
KILL_WAIT_SECONDS = 10.0


class StackError(RuntimeError):
    """The stack cannot start: a service does not answer or a process did not come up."""


@dataclass(frozen=True)
class StackLayout:
    """Where the stack keeps its instance, configs, pids and logs."""

    folder: Path

    @property
    def dagster_home(self) -> Path:
        return self.folder / "dagster_home"

    @property
    def worker_config(self) -> Path:
        return self.folder / "worker.yaml"

    @property
    def env_file(self) -> Path:
        return self.folder / "env.sh"

    def pid_file(self, name: str) -> Path:
        return self.folder / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def running(self) -> list[str]:
        return sorted(path.stem for path in self.folder.glob("*.pid"))


def render_instance_config(instance_url: str, *, max_concurrent_runs: int) -> str:
    """The instance's dagster.yaml on PostgreSQL; a password stays in DAGSTER_PG_PASSWORD."""
    url = sa.make_url(instance_url)
    # dagster-postgres 0.28 (Dagster 1.12) requires the field; an empty one is trust auth.
    from_env = "\n      password:\n        env: DAGSTER_PG_PASSWORD"
    password = from_env if url.password else '\n      password: ""'
    return Template((TEMPLATES / "dagster.yaml").read_text()).substitute(
        pg_host=url.host or "127.0.0.1",
        pg_port=url.port or 5432,
        pg_user=url.username or "postgres",
        pg_password=password,
        pg_db=url.database,
        max_concurrent_runs=max_concurrent_runs,
    )


def render_worker_config(settings: Settings) -> str:
    """The workers' worker.yaml: broker and backend by variable, the framework's Celery settings."""
    return Template((TEMPLATES / "worker.yaml").read_text()).substitute(
        config_source=json.dumps(celery_app_settings(settings), sort_keys=True)
    )


def instance_environment(instance_url: str) -> dict[str, str]:
    password = sa.make_url(instance_url).password
    return {"DAGSTER_PG_PASSWORD": str(password)} if password else {}


def write_instance(home: Path, instance_url: str, *, max_concurrent_runs: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = render_instance_config(instance_url, max_concurrent_runs=max_concurrent_runs)
    (home / "dagster.yaml").write_text(config)


def create_instance_storage(layout: StackLayout, instance_url: str, env: dict[str, str]) -> float:
    """Create or upgrade the instance's tables, once, before any process opens the instance.

    The daemon, the webserver and every worker create a missing storage when they open the
    instance; started together on a fresh database they race on its CREATE TABLEs (`duplicate
    key value violates unique constraint "pg_type_typname_nsp_index"`) and one of them dies.
    On a storage at the latest schema the migrate changes nothing. Returns its seconds.
    """
    layout.folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        migrated = subprocess.run(
            [str(BIN / "dagster"), "instance", "migrate"],
            env=env,
            cwd=layout.folder,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=MIGRATE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StackError(
            f"`dagster instance migrate` on {redact_url(instance_url)} took over "
            f"{MIGRATE_TIMEOUT_SECONDS:g}s"
        ) from None
    output = migrated.stdout + migrated.stderr
    with open(layout.log_file(MIGRATE_LOG), "a") as log:
        log.write(output)
    if migrated.returncode != 0:
        raise StackError(
            f"`dagster instance migrate` failed on {redact_url(instance_url)}: "
            f"{_last_error_line(output, instance_url)} (log: {layout.log_file(MIGRATE_LOG)})"
        )
    return time.monotonic() - started


def ensure_database(url: str) -> None:
    """Create the database of `url` when its server answers and it does not exist yet."""
    parsed = normalize_url(url)
    if not parsed.database:
        raise StackError(f"{redact_url(url)} names no database")
    admin = sa.create_engine(
        parsed.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
    )
    try:
        with admin.connect() as connection:
            exists = connection.execute(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :name"),
                {"name": parsed.database},
            ).first()
            if not exists:
                quoted = connection.dialect.identifier_preparer.quote(parsed.database)
                connection.execute(sa.text(f"CREATE DATABASE {quoted}"))
    except sa.exc.OperationalError as error:
        raise StackError(f"PostgreSQL does not answer at {redact_url(url)}: {error}") from None
    finally:
        admin.dispose()


def prepare_warehouse(url: str, module: str | None = None) -> list[str]:
    """The deploy step, as `jobs-platform db upgrade -m MODULE`: the framework's tables,
    then the missing tables of the code location's backfills (never altered once there).

    Returns the names of the tables it created.
    """
    from jobs_platform.location import load_definitions, location_backfills
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.store.migrate import deploy_warehouse

    try:
        backfills = location_backfills(load_definitions(module))
    except LookupError as error:  # a mistyped module: one line, nothing started
        raise StackError(str(error)) from None
    deployed = deploy_warehouse(warehouse_engine(url), [spec.table for spec in backfills])
    return [table.name for table in deployed.created]


def check_broker(url: str, timeout: float = 5.0) -> None:
    from kombu import Connection

    with Connection(url, connect_timeout=timeout) as connection:
        try:
            connection.ensure_connection(max_retries=1, timeout=timeout)
        except Exception as error:
            raise StackError(
                f"the Celery broker does not answer at {connection.as_uri()}: {error}"
            ) from None


def start_process(
    layout: StackLayout,
    name: str,
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path | None = None,
) -> int:
    """Start `args` in its own process group, logging to `<name>.log`; returns its pid.

    By default in the folder `up` runs in (`bin/stack` runs from the repository's root),
    so a code location module found there is found by every process, from a source
    checkout or an installed package alike.
    """
    layout.folder.mkdir(parents=True, exist_ok=True)
    with open(layout.log_file(name), "ab") as log:
        process = subprocess.Popen(
            args,
            env=env,
            cwd=cwd or Path.cwd(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    layout.pid_file(name).write_text(f"{process.pid}\n")
    return process.pid


def stop_process(layout: StackLayout, name: str, timeout: float = STOP_TIMEOUT_SECONDS) -> str:
    """SIGTERM the process group started as `name`, SIGKILL it past `timeout`."""
    pid_file = layout.pid_file(name)
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink()
        return "already gone"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_alive(pid):
            pid_file.unlink()
            return "stopped"
        time.sleep(POLL_SECONDS)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    # SIGKILL is delivered at once but a process takes a moment to exit: wait for it, so
    # `down` returns only when nothing of the group runs.
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS / 5)
    pid_file.unlink()
    return f"killed after {timeout:g}s"


def wait_for_log(layout: StackLayout, name: str, text: str, timeout: float) -> None:
    """Wait until `text` appears in the process's log, or fail with the log's tail."""
    deadline = time.monotonic() + timeout
    pid = int(layout.pid_file(name).read_text())
    while time.monotonic() < deadline:
        log = layout.log_file(name).read_text(errors="replace")
        if text in log:
            return
        if not _group_alive(pid):
            break
        time.sleep(POLL_SECONDS)
    tail = "\n".join(layout.log_file(name).read_text(errors="replace").splitlines()[-20:])
    raise StackError(f"{name} did not log {text!r} within {timeout:g}s:\n{tail}")


def worker_command(layout: StackLayout, name: str) -> list[str]:
    # One task at a time per worker process: a step is one partition attempt, and a
    # SIGKILL then loses exactly one task, which the broker hands back (acks late).
    return [
        str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
        "-y", str(layout.worker_config), "-n", name, "--", "--concurrency=1",
    ]  # fmt: skip


def process_environment(extra: dict[str, str]) -> dict[str, str]:
    """This shell's variables plus the stack's; `celery` must be on PATH for dagster-celery."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def up(args: argparse.Namespace) -> int:
    layout = StackLayout(Path(args.folder).resolve())
    module = named_module(args.module) or EXAMPLE_MODULE
    if layout.running():
        print(f"already running: {', '.join(layout.running())}; `bin/stack down` first")
        return 1
    default_broker, default_backend = BROKERS[args.broker]
    stack_env = {
        "DAGSTER_HOME": str(layout.dagster_home),
        "JOBS_PLATFORM_EXECUTOR": "celery",
        "JOBS_PLATFORM_CELERY_BROKER": os.environ.get("JOBS_PLATFORM_CELERY_BROKER")
        or default_broker,
        "JOBS_PLATFORM_CELERY_BACKEND": os.environ.get("JOBS_PLATFORM_CELERY_BACKEND")
        or default_backend,
        "JOBS_PLATFORM_DATABASE_URL": os.environ.get("JOBS_PLATFORM_DATABASE_URL")
        or DEFAULT_WAREHOUSE_URL,
        "JOBS_PLATFORM_LANDING": os.environ.get("JOBS_PLATFORM_LANDING")
        or str((Path.cwd() / ".jobs_platform" / "landing").resolve()),
        **instance_environment(args.instance_db),
        # Every process, and a shell that sources the env file, works on this location.
        "JOBS_PLATFORM_MODULE": module,
    }
    settings = Settings.from_env(process_environment(stack_env))
    check_broker(settings.celery_broker)
    ensure_database(settings.database_url)
    ensure_database(args.instance_db)
    created = prepare_warehouse(settings.database_url, module)
    print(f"broker {args.broker} answers; warehouse {redact_url(settings.database_url)}")
    print(f"code location {module}; tables created: {', '.join(created) or 'none missing'}")
    _warn_on_short_consumer_timeout(settings)
    write_instance(
        layout.dagster_home, args.instance_db, max_concurrent_runs=RUNS_PER_WORKER * args.workers
    )
    layout.worker_config.write_text(render_worker_config(settings))
    _write_env_file(layout, stack_env)
    env = process_environment(stack_env)
    seconds = create_instance_storage(layout, args.instance_db, env)
    print(f"instance on PostgreSQL {redact_url(args.instance_db)}: storage ready ({seconds:.1f}s)")
    # The location by module, as `dagster … -m`; a run's steps, on the workers, load the
    # code pointer the run carries, so they follow. The module must be importable from
    # here (installed, or on PYTHONPATH).
    location = ["-m", module]
    start_process(layout, "daemon", [str(BIN / "dagster-daemon"), "run", *location], env)
    start_process(
        layout,
        "webserver",
        [str(BIN / "dagster-webserver"), *location, "-h", args.host, "-p", str(args.port)],
        env,
    )
    workers = [f"w{index}" for index in range(1, args.workers + 1)]
    for name in workers:
        start_process(layout, name, worker_command(layout, name), env)
    try:
        for name in workers:
            wait_for_log(layout, name, " ready.", START_TIMEOUT_SECONDS)
        wait_for_log(layout, "webserver", "Serving dagster-webserver", START_TIMEOUT_SECONDS)
        wait_for_log(layout, "daemon", DAEMON_READY, START_TIMEOUT_SECONDS)
    except StackError as error:
        print(error, file=sys.stderr)
        down(args)
        return 1
    print(f"up: daemon, webserver on http://{args.host}:{args.port}, workers {', '.join(workers)}")
    print(f"pids and logs in {layout.folder}; for this shell: source {layout.env_file}")
    return 0


def down(args: argparse.Namespace) -> int:
    layout = StackLayout(Path(args.folder).resolve())
    names = layout.running()
    if not names:
        print("nothing running")
        return 0
    # Workers first: a worker on SIGTERM finishes its step and reports it to its run.
    for name in sorted(names, key=lambda n: (not n.startswith("w"), n)):
        print(f"{name}: {stop_process(layout, name)}")
    return 0


def _warn_on_short_consumer_timeout(settings: Settings) -> None:
    """RabbitMQ closes a consumer's channel past `consumer_timeout`: a longer step goes twice."""
    if not settings.celery_broker.startswith(("amqp", "pyamqp")) or not shutil.which("rabbitmqctl"):
        return
    shown = subprocess.run(
        ["rabbitmqctl", "-q", "eval", "application:get_env(rabbit, consumer_timeout)."],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    digits = "".join(c for c in shown if c.isdigit())
    needed_ms = int(step_deadline_seconds(settings) * 1000)
    if digits and int(digits) < needed_ms:
        print(
            f"warning: RabbitMQ's consumer_timeout is {int(digits) // 1000}s, shorter than a "
            f"step may take ({needed_ms // 1000}s); a longer step would be handed to a second "
            f"worker. Set `consumer_timeout = {needed_ms}` in rabbitmq.conf, or lower "
            "JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS."
        )


def _write_env_file(layout: StackLayout, stack_env: dict[str, str]) -> None:
    lines = [f"export {name}={_shell_quote(value)}" for name, value in sorted(stack_env.items())]
    layout.env_file.write_text("\n".join(lines) + "\n")
    layout.env_file.chmod(0o600)  # it may hold a password


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _last_error_line(output: str, url: str) -> str:
    """The line of a traceback that names the error, without the URL's password."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Failure)\b", line)]
    line = (errors or lines or ["no output"])[-1]
    password = sa.make_url(url).password
    return line.replace(str(password), "***") if password else line


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader of our own is gone for our purposes: reap it.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    return group_has_live_member(pgid)


def live_group_members(pgid: int) -> dict[int, int]:
    """pid → parent pid of every process of the group that has not exited (no zombies)."""
    members = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members[int(status.parent.name)] = int(fields[1])
    return members


def group_has_live_member(pgid: int) -> bool:
    return bool(live_group_members(pgid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bin/stack", description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=".jobs_platform/stack", help="pids, logs, configs")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start daemon, webserver and Celery workers")
    start.add_argument(
        "-m", "--module", metavar="MODULE", default=None,
        help=f"the code location (default $JOBS_PLATFORM_MODULE, then {EXAMPLE_MODULE})",
    )  # fmt: skip
    start.add_argument("--workers", type=int, default=2)
    start.add_argument("--broker", choices=sorted(BROKERS), default="rabbitmq")
    start.add_argument("--instance-db", default=DEFAULT_INSTANCE_URL, help="instance database")
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--port", type=int, default=3000)
    start.set_defaults(handler=up)
    stop = commands.add_parser("down", help="stop what `up` started")
    stop.set_defaults(handler=down)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except StackError as error:
        print(f"bin/stack: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
