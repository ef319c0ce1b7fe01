"""Steering a backfill as a whole: pause, holds, readiness, the circuit breaker, the plan.

A person steers a backfill rather than a partition: pauses it for a maintenance window,
or declares that a partition's input must be ready before it is tried. Each decision is
kept in the warehouse, so the attempt gate reads it on every host and launch path, and
none spends a partition's attempt budget.

The pure part is plain Python over SQLAlchemy, with no Dagster: `pauses` (which backfills
are paused, by whom), `holds` (the partitions a run held back, and why) and `readiness`
(when a held partition is launched again, and when it has waited too long). The Dagster
part translates: `holds_sensor` launches the held partitions again through the run queue.

The circuit breaker (`circuit_rule`, pure; `circuits`, its SQL; `circuit_report`, its reads)
snoozes a backfill's partitions for free while one cause fails many of them, and lets one
probe through at a time.

`jobs-platform plan` says what a launch would do to each partition of a range, and why:
`plan_facts` reads the warehouse once per table for the range, `plan_budget` the budget a
launch's start would find spent, `plan_holds` the pause and the partitions not ready,
`plan_readiness` asks `ready=` about them, `plan_circuits` reads the open circuits; `plan`
decides each row (`plan_row`) with the engine's, the redrive's and the breaker's own
rules, and
`estimate` gives rows and time from the backfill's history (`status`'s ETA too).
`plan_location` asks the loaded code location what only it knows (keys, partition
mappings), and `plan_inputs` the backfill's own functions with its resources (the input's
fingerprint now, `ready=`).

Nothing is imported here: `jobs-platform backfill pause` loads no Dagster.
"""
