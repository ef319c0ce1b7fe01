"""`JOBS_PLATFORM_EXECUTOR` picks the executor of every job; Celery's settings are the
ones the guarantees need; a step under a remote executor never guesses its warehouse."""

from __future__ import annotations

import pytest

from jobs_platform.errors import TerminalError, WarehouseNotShared
from jobs_platform.orchestration.executors import (
    celery_app_settings,
    celery_executor_config,
    platform_executor,
    step_deadline_seconds,
)
from jobs_platform.settings import Settings, SettingsError, require_shared_warehouse


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_the_default_executor_is_multiprocess_and_a_run_may_still_ask_for_in_process():
    assert settings().executor == "multiprocess"
    assert platform_executor(settings()).name == "multi_or_in_process_executor"


def _engine_config(run_config: dict) -> dict:
    import dagster as dg
    from dagster._core.system_config.objects import ResolvedRunConfig

    @dg.op
    def noop() -> None:
        pass

    @dg.job(executor_def=platform_executor(settings()))
    def one_step():
        noop()

    return ResolvedRunConfig.build(one_step, run_config).execution.execution_engine_config


def test_multiprocess_steps_fork_from_a_forkserver_unless_the_run_names_a_start_method():
    assert _engine_config({})["multiprocess"]["start_method"] == {"forkserver": {}}
    spawned = {"execution": {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}}
    assert _engine_config(spawned)["multiprocess"]["start_method"] == {"spawn": {}}
    limited = {"execution": {"config": {"multiprocess": {"max_concurrent": 1}}}}
    assert _engine_config(limited)["multiprocess"] == {
        "max_concurrent": 1,
        "start_method": {"forkserver": {}},
        "retries": {"enabled": {}},
    }
    in_process = {"execution": {"config": {"in_process": {}}}}
    assert set(_engine_config(in_process)) == {"in_process"}


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
