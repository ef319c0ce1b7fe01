"""`python -m benchmarks.merge_count`: the writer with and without its inserted/updated count,
against the plain variant that wins at the fraction."""

from __future__ import annotations

import json

from benchmarks.merge_count import main


def test_merge_count_times_the_writer_with_and_without_its_count_writing_the_same_rows(
    pg_url, capsys
):
    arguments = ["--rows", "2000", "--changed", "0.1", "--changed", "1.0", "--repeats", "1"]
    assert main([*arguments, "--database-url", pg_url, "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    few, every = report["results"]
    assert set(few["methods"]) == {
        "framework", "framework_without_count", "plain_script_scalar_probe"
    }  # fmt: skip
    assert set(every["methods"]) == {
        "framework", "framework_without_count", "plain_script_on_conflict"
    }  # fmt: skip
    # Without its count the writer writes the same rows: a new version of each changed row.
    assert set(few["new_row_versions"].values()) == {200}
    assert set(every["new_row_versions"].values()) == {2000}
    for result in report["results"]:
        assert result["framework_over_without_count"] > 0
