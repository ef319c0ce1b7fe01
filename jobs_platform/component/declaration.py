"""What a backfill declared in YAML says: its table, partitions, source and limits.

Plain pydantic, no Dagster: `BackfillDeclaration` is checked as it is read (a key that is
no column, a query with a bind parameter the partitions cannot fill), so a mistake in a
`defs.yaml` stops the code location from loading with its path, never a run. The
component (`jobs_platform.component.components`) turns it into a `backfill_asset`.
"""

from __future__ import annotations

import re
import string
from typing import Literal, Self

import pydantic
import sqlalchemy as sa

# The bind parameters a source's query may use, and the fields a file pattern may name.
PARTITION_KEY = "partition_key"
WINDOW_START = "start"
WINDOW_END = "end"
WINDOW_FIELDS = frozenset({WINDOW_START, WINDOW_END})

ColumnType = Literal["string", "integer", "bigint", "float", "boolean", "date", "timestamp"]
TimePartitioning = Literal["hourly", "daily", "weekly", "monthly"]
FileFormat = Literal["csv", "jsonl"]

# An environment variable's name, as a shell takes it: a secret is named, never written.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Declared(pydantic.BaseModel):
    """A part of the declaration: a field it does not know is a mistake, not ignored."""

    model_config = pydantic.ConfigDict(extra="forbid")


class ColumnDeclaration(Declared):
    """One column of the target table."""

    name: str
    type: ColumnType
    nullable: bool = True
    length: int | None = pydantic.Field(default=None, description="A string's maximum length.")

    @pydantic.model_validator(mode="after")
    def _length_of_strings_only(self) -> Self:
        if self.length is not None and (self.type != "string" or self.length < 1):
            raise ValueError(f"column {self.name!r}: length is a string column's, at least 1")
        return self


class TableDeclaration(Declared):
    """The target table: created by `jobs-platform db upgrade -m …` when missing."""

    name: str
    columns: list[ColumnDeclaration]

    @pydantic.model_validator(mode="after")
    def _columns_named_once(self) -> Self:
        names = [column.name for column in self.columns]
        if not names:
            raise ValueError(f"table {self.name!r}: no columns")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"table {self.name!r}: columns named twice: {twice}")
        return self

    def column(self, name: str) -> ColumnDeclaration:
        return next(column for column in self.columns if column.name == name)


class PartitionsDeclaration(Declared):
    """Dagster's partitions, in the words of its own YAML (`type: daily`, `start_date`)."""

    type: TimePartitioning | Literal["static"]
    start_date: str | None = None
    end_date: str | None = None
    timezone: str | None = None
    partition_keys: list[str] | None = None

    @pydantic.model_validator(mode="after")
    def _what_each_type_needs(self) -> Self:
        if self.type == "static":
            if not self.partition_keys:
                raise ValueError("static partitions need partition_keys")
            if self.start_date or self.end_date or self.timezone:
                raise ValueError("static partitions take partition_keys only")
        elif self.start_date is None or self.partition_keys is not None:
            raise ValueError(f"{self.type} partitions need a start_date and no partition_keys")
        return self

    @property
    def has_window(self) -> bool:
        """Whether each partition is a time window (`:start`, `:end`), not a bare key."""
        return self.type != "static"


class SqlSource(Declared):
    """Rows of one partition from a query over a source database.

    The query's bind parameters are the partition's: `:start` and `:end` (its time window,
    timezone-aware, end excluded) and `:partition_key`. They are bound, never formatted
    into the SQL. The database's URL is read from the variable `url_env` when a step runs.
    """

    kind: Literal["sql"] = "sql"
    url_env: str = pydantic.Field(description="The variable holding the SQLAlchemy URL.")
    query: str

    @pydantic.field_validator("url_env")
    @classmethod
    def _a_variable_name(cls, name: str) -> str:
        return _variable_name(name, "url_env")

    def parameters(self) -> frozenset[str]:
        """The bind parameters the query uses (`:start` …)."""
        return frozenset(sa.text(self.query).compile().params)


class FilesSource(Declared):
    """Rows of one partition from one file under a landing folder.

    `path` is relative to the folder and names the partition's file with the fields
    `{partition_key}`, `{start}` and `{end}`, which take a date format
    (`orders/{start:%Y/%m/%d}.csv`). The folder is `root`, or the one the variable
    `root_env` names when a step runs.
    """

    kind: Literal["files"] = "files"
    root: str | None = None
    root_env: str | None = None
    path: str
    format: FileFormat | None = pydantic.Field(
        default=None, description="csv or jsonl; by default the path's suffix."
    )

    @pydantic.model_validator(mode="after")
    def _one_root_and_a_known_format(self) -> Self:
        if (self.root is None) == (self.root_env is None):
            raise ValueError("a files source takes root or root_env, one of them")
        if self.root_env is not None:
            _variable_name(self.root_env, "root_env")
        if self.file_format() is None:
            raise ValueError(f"format: csv or jsonl (the path {self.path!r} says neither)")
        return self

    def file_format(self) -> FileFormat | None:
        if self.format is not None:
            return self.format
        suffix = self.path.rsplit(".", 1)[-1].lower()
        return "csv" if suffix == "csv" else "jsonl" if suffix == "jsonl" else None

    def fields(self) -> frozenset[str]:
        """The fields the path names; a field with an attribute or an index is refused."""
        names = set()
        for _, name, _, _ in string.Formatter().parse(self.path):
            if name is None:
                continue
            if not re.fullmatch(r"\w+", name):
                raise ValueError(f"path {self.path!r}: {{{name}}} is not a plain field")
            names.add(name)
        return frozenset(names)


class BadRowsDeclaration(Declared):
    """`RejectRows`: bad rows set aside and the rest committed, within these limits."""

    max_rows: int | None = None
    max_fraction: float | None = None

    @pydantic.model_validator(mode="after")
    def _a_limit(self) -> Self:
        if self.max_rows is None and self.max_fraction is None:
            raise ValueError("bad_rows needs a limit: max_rows, max_fraction or both")
        if self.max_rows is not None and self.max_rows < 0:
            raise ValueError(f"bad_rows: max_rows must be >= 0, got {self.max_rows}")
        if self.max_fraction is not None and not 0 <= self.max_fraction <= 1:
            raise ValueError(f"bad_rows: max_fraction must be in [0, 1], got {self.max_fraction}")
        return self


class BackfillDeclaration(Declared):
    """A backfill: where its rows come from, where they go and how a partition is cut."""

    key: str = pydantic.Field(description="The asset key, as a user string: `acme/orders`.")
    table: TableDeclaration
    natural_key: list[str] = pydantic.Field(
        description="The columns each row is upserted on: the table's primary key."
    )
    partition_column: str = pydantic.Field(
        description="The column that says which partition a row belongs to."
    )
    partitions: PartitionsDeclaration
    source: SqlSource | FilesSource
    code_version: str | None = None
    bad_rows: BadRowsDeclaration | None = None
    group_name: str = "backfills"
    description: str | None = None
    owners: list[str] | None = None
    tags: dict[str, str] | None = None

    @pydantic.field_validator("key", "code_version", "partition_column", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        # Dagster renders each top-level string as a template into a Python value, so a
        # quoted `code_version: "2"` arrives as the number 2.
        return str(value) if isinstance(value, int | float) else value

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Self:
        columns = {column.name: column for column in self.table.columns}
        if not self.natural_key:
            raise ValueError("natural_key names no column")
        unknown = [name for name in self.natural_key if name not in columns]
        if unknown:
            raise ValueError(f"natural_key names no column of the table: {unknown}")
        scope = columns.get(self.partition_column)
        if scope is None:
            raise ValueError(f"partition_column {self.partition_column!r} is no column")
        if self.partitions.has_window:
            if scope.type not in ("date", "timestamp"):
                raise ValueError(
                    f"partition_column {scope.name!r}: {self.partitions.type} partitions "
                    f"need a date or timestamp column, not {scope.type}"
                )
            if scope.type == "date" and self.partitions.type == "hourly":
                raise ValueError(f"partition_column {scope.name!r}: an hour holds no date")
        elif scope.type != "string":
            raise ValueError(f"partition_column {scope.name!r}: static keys need a string column")
        usable = {PARTITION_KEY} | (WINDOW_FIELDS if self.partitions.has_window else set())
        if isinstance(self.source, SqlSource):
            unfilled = self.source.parameters() - usable
            what = "bind parameters"
        else:
            unfilled = self.source.fields() - usable
            what = "path fields"
        if unfilled:
            raise ValueError(
                f"source: {what} {sorted(unfilled)} are not the partition's "
                f"(these are: {sorted(usable)})"
            )
        return self


def _variable_name(name: str, field: str) -> str:
    if not _VARIABLE_NAME.fullmatch(name):
        raise ValueError(f"{field}: the name of an environment variable, not {name!r}")
    return name
