"""Commands the tests run in real subprocesses: the CLIs, `dagster job execute`, signals."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa

from jobs_platform.orchestration.tags import PARTITION_TAG
from jobs_platform_tests.environments import EXAMPLE_MODULE as CODE_LOCATION_MODULE
from jobs_platform_tests.runs import chunk_rows_config
from jobs_platform_tests.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]

# The `jobs-platform` command of the environment the tests run in.
JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
DAGSTER = str(Path(sys.executable).with_name("dagster"))

# The backfills of the bundled `orders_backfill` job: one chain, so one step (one op).
ORDERS_BACKFILL_ASSETS = ["orders", "daily_revenue"]
ORDERS_BACKFILL_STEP = "chain__orders__daily_revenue"

# A user's code location with one backfill, `acme_events`; loaded by the CLI only.
ACME = "jobs_platform_tests.locations.acme"


def run_cli(
    args: list[str], env: dict[str, str], *, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run a command in a real subprocess with the platform environment."""
    full_env = {**os.environ, **env}
    return subprocess.run(
        args, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def dagster_job_execute(
    env: dict[str, str], partition: str, *, job: str = "orders_backfill", config: dict | None = None
) -> subprocess.CompletedProcess:
    """`dagster job execute -m orders_example.definitions -j JOB` for one partition."""
    return run_cli(_job_execute_args(partition, job, config), env)


def _job_execute_args(
    partition: str, job: str, config: dict | None, module: str = CODE_LOCATION_MODULE
) -> list[str]:
    args = [
        str(Path(sys.executable).with_name("dagster")),
        "job",
        "execute",
        "-m",
        module,
        "-j",
        job,
        "--tags",
        json.dumps({PARTITION_TAG: partition}),
    ]
    if config:
        args += ["--config", _config_file(config)]
    return args


_config_folder: list[str] = []


def _config_file(config: dict) -> str:
    """`dagster job execute` takes run config only as files (JSON is valid YAML).

    They live in one folder per test process, removed when the process exits.
    """
    import atexit

    if not _config_folder:
        _config_folder.append(tempfile.mkdtemp(prefix="jp_run_config_"))
        atexit.register(shutil.rmtree, _config_folder[0], True)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".yaml", dir=_config_folder[0], delete=False
    ) as handle:
        json.dump(config, handle)
    return handle.name


def dagster_asset_materialize(
    env: dict[str, str], assets: list[str], partition: str, *, chunk_rows: int | None = None
) -> subprocess.CompletedProcess:
    """`dagster asset materialize -m orders_example.definitions --select … --partition …`."""
    args = [
        DAGSTER,
        "asset",
        "materialize",
        "-m",
        CODE_LOCATION_MODULE,
        "--select",
        ",".join(assets),
        "--partition",
        partition,
    ]
    if chunk_rows is not None:
        args += ["--config-json", json.dumps(chunk_rows_config(assets, chunk_rows))]
    return run_cli(args, env)


def dagster_job_command(
    partition: str,
    *,
    job: str = "orders_backfill",
    chunk_rows: int = 0,
    in_process: bool = False,
    module: str = CODE_LOCATION_MODULE,
):
    """The command line of a run of `module`'s `job`; `in_process` runs steps in the run
    process (faster)."""
    config: dict = {}
    if chunk_rows:
        config.update(chunk_rows_config(ORDERS_BACKFILL_ASSETS, chunk_rows))
    if in_process:
        config["execution"] = {"config": {"in_process": {}}}
    return _job_execute_args(partition, job, config, module)


def ranged_job_command(
    first: dt.date, last: dt.date, *, job: str = "orders_backfill", chunk_rows: int = 0
) -> list[str]:
    """`dagster job execute` of one run over the days `first`…`last` (the range tags)."""
    tags = {
        "dagster/asset_partition_range_start": first.isoformat(),
        "dagster/asset_partition_range_end": last.isoformat(),
    }
    args = [DAGSTER, "job", "execute", "-m", CODE_LOCATION_MODULE, "-j", job]
    args += ["--tags", json.dumps(tags)]
    if chunk_rows:
        args += ["--config", _config_file(chunk_rows_config(ORDERS_BACKFILL_ASSETS, chunk_rows))]
    return args


def start_run(
    env: dict[str, str],
    partition: str,
    *,
    chunk_rows: int = 0,
    log_path: Path | None = None,
    in_process: bool = False,
    module: str = CODE_LOCATION_MODULE,
) -> subprocess.Popen:
    """Start `dagster job execute` in its own process group (so tests can signal it whole).

    With the default handlers of SIGTERM and SIGINT, as a service manager starts it: a
    process can inherit them ignored from the shell that started the tests.
    """
    output = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        dagster_job_command(partition, chunk_rows=chunk_rows, in_process=in_process, module=module),
        env={**os.environ, **env},
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=default_signal_handlers,
    )


def default_signal_handlers() -> None:
    """`preexec_fn` of a child that must see SIGTERM and SIGINT as a fresh process does."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_between_transactions(process_group: int, engine: sa.Engine, *, timeout: float) -> None:
    """SIGSTOP a process group at an instant none of its PostgreSQL sessions is in a transaction.

    A process frozen inside one (its heartbeat renewing a lease, say) would hold its row
    locks until it is resumed, and whoever the test starts next would wait on them. Retried
    (stop, look, resume) until the database shows every other session of it idle.
    """
    others_busy = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND state <> 'idle'"
    )

    def stopped_while_idle() -> bool:
        os.killpg(process_group, signal.SIGSTOP)
        with engine.connect() as connection:
            if connection.execute(others_busy).scalar_one() == 0:
                return True
        os.killpg(process_group, signal.SIGCONT)
        return False

    wait_for(stopped_while_idle, timeout=timeout, interval=0.05, what="a stop between transactions")


# `clock_nanosleep`, the system call of `time.sleep`, by machine (Linux's syscall tables).
_CLOCK_NANOSLEEP = {"x86_64": 230, "aarch64": 115}


def stop_while_asleep(process_group: int, *, timeout: float) -> None:
    """SIGSTOP a process group at an instant its leader's main thread is in `time.sleep`.

    A run waiting for a step's retry sleeps there, outside any transaction on the warehouse
    or on Dagster's SQLite storage, so freezing it then blocks no one. A stopped thread's
    `/proc/PID/syscall` names the call it was stopped in. Retried (stop, look, resume)
    until it is that one.
    """
    import platform

    sleeping = str(_CLOCK_NANOSLEEP[platform.machine()])

    def stopped_asleep() -> bool:
        os.killpg(process_group, signal.SIGSTOP)
        call = Path(f"/proc/{process_group}/syscall").read_text().split()
        if call and call[0] == sleeping:
            return True
        os.killpg(process_group, signal.SIGCONT)
        return False

    wait_for(stopped_asleep, timeout=timeout, interval=0.05, what="a stop while it sleeps")
