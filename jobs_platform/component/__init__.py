"""Backfills declared in YAML: the Dagster components of jobs_platform.

`dg list components` lists them (the `dagster_dg_cli.registry_modules` entry point names
this module): `BackfillComponent`, one `defs.yaml` per backfill, and
`JobsPlatformComponent`, declared once per project, which adds the framework around all of
them (docs/component.md). The pure part has no Dagster: `declaration` (what the YAML
says), `rows` (the table, and each row checked against it) and `sources` (the query or the
file). The Dagster part: `components` and `scaffold` (what `dg scaffold defs` writes).
"""

from jobs_platform.component.components import BackfillComponent, JobsPlatformComponent

__all__ = ["BackfillComponent", "JobsPlatformComponent"]
