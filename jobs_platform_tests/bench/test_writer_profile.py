"""`python -m benchmarks.writer_profile` reports each method's wall, CPU and WAL."""

from __future__ import annotations

import json

from benchmarks.writer_profile import main


def test_writer_profile_reports_client_and_server_cpu_for_the_writer_and_both_floors(
    pg_url, capsys
):
    assert main(["--rows", "2000", "--repeats", "1", "--database-url", pg_url, "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert set(report["medians"]) == {"framework_upsert", "copy_floor_server", "copy_floor"}
    for figures in report["medians"].values():
        assert figures["wall_s"] > 0
        assert figures["server_cpu_s"] is not None  # the test server runs on this host
        assert figures["wal_mb"] > 0
    assert [len(runs) for runs in report["runs"].values()] == [1, 1, 1]
