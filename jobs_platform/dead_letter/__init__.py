"""The dead letter: partitions stopped for a person, read by cause, requeued and redriven.

Quarantining a partition creates an entry in the dead letter. The pure part is plain
Python over SQLAlchemy, with no Dagster: `entries` (the entries' states and SQL),
`signature` (one hash per cause), `triage` (the entries grouped by cause), `redrive` (which
entries release themselves, and why), `selection` (which entries a person requeues) and
`view` (how the CLI and the UI show them). The Dagster part translates: `asset` (the
`dead_letter` asset and its sensor), `checks` (`no_quarantined_partitions`),
`redrive_sensor`, `requeue` (the launcher of requeued entries' runs) and `requeue_plan`.

Nothing is imported here: `jobs-platform dead-letter list` loads no Dagster.
"""
