"""What `dg scaffold defs` writes for the components: a `defs.yaml` to fill in.

The backfill's is a whole declaration whose values are examples (a SQL source by default;
`--json-params '{"source": "files"}'` for files), so the project loads as soon as it is
written and each field is shown where it goes. Comments say what a field means; the
templates are text, since a YAML dumper drops comments.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import dagster as dg
import pydantic

_SQL_SOURCE = """\
  source:
    kind: sql
    # The variable that holds the source database's SQLAlchemy URL, read when a step runs:
    # a secret is named here, never written.
    url_env: {variable}
    # :start and :end are the partition's time window (end excluded), :partition_key its
    # key: bound parameters, never formatted into the SQL.
    query: |
      SELECT id, amount_cents, created_at
      FROM {name}
      WHERE created_at >= :start AND created_at < :end
"""

_FILES_SOURCE = """\
  source:
    kind: files
    # The landing folder: `root: /data/landing`, or the variable that names it.
    root_env: {variable}
    # One file per partition under it; {{partition_key}}, {{start}} and {{end}} take the
    # partition's (`{{start:%Y/%m/%d}}`). CSV with a header, or JSON lines.
    path: {name}/{{partition_key}}.csv
"""

_BACKFILL = """\
type: {type_name}

attributes:
  # The asset key, as a user string (`acme/{name}`): the backfill's name everywhere.
  key: {name}
  # Created by `jobs-platform db upgrade -m MODULE` when missing, never altered.
  table:
    name: {name}
    columns:
      - {{name: id, type: bigint}}
      - {{name: amount_cents, type: bigint, nullable: false}}
      - {{name: created_at, type: timestamp}}
  # Each row is upserted on these columns (the table's primary key).
  natural_key: [id]
  # The rows a partition owns: a re-run sweeps those of them no longer in its input.
  partition_column: created_at
  partitions:
    type: daily
    start_date: "2024-01-01"
{source}\
  # Bump it after changing the source or the table: done partitions are recomputed.
  code_version: "1"
  # Without it one bad row quarantines its partition; with it bad rows are set aside.
  # bad_rows: {{max_rows: 100, max_fraction: 0.01}}
"""

_PLATFORM = """\
type: {type_name}

# The framework around every backfill of this project, declared once. Each setting left
# out comes from its JOBS_PLATFORM_* variable when a step runs.
attributes: {{}}
  # database_url_env: JOBS_PLATFORM_DATABASE_URL  # the variable of the warehouse's URL
  # max_attempts: 5             # the attempt budget of a partition, across runs
  # retry_delay_seconds: 2      # the exponential backoff's base delay
  # location: acme              # prefixes the framework's names in a shared workspace
"""


class BackfillScaffoldParams(pydantic.BaseModel):
    """`dg scaffold defs … --json-params '{"source": "files"}'`."""

    source: Literal["sql", "files"] = "sql"


class BackfillScaffolder(dg.Scaffolder[BackfillScaffoldParams]):
    """A backfill's `defs.yaml`, named for its folder."""

    @classmethod
    def get_scaffold_params(cls) -> type[BackfillScaffoldParams]:
        return BackfillScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[BackfillScaffoldParams]) -> None:
        # The folder's name, as an asset key and a variable may spell it.
        name = re.sub(r"\W", "_", request.target_path.name)
        variable = f"{name.upper()}_{'SOURCE_URL' if request.params.source == 'sql' else 'LANDING'}"
        template = _SQL_SOURCE if request.params.source == "sql" else _FILES_SOURCE
        text = _BACKFILL.format(
            type_name=request.type_name,
            name=name,
            source=template.format(name=name, variable=variable),
        )
        _write(request, text)


class JobsPlatformScaffolder(dg.Scaffolder):
    """The framework's `defs.yaml`: no setting needed, each one shown."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        _write(request, _PLATFORM.format(type_name=request.type_name))


def _write(request: dg.ScaffoldRequest[Any], text: str) -> None:
    if request.scaffold_format != "yaml":
        raise ValueError("the jobs_platform components are declared in YAML (--format yaml)")
    request.target_path.mkdir(parents=True, exist_ok=True)
    (request.target_path / "defs.yaml").write_text(text)
