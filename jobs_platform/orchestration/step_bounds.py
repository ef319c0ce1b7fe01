"""How long a step may take, and the Celery settings that follow from it.

Shared by the executor factory and `bin/stack` (which writes the workers' config), without
Dagster: `bin/stack down` and `status` need no Dagster import.
"""

from __future__ import annotations

from jobs_platform.settings import Settings

# What a step may take beyond its attempt deadline: process start, imports, the lease TTL
# of a holder that died before it, the finalize transaction and the event upload.
STEP_OVERHEAD_SECONDS = 300.0
# After a termination request, how long the run waits for revoked tasks to report back
# before it stops waiting; a worker that died never will.
STOP_GRACE_SECONDS = 30.0


# dagster-celery's broker connection retries, kept when we add the visibility timeout
# (its config_source replaces broker_transport_options whole).
BROKER_CONNECTION_RETRIES = {
    "max_retries": 3,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


def step_deadline_seconds(settings: Settings) -> float:
    """The longest a step of one partition may legitimately take, queue wait included."""
    return settings.attempt_timeout_seconds + settings.lease_seconds + STEP_OVERHEAD_SECONDS


def celery_app_settings(settings: Settings) -> dict:
    """Celery settings the guarantees rely on; the run's app and every worker use these."""
    redelivery_after = int(step_deadline_seconds(settings))
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_track_started": True,
        # One task per worker process at a time: a prefetched step would wait behind a
        # long one on a busy worker while another worker idles.
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            **BROKER_CONNECTION_RETRIES,
            "visibility_timeout": redelivery_after,
        },
    }
