"""`JOBS_PLATFORM_EXECUTOR` picks the executor of every job; Celery's settings are the
ones the guarantees need; a step under a remote executor never guesses its warehouse."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dagster as dg
import pytest

from jobs_platform.errors import TerminalError, WarehouseNotShared
from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES
from jobs_platform.orchestration.executors import (
    FRAMEWORK_MODULES,
    celery_executor_config,
    forkserver_or_spawn,
    jobs_platform_executor,
    platform_executor,
    retries_wait_in_the_step,
    with_forkserver_by_default,
)
from jobs_platform.orchestration.step_bounds import celery_app_settings, step_deadline_seconds
from jobs_platform.settings import Settings, SettingsError, require_shared_warehouse
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.orchestration.forkserver_probe import PROBE_FILE_VARIABLE


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_the_default_executor_is_the_frameworks_own_under_its_own_name():
    assert settings().executor == "multiprocess"
    executor = platform_executor(settings())
    assert executor is jobs_platform_executor
    assert executor.name == "jobs_platform_executor"  # not Dagster's default's name
    # Dagster's default's config: run configs written for it keep working.
    assert executor.config_schema.as_field().config_type.key == (
        dg.multi_or_in_process_executor.config_schema.as_field().config_type.key
    )


@pytest.fixture
def first_run_of_its_process(monkeypatch):
    """The executor is built as for a process's first run: pytest changes the environment
    from test to test, and a forkserver's environment is remembered per process."""
    from jobs_platform.orchestration import executors

    monkeypatch.setattr(executors, "_forkserver_environment", None)


def build(executor: dg.ExecutorDefinition, config: dict) -> dg.Executor:
    """The executor a run of `probe` with `config` as its executor config gets."""
    from jobs_platform_tests.orchestration.forkserver_probe import probe

    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.InitExecutorContext(
            job=dg.reconstructable(probe),
            executor_def=executor,
            executor_config=config,
            instance=instance,
        )
        assert executor.executor_creation_fn is not None
        return executor.executor_creation_fn(context)


@pytest.mark.parametrize(
    "multiprocess",
    [
        {"retries": {"enabled": {}}},
        {"max_concurrent": 3, "retries": {"disabled": {}}, "start_method": {"spawn": {}}},
        {"retries": {"enabled": {}}, "tag_concurrency_limits": [{"key": "db", "limit": 1}]},
    ],
)
def test_a_multiprocess_run_gets_dagsters_own_executor_with_a_forkserver_by_default(
    multiprocess, first_run_of_its_process
):
    ours = build(jobs_platform_executor, {"multiprocess": multiprocess})
    job_module = "jobs_platform_tests.orchestration.forkserver_probe"
    config = with_forkserver_by_default({"multiprocess": multiprocess}, job_module)
    dagsters = build(dg.multi_or_in_process_executor, config)

    assert type(ours) is type(dagsters)
    assert type(ours).__module__.startswith("dagster.")
    assert vars(ours) == vars(dagsters)


def test_a_run_that_asks_for_in_process_gets_dagsters_in_process_executor(
    first_run_of_its_process,
):
    retries = {"retries": {"enabled": {}}}
    ours = build(jobs_platform_executor, {"in_process": retries})
    dagsters = build(dg.in_process_executor, retries)

    assert type(ours) is type(dagsters)
    assert vars(ours) == vars(dagsters)


def test_a_run_whose_environment_changed_since_the_forkserver_started_spawns_its_steps():
    forked = {"multiprocess": {"start_method": {"forkserver": {"preload_modules": ["acme"]}}}}
    first = {"A": "1"}

    assert forkserver_or_spawn(forked, {"A": "1"}, first) == forked
    assert forkserver_or_spawn(forked, {"A": "2"}, first) == {
        "multiprocess": {"start_method": {"spawn": {}}}
    }
    limited = {"multiprocess": {**forked["multiprocess"], "max_concurrent": 2}}
    assert forkserver_or_spawn(limited, {}, first)["multiprocess"]["max_concurrent"] == 2
    # No forkserver asked for: nothing to change.
    spawned = {"multiprocess": {"start_method": {"spawn": {}}}}
    assert forkserver_or_spawn(spawned, {"A": "2"}, first) == spawned
    assert forkserver_or_spawn({"in_process": {}}, {"A": "2"}, first) == {"in_process": {}}


def test_multiprocess_runs_preload_the_jobs_module_in_a_forkserver_unless_a_start_method_is_named():
    preloaded = [*INSTANCE_STORAGE_MODULES, "acme.definitions"]
    forked = {"forkserver": {"preload_modules": preloaded}}
    assert with_forkserver_by_default({"multiprocess": {}}, "acme.definitions") == {
        "multiprocess": {"start_method": forked}
    }
    limited = {"multiprocess": {"max_concurrent": 1}}
    assert with_forkserver_by_default(limited, "acme.definitions")["multiprocess"] == {
        "max_concurrent": 1,
        "start_method": forked,
    }
    spawned = {"multiprocess": {"start_method": {"spawn": {}}}}
    assert with_forkserver_by_default(spawned, "acme.definitions") == spawned
    assert with_forkserver_by_default({"in_process": {}}, "acme.definitions") == {"in_process": {}}
    from_a_file = with_forkserver_by_default({"multiprocess": {}}, None)["multiprocess"]
    assert from_a_file["start_method"]["forkserver"]["preload_modules"] == [
        *INSTANCE_STORAGE_MODULES,
        *FRAMEWORK_MODULES,
    ]


def _run_probe(tmp_path, run_config: dict | None = None) -> dict:
    probe_file = tmp_path / "probe.json"
    args = [
        str(Path(sys.executable).with_name("dagster")), "job", "execute",
        "-m", "jobs_platform_tests.orchestration.forkserver_probe", "-j", "probe",
    ]  # fmt: skip
    if run_config:
        config_file = tmp_path / "run_config.json"
        config_file.write_text(json.dumps(run_config))
        args += ["--config", str(config_file)]
    home = tmp_path / "dagster_home"
    home.mkdir()
    finished = run_cli(args, {"DAGSTER_HOME": str(home), PROBE_FILE_VARIABLE: str(probe_file)})
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    return json.loads(probe_file.read_text())


def test_a_step_process_is_forked_from_a_forkserver_that_preloaded_the_jobs_module(tmp_path):
    probe = _run_probe(tmp_path)

    assert probe["parent_pid"] != probe["run_worker_pid"]
    assert "multiprocessing.forkserver" in probe["parent_command"]
    assert "jobs_platform_tests.orchestration.forkserver_probe" in probe["parent_command"]
    # and what the step imports to build its instance, once for every step it forks
    assert probe["instance_storage_preloaded"]
    # A step of its own process: a retry of it sleeps its wait, Dagster's loop blocks on it.
    assert probe["retries_wait_in_the_step"]


def test_a_run_that_names_spawn_gets_a_fresh_interpreter_per_step(tmp_path):
    spawn = {"execution": {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}}
    probe = _run_probe(tmp_path, spawn)

    assert probe["parent_pid"] == probe["run_worker_pid"]
    assert "multiprocessing.forkserver" not in probe["parent_command"]


def test_a_run_that_asks_for_in_process_lets_dagster_wait_for_its_retries(tmp_path):
    probe = _run_probe(tmp_path, {"execution": {"config": {"in_process": {}}}})

    # Dagster's in-process executor sleeps until a retry is due: the step need not.
    assert not probe["retries_wait_in_the_step"]


def a_step_context(executor_name: str, run_config: dict) -> Any:
    """What `retries_wait_in_the_step` reads of a step's context: its executor and run config."""
    job = SimpleNamespace(executor_def=SimpleNamespace(name=executor_name))
    return SimpleNamespace(
        op_execution_context=SimpleNamespace(job_def=job),
        run=SimpleNamespace(run_config=run_config),
    )


IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
MULTIPROCESS = {"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}}


@pytest.mark.parametrize(
    ("executor_name", "run_config", "sleeps"),
    [
        ("jobs_platform_executor", {}, True),
        ("jobs_platform_executor", MULTIPROCESS, True),
        ("jobs_platform_executor", IN_PROCESS, False),
        ("multi_or_in_process_executor", {}, True),
        ("multi_or_in_process_executor", IN_PROCESS, False),
        ("multiprocess", {}, True),
        ("in_process", {}, False),
        ("execute_in_process_executor", {}, False),
        ("celery", {}, False),
    ],
)
def test_a_retried_step_sleeps_its_wait_only_under_the_multiprocess_executor(
    executor_name, run_config, sleeps
):
    assert retries_wait_in_the_step(a_step_context(executor_name, run_config)) is sleeps


def test_a_retried_step_inside_a_celery_task_leaves_the_wait_to_dagster(monkeypatch):
    from jobs_platform.orchestration import executors

    # A worker that loaded the location with the local executor: the task holds a slot.
    monkeypatch.setattr(executors, "_inside_celery_task", lambda: True)

    assert not retries_wait_in_the_step(a_step_context("jobs_platform_executor", {}))


def test_in_process_is_chosen_by_the_variable():
    assert platform_executor(settings(JOBS_PLATFORM_EXECUTOR="in_process")).name == "in_process"


def test_celery_is_chosen_by_the_variable():
    assert platform_executor(settings(JOBS_PLATFORM_EXECUTOR="celery")).name == "celery"


def test_an_unknown_executor_is_refused_naming_the_variable():
    with pytest.raises(SettingsError, match="JOBS_PLATFORM_EXECUTOR"):
        settings(JOBS_PLATFORM_EXECUTOR="threads")


def test_celery_defaults_to_the_local_rabbitmq_and_rpc_results():
    config = celery_executor_config(settings(), environ_has=lambda name: False)

    assert config["broker"] == "amqp://guest:guest@127.0.0.1:5672//"
    assert config["backend"] == "rpc://"


def test_a_broker_url_from_the_environment_stays_a_variable_in_run_config():
    env = {"JOBS_PLATFORM_CELERY_BROKER": "amqp://etl:secret@mq:5672//"}
    config = celery_executor_config(settings(**env), environ_has=env.__contains__)

    assert config["broker"] == {"env": "JOBS_PLATFORM_CELERY_BROKER"}
    assert "secret" not in repr(config)


def test_celery_acknowledges_late_and_requeues_the_task_of_a_lost_worker():
    app = celery_app_settings(settings())

    assert app["task_acks_late"] is True
    assert app["task_reject_on_worker_lost"] is True
    assert app["worker_prefetch_multiplier"] == 1


def test_the_broker_redelivers_only_after_a_step_could_have_finished():
    chosen = settings(
        JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS="7200", JOBS_PLATFORM_LEASE_SECONDS="90"
    )
    visibility = celery_app_settings(chosen)["broker_transport_options"]["visibility_timeout"]

    assert visibility >= 7200 + 90
    assert step_deadline_seconds(chosen) >= 7200 + 90


def test_a_remote_step_without_a_warehouse_url_is_terminal_and_names_the_variable():
    with pytest.raises(WarehouseNotShared, match="JOBS_PLATFORM_DATABASE_URL") as raised:
        require_shared_warehouse(None)
    assert isinstance(raised.value, TerminalError)


def test_a_remote_step_with_a_relative_sqlite_path_is_refused():
    with pytest.raises(WarehouseNotShared, match="relative"):
        require_shared_warehouse("sqlite:///.jobs_platform/warehouse.db")


def test_a_remote_step_may_use_postgresql_or_an_absolute_sqlite_path():
    url = "postgresql://etl@db:5432/warehouse"
    assert require_shared_warehouse(url) == url
    assert require_shared_warehouse("sqlite:////shared/warehouse.db").endswith("warehouse.db")


def test_each_run_in_one_process_gets_step_processes_with_its_own_environment(tmp_path):
    """Python keeps one forkserver per process, started with the environment of the moment:
    a later run in the same process (a script, a notebook, a test suite) whose environment
    changed must not fork its steps from it."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    runs = [str(first), str(first), str(second)]
    script = (
        "from jobs_platform_tests.orchestration.forkserver_probe import run_one_after_another;"
        f"run_one_after_another({runs!r})"
    )
    finished = run_cli([sys.executable, "-c", script], {})
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]

    # Each step wrote where its own run's environment said.
    once, again = (json.loads(line) for line in first.read_text().splitlines())
    [changed] = (json.loads(line) for line in second.read_text().splitlines())
    # The runs of the first environment share the forkserver the first one started.
    assert "multiprocessing.forkserver" in once["parent_command"]
    assert again["parent_pid"] == once["parent_pid"]
    # The run of another environment spawns its step: a child of the run's own process.
    assert changed["parent_pid"] == changed["run_worker_pid"]
    assert "multiprocessing.forkserver" not in changed["parent_command"]
