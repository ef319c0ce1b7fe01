"""How long a step may take, beyond its attempt: shared by the executor factory and Celery's."""

# What a step may take beyond its attempt deadline: process start, imports, the lease TTL
# of a holder that died before it, the finalize transaction and the event upload.
STEP_OVERHEAD_SECONDS = 300.0
# After a termination request, how long the run waits for revoked tasks to report back
# before it stops waiting; a worker that died never will.
STOP_GRACE_SECONDS = 30.0
