"""`bench backfill --via daemon`: the orders backfill launched as the UI launches it.

A webserver and a daemon start on a scratch Dagster instance (the repository's
`dagster.yaml`: queued runs, at most 4 at once, 3 per backfill). The backfill of `orders`
and `daily_revenue` over the days is launched with the webserver's GraphQL mutation
`launchPartitionBackfill`, with the parameters the UI sends when "Materialize" is pressed
for a selection of partitions in the asset graph. The daemon creates the runs (it ticks
every 30 s in Dagster 1.13, a fixed interval), the run coordinator launches them, and
each run worker runs its steps with the code location's executor.

Times (wall clock, seconds):
- `end_to_end_seconds`: from the mutation to the backfill being marked done (this
  includes up to 30 s before the first run exists and up to 30 s after the last ended);
- `first_run_created_to_last_run_ended_seconds`: the framework's part, compared with
  the plain script (`ratio`);
- `wait_for_first_run_seconds`: from the mutation to the first run being created.
The backfill is then launched again on the unchanged input (`rerun_*`). Peak RSS is
sampled from /proc (VmHWM) for every process under the daemon and the webserver.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import sqlalchemy as sa

from benchmarks.database import new_row_versions, snapshot_row_versions
from jobs_platform.store.db import normalize_url

ASSETS = ("orders", "daily_revenue")
# The bundled example; `bench backfill -m MODULE` names another location serving the
# same `orders` and `daily_revenue` backfills (e.g. one with another backfill policy).
LOCATION_MODULE = "orders_example.definitions"
BACKFILL_TAG = "dagster/backfill"
# The repository's own instance settings, as `dagster dev` in the repository's root uses
# them: only in a source checkout (its root is three folders up, where pyproject.toml is).
# An installed package has none and writes FALLBACK_DAGSTER_YAML: the settings of the
# repository's file that the figures depend on (how many runs at once, how soon a queued
# run starts, how many runs of a backfill).
_SOURCE_CHECKOUT = Path(__file__).resolve().parents[2]
REPO_DAGSTER_YAML = (
    _SOURCE_CHECKOUT / "dagster.yaml" if (_SOURCE_CHECKOUT / "pyproject.toml").is_file() else None
)
FALLBACK_DAGSTER_YAML = """\
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 4
    dequeue_interval_seconds: 1
    tag_concurrency_limits:
      - key: dagster/backfill
        limit: 3
telemetry:
  enabled: false
"""
STARTUP_TIMEOUT_SECONDS = 300
POLL_SECONDS = 0.5
RSS_SAMPLE_SECONDS = 0.5

LAUNCH_MUTATION = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on PartitionSetNotFoundError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on PipelineNotFoundError { message }
    ... on InvalidSubsetError { message }
  }
}
"""


class DaemonBenchFailed(RuntimeError):
    """The UI-path backfill did not complete as it should, so its time means nothing."""


def ui_backfill_params(
    days: list[str], run_config: dict | None, assets: tuple[str, ...] = ASSETS
) -> dict:
    """What the UI sends for "Materialize" on a partition selection in the asset graph."""
    params: dict = {
        "tags": [],
        "assetSelection": [{"path": [asset]} for asset in assets],
        "partitionNames": days,
        "fromFailure": False,
    }
    if run_config:  # only when the launchpad's config was edited
        params["runConfigData"] = run_config
    return params


class DagsterStack:
    """A webserver and a daemon on a scratch instance, stopped (process groups) on exit."""

    def __init__(
        self,
        folder: Path,
        env: dict[str, str],
        module: str = LOCATION_MODULE,
        extra_yaml: str = "",
    ):
        """`extra_yaml`: more of the instance's settings, appended to its dagster.yaml
        (e.g. a `storage: postgres:` block)."""
        self.folder = folder
        self.module = module
        self.home = folder / "dagster_home"
        self.home.mkdir(parents=True)
        if REPO_DAGSTER_YAML is not None and REPO_DAGSTER_YAML.is_file():
            shutil.copy(REPO_DAGSTER_YAML, self.home / "dagster.yaml")
        else:
            (self.home / "dagster.yaml").write_text(FALLBACK_DAGSTER_YAML)
        if extra_yaml:
            with open(self.home / "dagster.yaml", "a") as settings:
                settings.write("\n" + extra_yaml)
        self.env = {**_clean_environ(), **env, "DAGSTER_HOME": str(self.home)}
        self.port = _free_port()
        self.processes: list[subprocess.Popen] = []
        self.rss = RssSampler(self.processes)

    def __enter__(self) -> DagsterStack:
        import dagster as dg

        # Create the instance's storage before two processes race on its migrations.
        with dg.DagsterInstance.from_config(str(self.home)):
            pass
        bin_dir = Path(sys.executable).parent
        location = ["-m", self.module]
        self._start("daemon", [str(bin_dir / "dagster-daemon"), "run", *location])
        self._start(
            "webserver",
            [
                str(bin_dir / "dagster-webserver"), *location,
                "-h", "127.0.0.1", "-p", str(self.port),
            ],
        )  # fmt: skip
        self.rss.start()
        try:
            self._wait_until_serving()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.rss.stop()
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # Run workers are children of the daemon's run launcher, in its process group.

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the folder
        self.processes.append(
            subprocess.Popen(
                command,
                cwd=self.folder,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    program = str(
                        process.args[0] if isinstance(process.args, list) else process.args
                    )
                    raise DaemonBenchFailed(
                        f"{program} exited with {process.returncode}: "
                        f"{self.log_tail(Path(program).name)}"
                    )
            with contextlib.suppress(OSError, DaemonBenchFailed):
                located = self.graphql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name "
                    "locationOrLoadError { __typename } } } } }"
                )
                entries = located["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["locationOrLoadError"]["__typename"] == (
                    "RepositoryLocation"
                ):
                    return
            time.sleep(1)
        raise DaemonBenchFailed(f"the webserver did not serve in {STARTUP_TIMEOUT_SECONDS}s")

    def log_tail(self, name: str, lines: int = 20) -> str:
        name = {"dagster-daemon": "daemon", "dagster-webserver": "webserver"}.get(name, name)
        path = self.folder / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise DaemonBenchFailed(f"GraphQL HTTP {exc.code}: {exc.read()[:3000]!r}") from None
        if answer.get("errors"):
            raise DaemonBenchFailed(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def launch_backfill(self, params: dict) -> str:
        result = self.graphql(LAUNCH_MUTATION, {"backfillParams": params})
        launched = result["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise DaemonBenchFailed(f"launchPartitionBackfill: {launched}")
        return launched["backfillId"]


def wait_for_backfill(stack: DagsterStack, backfill_id: str, timeout: float):
    """Poll until the backfill is done and its runs have ended; (backfill, run records, at)."""
    import dagster as dg

    from jobs_platform.orchestration._compat import backfill_is_busy

    began = time.time()
    with dg.DagsterInstance.from_config(str(stack.home)) as instance:
        while True:
            backfill = instance.get_backfill(backfill_id)
            if backfill is None:
                raise DaemonBenchFailed(f"backfill {backfill_id} is not in the instance")
            records = instance.get_run_records(dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
            finished = all(record.dagster_run.is_finished for record in records)
            if not backfill_is_busy(backfill) and finished:
                return backfill, records, time.time()
            if time.time() - began > timeout:
                raise DaemonBenchFailed(
                    f"backfill {backfill_id} still {backfill.status.value} after "
                    f"{timeout:.0f}s; daemon log:\n{stack.log_tail('daemon')}"
                )
            time.sleep(POLL_SECONDS)


def timed_ui_backfill(
    stack: DagsterStack,
    days: list[str],
    run_config: dict | None,
    assets: tuple[str, ...] = ASSETS,
) -> dict:
    """Launch the backfill of `assets` over `days` (partition keys) through GraphQL and
    wait for it; its timeline in seconds."""
    from jobs_platform.orchestration._compat import backfill_succeeded

    launched_at = time.time()
    backfill_id = stack.launch_backfill(ui_backfill_params(days, run_config, assets))
    backfill, records, done_at = wait_for_backfill(stack, backfill_id, stack_timeout(days))
    failed = [r.dagster_run.run_id for r in records if not r.dagster_run.is_success]
    if not backfill_succeeded(backfill) or failed or not records:
        raise DaemonBenchFailed(
            f"backfill {backfill_id} ended {backfill.status.value} with "
            f"{len(records)} run(s), failed: {failed or 'none'}"
        )
    created = [record.create_timestamp.timestamp() for record in records]
    ended = [record.end_time for record in records]
    # Queue + run worker start + loading the code location, then the run itself.
    to_start = [r.start_time - r.create_timestamp.timestamp() for r in records]
    running = [r.end_time - r.start_time for r in records]
    intervals = sorted((r.create_timestamp.timestamp(), r.end_time) for r in records)
    return {
        "idle_between_runs_seconds": round(_uncovered(intervals), 3),
        "run_created_to_started_median_seconds": round(statistics.median(to_start), 3),
        "run_started_to_ended_median_seconds": round(statistics.median(running), 3),
        "backfill_id": backfill_id,
        "runs_created": len(records),
        "end_to_end_seconds": round(done_at - launched_at, 3),
        "launch_to_last_run_ended_seconds": round(max(ended) - launched_at, 3),
        "first_run_created_to_last_run_ended_seconds": round(max(ended) - min(created), 3),
        "wait_for_first_run_seconds": round(min(created) - launched_at, 3),
    }


def _uncovered(intervals: list[tuple[float, float]]) -> float:
    """Seconds between the first start and the last end when no run existed (the daemon's
    tick between one run ending and the next being created)."""
    idle, covered_until = 0.0, intervals[0][1]
    for start, end in intervals[1:]:
        idle += max(0.0, start - covered_until)
        covered_until = max(covered_until, end)
    return idle


def stack_timeout(days: list[str]) -> float:
    """Generous: two daemon ticks plus a minute a partition on a loaded machine."""
    return 120 + 60 * len(days)


def run_daemon_bench(
    url: str,
    landing: str,
    folder: Path,
    days: list[str],
    run_config: dict | None,
    *,
    rerun: bool = True,
    module: str = LOCATION_MODULE,
) -> dict:
    """The UI-path backfill into the (empty) schema at `url`, then its unchanged re-run.

    The webserver and the daemon load the code location `module`."""
    env = {"JOBS_PLATFORM_DATABASE_URL": url, "JOBS_PLATFORM_LANDING": landing}
    rerun_figures, rewritten = None, None
    with DagsterStack(folder, env, module) as stack:
        first = timed_ui_backfill(stack, days, run_config)
        if rerun:
            engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
            try:
                snapshot_row_versions(engine, "orders", "order_id")
                rerun_figures = timed_ui_backfill(stack, days, run_config)
                rewritten = new_row_versions(engine, "orders", "order_id")
            finally:
                engine.dispose()
    peaks = stack.rss.peaks_mib()
    return {
        "first": first, "rerun": rerun_figures, "rerun_new_row_versions": rewritten, "rss": peaks,
    }  # fmt: skip


class RssSampler:
    """Samples the peak RSS (VmHWM) of every process under the given ones, by role."""

    def __init__(self, roots: list[subprocess.Popen]):
        self._roots = roots
        self._peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        parents = _descendants({process.pid for process in self._roots})
        for pid in sorted(parents, key=lambda p: _depth(p, parents)):
            peak_kb = _vm_hwm_kb(pid)
            if peak_kb is None:
                continue
            known = self._peaks.get(pid)
            role = known[0] if known else _role(pid, self._peaks.get(parents[pid], ("", 0))[0])
            self._peaks[pid] = (role, max(peak_kb, known[1] if known else 0))

    def peaks_mib(self) -> dict[str, float]:
        """The largest peak per role (run worker, step, daemon, webserver, code server)."""
        by_role: dict[str, int] = {}
        for role, peak_kb in self._peaks.values():
            by_role[role] = max(by_role.get(role, 0), peak_kb)
        return {role: round(kb / 1024, 1) for role, kb in sorted(by_role.items())}


def _descendants(roots: set[int]) -> dict[int, int]:
    """Every process under `roots` (roots included), with its parent."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, int] = {}
    frontier = [(root, 0) for root in roots]
    while frontier:
        pid, parent = frontier.pop()
        if pid in found:
            continue
        found[pid] = parent
        frontier.extend((child, pid) for child in children.get(pid, []))
    return found


def _depth(pid: int, parents: dict[int, int]) -> int:
    depth = 0
    while pid in parents and depth < 64:
        pid, depth = parents[pid], depth + 1
    return depth


def _vm_hwm_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _role(pid: int, parent_role: str) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    if "multiprocessing" in command:
        # A code server starts run workers, a run worker its step processes, both with
        # multiprocessing (a forkserver's children are steps too).
        return "run_worker" if parent_role == "code_server" else "step"
    for marker, role in (
        ("execute_run", "run_worker"),
        ("resume_run", "run_worker"),
        ("execute_step", "step"),
        ("dagster-daemon", "daemon"),
        ("dagster-webserver", "webserver"),
        ("api grpc", "code_server"),
    ):
        if marker in command:
            return role
    return "other"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _clean_environ() -> dict[str, str]:
    """This process's environment without settings that would change what is measured."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in ("JOBS_PLATFORM_FAILPOINTS", "DAGSTER_HOME")
    }
