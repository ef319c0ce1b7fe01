"""Steering a backfill as a whole: pause and resume, readiness, and what they hold back.

A person steers a backfill rather than a partition: pauses it for a maintenance window,
or declares that a partition's input must be ready before it is tried. Each decision is
kept in the warehouse, so the attempt gate reads it on every host and launch path, and
none spends a partition's attempt budget.

The pure part is plain Python over SQLAlchemy, with no Dagster: `pauses` (which backfills
are paused, by whom), `holds` (the partitions a run held back, and why) and `readiness`
(when a held partition is launched again, and when it has waited too long). The Dagster
part translates: `holds_sensor` launches the held partitions again through the run queue.

Nothing is imported here: `jobs-platform backfill pause` loads no Dagster.
"""
