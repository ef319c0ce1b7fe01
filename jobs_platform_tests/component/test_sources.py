"""A declared source: the query bound to the partition, or the partition's file."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobs_platform.component.declaration import FilesSource, SqlSource
from jobs_platform.component.sources import file_rows, partition_file, query_rows
from jobs_platform.errors import DeploymentError, InputValidationError, TerminalError
from jobs_platform_tests.component.test_rows import DAY


def test_the_query_gets_the_partitions_window_bound_and_streams_in_chunks(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE raw (id int, day text)"))
        connection.execute(
            sa.text("INSERT INTO raw VALUES (:id, :day)"),
            [{"id": n, "day": "2024-01-01" if n < 5 else "2024-01-02"} for n in range(7)],
        )
    engine.dispose()
    monkeypatch.setenv("RAW_URL", url)
    source = SqlSource(
        url_env="RAW_URL", query="SELECT id FROM raw WHERE day = :partition_key ORDER BY id"
    )

    chunks = list(query_rows(source, DAY, chunk_rows=2))

    assert [list(chunk["id"]) for chunk in chunks] == [[0, 1], [2, 3], [4]]


def test_an_unset_url_variable_is_a_deployment_error_naming_the_variable(monkeypatch):
    monkeypatch.delenv("RAW_URL", raising=False)
    with pytest.raises(DeploymentError, match="the variable RAW_URL is not set"):
        next(query_rows(SqlSource(url_env="RAW_URL", query="SELECT 1"), DAY, chunk_rows=2))


def test_a_url_that_is_no_url_is_refused_without_showing_it(monkeypatch):
    monkeypatch.setenv("RAW_URL", "not a url, and secret")
    with pytest.raises(DeploymentError) as refused:
        next(query_rows(SqlSource(url_env="RAW_URL", query="SELECT 1"), DAY, chunk_rows=2))
    assert "secret" not in str(refused.value)


def test_the_partitions_file_is_its_pattern_filled_in(tmp_path):
    source = FilesSource(root=str(tmp_path), path="orders/{start:%Y/%m/%d}.csv")
    assert partition_file(source, DAY) == tmp_path / "orders" / "2024" / "01" / "01.csv"


def test_a_partition_key_cannot_reach_outside_the_landing_folder(tmp_path):
    source = FilesSource(root=str(tmp_path / "landing"), path="{partition_key}.jsonl")
    with pytest.raises(TerminalError, match="is outside"):
        partition_file(source, type(DAY)("../../etc/passwd"))


def test_a_json_line_that_is_no_object_stops_the_partition_naming_its_line(tmp_path):
    path = tmp_path / "day.jsonl"
    path.write_text('{"id": 1}\n\n[2]\n')
    source = FilesSource(root=str(tmp_path), path="day.jsonl")
    with pytest.raises(InputValidationError, match="line 3: must be a JSON object"):
        list(file_rows(source, path, chunk_rows=10))


def test_a_missing_file_is_no_input(tmp_path):
    source = FilesSource(root=str(tmp_path), path="{partition_key}.csv")
    with pytest.raises(TerminalError, match=r"no input: .* does not exist"):
        list(file_rows(source, partition_file(source, DAY), chunk_rows=10))
