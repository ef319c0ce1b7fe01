"""The Dagster components: a backfill declared in YAML, and the framework once per project.

`BackfillComponent` is one `defs.yaml` per backfill (`dg scaffold defs
jobs_platform.component.BackfillComponent orders`): its asset, built with `backfill_asset`
from the declaration (`component.declaration`), reading its source (`component.sources`)
and checking each row (`component.rows`). `JobsPlatformComponent` is declared once per
project and adds what `platform_definitions` adds around a code location's backfills — the
dead letter, its sensors, the requeue job, `platform_health`, the checks, the resources
and the executor — around every `BackfillComponent` of the project. Dagster refuses two
definitions of one name, so the framework cannot come with each backfill.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import dagster as dg
import pandas as pd

from jobs_platform.component.declaration import BackfillDeclaration, SqlSource
from jobs_platform.component.rows import IncomingRows, PartitionWindow, partition_rows, target_table
from jobs_platform.component.scaffold import BackfillScaffolder, JobsPlatformScaffolder
from jobs_platform.component.sources import (
    file_digest,
    file_rows,
    partition_file,
    query_rows,
)
from jobs_platform.engine.spec import PartitionInput, RejectRows
from jobs_platform.orchestration.backfill_asset import AssetArguments, backfill_asset
from jobs_platform.orchestration.platform import framework_definitions
from jobs_platform.orchestration.resources import JobsPlatformResource

PLATFORM_TYPE = "jobs_platform.component.JobsPlatformComponent"


@dg.scaffold_with(BackfillScaffolder)
class BackfillComponent(dg.Component, dg.Resolvable, BackfillDeclaration):
    """A backfill declared in YAML: a source (a SQL query with the partition's bounds as
    bound parameters, or one file per partition), the target table and its natural key,
    the partitions, `code_version` and `bad_rows`. Declare `JobsPlatformComponent` once in
    the same project: it adds the framework around every backfill."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        if not context.component_tree.get_all_components(JobsPlatformComponent):
            raise dg.DagsterInvalidDefinitionError(
                f"backfill {self.key!r} ({context.path}): the project declares no "
                f"{PLATFORM_TYPE}, which adds the framework around its backfills once; "
                f"declare it with `dg scaffold defs {PLATFORM_TYPE} jobs_platform`"
            )
        return dg.Definitions(assets=[self.backfill])

    @functools.cached_property
    def backfill(self) -> dg.AssetsDefinition:
        """The backfill's asset; one object, shared by its own definitions and the framework's."""
        table = target_table(self)
        partitions_def = _partitions_def(self)

        def rows_of(table_, partition_key: str):
            return partition_rows(table_, self, _window(partitions_def, partition_key))

        fingerprint = None if isinstance(self.source, SqlSource) else self._file_fingerprint
        passed: AssetArguments = {"owners": self.owners} if self.owners else {}
        return backfill_asset(
            table=table,
            partitions_def=partitions_def,
            partition_scope=rows_of,
            natural_key=list(self.natural_key),
            fingerprint=fingerprint,
            key=dg.AssetKey.from_user_string(self.key),
            code_version=self.code_version,
            bad_rows=RejectRows(self.bad_rows.max_rows, self.bad_rows.max_fraction)
            if self.bad_rows is not None
            else None,
            group_name=self.group_name,
            description=self.description or f"{self.table.name}, from its declared source",
            tags=self.tags,
            kinds={"sql"} if isinstance(self.source, SqlSource) else {self._file_kind()},
            **passed,
        )(self._read)

    def _read(self, source: PartitionInput) -> Iterator[pd.DataFrame]:
        """The partition's rows from the declared source, each checked against the table."""
        window = _window(self.backfill.partitions_def, source.partition_key)
        incoming = IncomingRows(self, window, source.reject if source.rejects_rows else None)
        if isinstance(self.source, SqlSource):
            chunks = query_rows(self.source, window, source.chunk_rows)
        else:
            chunks = file_rows(self.source, partition_file(self.source, window), source.chunk_rows)
        for chunk in chunks:
            rows = incoming.conform(chunk)
            if not rows.empty:
                yield rows

    def _file_fingerprint(self, source: PartitionInput) -> str:
        assert not isinstance(self.source, SqlSource)
        window = _window(self.backfill.partitions_def, source.partition_key)
        return file_digest(partition_file(self.source, window))

    def _file_kind(self) -> str:
        assert not isinstance(self.source, SqlSource)
        return str(self.source.file_format())


@dg.scaffold_with(JobsPlatformScaffolder)
class JobsPlatformComponent(dg.Component, dg.Resolvable, dg.Model):
    """The framework's definitions, once per project, around every BackfillComponent of it:
    the dead letter and its sensors, the requeue job, platform_health, a
    no-quarantined-partitions check per backfill, the resources and the executor. Each
    setting left out comes from its JOBS_PLATFORM_* variable when a step runs."""

    location: str | None = None
    database_url_env: str | None = None
    max_attempts: int | None = None
    retry_delay_seconds: float | None = None
    lease_seconds: float | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        tree = context.component_tree
        if len(tree.get_all_components(JobsPlatformComponent)) > 1:
            raise dg.DagsterInvalidDefinitionError(
                f"{PLATFORM_TYPE} is declared more than once in the project ({context.path} is "
                "one): declare it once, it covers every backfill of the project"
            )
        backfills = [component.backfill for component in tree.get_all_components(BackfillComponent)]
        return framework_definitions(
            backfills,
            jobs_platform=JobsPlatformResource(
                database_url=dg.EnvVar(self.database_url_env) if self.database_url_env else None,
                max_attempts=self.max_attempts,
                retry_delay_seconds=self.retry_delay_seconds,
                lease_seconds=self.lease_seconds,
            ),
            location=self.location,
        )


_TIME_PARTITIONS = {
    "hourly": dg.HourlyPartitionsDefinition,
    "daily": dg.DailyPartitionsDefinition,
    "weekly": dg.WeeklyPartitionsDefinition,
    "monthly": dg.MonthlyPartitionsDefinition,
}


def _partitions_def(declaration: BackfillDeclaration) -> dg.PartitionsDefinition:
    partitions = declaration.partitions
    if partitions.type == "static":
        return dg.StaticPartitionsDefinition(list(partitions.partition_keys or ()))
    make = _TIME_PARTITIONS[partitions.type]
    return make(
        start_date=str(partitions.start_date),
        end_date=partitions.end_date,
        timezone=partitions.timezone,
    )


def _window(partitions_def: dg.PartitionsDefinition | None, key: str) -> PartitionWindow:
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        window = partitions_def.time_window_for_partition_key(key)
        return PartitionWindow(key, window.start, window.end)
    return PartitionWindow(key)
