"""The private Dagster names and shapes `orchestration._compat` relies on are still there.

When one fails, the installed Dagster is not the one the shims were read against: read the
shim's docstring and the named Dagster source again before changing the version.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable

import dagster as dg
import pytest

from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES

# Module → names the shims import from it.
PRIVATE_NAMES = {
    "dagster._core.execution.backfill": ["BulkActionStatus", "PartitionBackfill"],
    "dagster._core.execution.retries": ["RetryMode"],
}
# dagster-celery's (the `celery` extra): module → names the celery shims load from it.
CELERY_PRIVATE_NAMES = {
    "dagster_celery.executor": ["CELERY_CONFIG", "CeleryExecutor", "_submit_task"],
    "dagster_celery.core_execution_loop": ["core_celery_execution_loop"],
}
# Every status of a Dagster 1.13.27 backfill: a new one may be a state the bench must wait in.
BULK_ACTION_STATUSES = {
    "REQUESTED", "COMPLETED", "FAILED", "CANCELING", "CANCELED", "COMPLETED_SUCCESS",
    "COMPLETED_FAILED", "FAILING",
}  # fmt: skip


def changed(what: str) -> str:
    return (
        f"Dagster {dg.__version__} changed {what}, which jobs_platform/orchestration/_compat.py "
        "relies on (its shims name the Dagster version they were written for)"
    )


def celery_changed(what: str) -> str:
    import dagster_celery

    return changed(f"(with dagster-celery {dagster_celery.__version__}) {what}")


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def require_names(module_name: str, names: list[str], message: Callable[[str], str]) -> None:
    """Fail with `message` of what changed unless the module imports and has every name."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as missing:
        pytest.fail(message(f"the module {module_name} ({missing})"), pytrace=False)
    for name in names:
        if not hasattr(module, name):
            pytest.fail(message(f"{module_name}.{name}: it is gone"), pytrace=False)


@pytest.mark.parametrize("module_name", sorted(PRIVATE_NAMES))
def test_the_private_names_the_shims_import_exist(module_name):
    require_names(module_name, PRIVATE_NAMES[module_name], changed)


@pytest.mark.parametrize("module_name", INSTANCE_STORAGE_MODULES)
def test_the_modules_a_forkserver_preloads_for_step_instances_exist(module_name):
    # A forkserver skips a preload module it cannot import: a rename would go unseen.
    require_names(module_name, [], changed)


@pytest.mark.parametrize("module_name", sorted(CELERY_PRIVATE_NAMES))
def test_the_private_dagster_celery_names_the_shims_import_exist(module_name):
    pytest.importorskip("dagster_celery")
    require_names(module_name, CELERY_PRIVATE_NAMES[module_name], celery_changed)


def test_the_daemons_a_sensors_runs_need_are_named_as_they_name_themselves():
    from dagster._daemon.daemon import SensorDaemon
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
        QueuedRunCoordinatorDaemon,
    )

    from jobs_platform.orchestration._compat import RUN_QUEUE_DAEMON, SENSOR_DAEMON

    assert SensorDaemon.daemon_type() == SENSOR_DAEMON, changed("the sensor daemon's name")
    assert QueuedRunCoordinatorDaemon.daemon_type() == RUN_QUEUE_DAEMON, changed(
        "the run queue daemon's name"
    )


def test_a_daemons_heartbeat_is_read_back_by_its_type():
    from dagster._daemon.types import DaemonHeartbeat

    from jobs_platform.orchestration._compat import SENSOR_DAEMON, daemon_heartbeats

    with dg.instance_for_test() as instance:
        assert daemon_heartbeats(instance) == {}
        instance.add_daemon_heartbeat(DaemonHeartbeat(1234.5, SENSOR_DAEMON, "daemon-1"))

        assert daemon_heartbeats(instance) == {SENSOR_DAEMON: 1234.5}, changed(
            "DagsterInstance.get_daemon_heartbeats"
        )


def test_a_run_the_framework_executes_itself_names_its_code_locations_module():
    from jobs_platform.dead_letter import requeue_execution
    from jobs_platform.orchestration._compat import (
        FRAMEWORK_JOB_RECONSTRUCTOR,
        run_location_module,
    )

    module, function = FRAMEWORK_JOB_RECONSTRUCTOR
    assert (module, function) == (requeue_execution.__name__, "requeue_run_job")
    job = dg.build_reconstructable_job(
        module,
        function,
        reconstructable_kwargs={"module": "orders_example.definitions", "assets": ["orders"]},
    )
    run = dg.DagsterRun(job_name=job.job_name, job_code_origin=job.get_python_origin())

    assert run_location_module(run) == "orders_example.definitions", changed(
        f"the origin of a job built by build_reconstructable_job: {run.job_code_origin!r}"
    )
    assert run_location_module(dg.DagsterRun(job_name="in_memory")) is None


def test_a_job_loaded_from_a_module_names_it_and_an_in_memory_one_none():
    from jobs_platform.orchestration._compat import job_module_name

    reconstructable = dg.reconstructable(empty_job)

    assert hasattr(reconstructable, "get_module"), changed("ReconstructableJob: no get_module")
    assert job_module_name(reconstructable) == __name__, changed(
        f"ReconstructableJob.get_module(): {reconstructable.get_module()!r}"
    )
    assert job_module_name(empty_job) is None


def test_a_failure_hook_sees_the_cause_the_step_chained():
    seen.clear()
    result = failing_job.execute_in_process(raise_on_error=False)

    assert not result.success
    assert len(seen) == 1, changed("when a failure hook runs: it did not run once")
    assert type(seen[0]) is ChainedCause and str(seen[0]) == "the cause", changed(
        f"HookContext.op_exception: its __cause__ is {seen[0]!r}, not the step's own"
    )


def test_the_backfill_statuses_the_bench_waits_in_are_still_all_there():
    from jobs_platform.orchestration._compat import (
        BulkActionStatus,
        backfill_is_busy,
        backfill_succeeded,
    )

    statuses = {status.name for status in BulkActionStatus}

    assert statuses == BULK_ACTION_STATUSES, changed(f"BulkActionStatus: now {sorted(statuses)}")
    busy = {s.name for s in BulkActionStatus if backfill_is_busy(types.SimpleNamespace(status=s))}
    assert busy == {"REQUESTED", "CANCELING", "FAILING"}
    succeeded = [
        s.name for s in BulkActionStatus if backfill_succeeded(types.SimpleNamespace(status=s))
    ]
    assert succeeded == ["COMPLETED_SUCCESS"]


@pytest.mark.parametrize(
    ("config", "mode"), [({"enabled": {}}, "ENABLED"), ({"disabled": {}}, "DISABLED")]
)
def test_an_executor_retries_config_reads_as_its_retry_mode(config, mode):
    from jobs_platform.orchestration._compat import RetryMode, retry_mode_from_config

    assert hasattr(RetryMode, mode), changed(f"RetryMode: no {mode}")
    assert retry_mode_from_config(config) is getattr(RetryMode, mode), changed(
        f"RetryMode.from_config({config})"
    )


def test_dagster_celery_submits_and_polls_steps_as_the_bounded_executor_expects():
    pytest.importorskip("dagster_celery")
    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import _submit_task

    loop = core_celery_execution_loop
    expected = ["job_context", "execution_plan", "step_execution_fn"]
    assert parameters(loop) == expected, celery_changed(f"{loop.__name__}{inspect.signature(loop)}")
    expected = ["app", "plan_context", "step", "queue", "priority", "known_state"]
    assert parameters(_submit_task) == expected, celery_changed(
        f"_submit_task{inspect.signature(_submit_task)}"
    )
    # The loop polls what the submission returns with these (BoundedResult has them).
    missing = {"ready", "get", "revoke"} - set(loop.__code__.co_names)
    assert not missing, celery_changed(f"how {loop.__name__} polls a result: no {missing}")


def test_dagster_celery_builds_its_executor_from_the_config_the_bounded_one_extends():
    pytest.importorskip("dagster_celery")
    from jobs_platform.orchestration._compat import CELERY_CONFIG, CeleryExecutor

    fields = {"broker", "backend", "include", "config_source", "retries"}
    assert fields <= set(CELERY_CONFIG), celery_changed(f"CELERY_CONFIG: {sorted(CELERY_CONFIG)}")
    expected = ["self", "retries", "broker", "backend", "include", "config_source"]
    assert parameters(CeleryExecutor.__init__) == expected, celery_changed(
        f"CeleryExecutor{inspect.signature(CeleryExecutor.__init__)}"
    )


@dg.op
def nothing() -> None:
    pass


@dg.job
def empty_job():
    nothing()


class ChainedCause(Exception):
    pass


seen: list[BaseException | None] = []


@dg.failure_hook
def record_cause(context: dg.HookContext) -> None:
    from jobs_platform.orchestration._compat import failed_step_cause

    seen.append(failed_step_cause(context))


@dg.op
def fails_with_a_cause() -> None:
    try:
        raise ChainedCause("the cause")
    except ChainedCause as cause:
        raise dg.Failure(description="chained", allow_retries=False) from cause


@dg.job(hooks={record_cause})
def failing_job():
    fails_with_a_cause()


def a_tick_in(origin) -> dg.SensorEvaluationContext:
    """A sensor tick's context as the daemon builds it for a location of this origin."""
    return dg.SensorEvaluationContext(
        instance_ref=None,
        last_tick_completion_time=None,
        last_run_key=None,
        cursor=None,
        log_key=None,
        repository_name=None,
        code_location_origin=origin,
    )


def workspace_target(kind: str, **fields: object):
    """What `dagster dev -m`, `--package-name`, `-f` or `--grpc-port` is loaded as."""
    from dagster._core.workspace import load_target

    return getattr(load_target, kind)(location_name=None, **fields)


@pytest.mark.parametrize(
    ("kind", "fields", "module"),
    [
        ("ModuleTarget", {"module_name": "acme.defs"}, "acme.defs"),
        ("PackageTarget", {"package_name": "acme"}, "acme"),
        ("PythonFileTarget", {"python_file": "/src/acme/definitions.py"}, "definitions"),
    ],
)
def test_a_sensor_tick_names_the_module_of_the_location_dagster_started(kind, fields, module):
    from jobs_platform.orchestration._compat import sensor_location_module

    target = workspace_target(kind, attribute=None, working_directory=None, **fields)
    [origin] = target.create_origins()

    assert sensor_location_module(a_tick_in(origin)) == module, changed(
        f"the code location origin of a sensor tick: {origin!r}"
    )


def test_a_sensor_tick_of_a_code_server_or_of_a_test_names_no_module():
    from jobs_platform.orchestration._compat import sensor_location_module

    target = workspace_target("GrpcServerTarget", host="localhost", port=4266, socket=None)
    [origin] = target.create_origins()

    assert sensor_location_module(a_tick_in(origin)) is None
    assert sensor_location_module(dg.build_sensor_context()) is None
