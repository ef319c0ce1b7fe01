"""`bin/bench` (`python -m benchmarks`): both benchmarks run for real and report every figure.

Their JSON shapes: docs/ARCHITECTURE.md, "Contracts".

Tiny sizes: these check the commands and their output, not the speed (docs/BENCHMARKS.md
has the figures). Each bench runs through the CLI's `main` in this process
(`cli_in_process`): the bench's own processes (webservers, daemons, `dagster asset
materialize`, the commands it times) are real, only the `bin/bench` process
around them is not started. The installed command and its exit code are checked in a real
process (`test_bench_without_a_reachable_postgresql_says_so`).
"""

from __future__ import annotations

import json
import sys

import pytest
import sqlalchemy as sa

from benchmarks.baselines import PLAIN_VARIANTS
from benchmarks.stacks import READ_AHEAD
from jobs_platform_tests.cli_in_process import bench_in_process
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.daemon_loops import fast_daemon_loops

UPSERT_METHODS = {
    "framework_upsert",
    "framework_upsert_unchanged",
    "raw_copy_append",
    "pandas_to_sql_multi",
    "executemany_upsert",
    "best_plain_script",
    "best_plain_script_unchanged",
    "copy_floor",
    "copy_floor_server",
    "copy_floor_server_binary",
    *(f"plain_script_{v}{kind}" for v in PLAIN_VARIANTS for kind in ("", "_unchanged")),
}
FIGURES = {"rows", "seconds", "rows_per_s", "min_seconds", "max_seconds", "runs_seconds"}


def bench(args: list[str], env: dict[str, str], tmp_path) -> dict:
    """`bin/bench ARGS… --json` in `tmp_path`, through `main`: its figures."""
    completed = bench_in_process([*args, "--json"], env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def bench_schemas(url: str) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as connection:
        query = (
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'jp_bench%'"
        )
        names = list(connection.execute(sa.text(query)).scalars())
    engine.dispose()
    return names


def test_bench_upsert_reports_seconds_and_rows_per_second_for_every_method(pg_url, tmp_path):
    figures = bench(
        ["upsert", "--rows", "2000", "--repeats", "1", "--warmup", "0", "--database-url", pg_url],
        {},
        tmp_path,
    )

    assert set(figures) <= {"rows", "results", "plans", "notes"}
    assert figures["rows"] == 2000
    assert set(figures["results"]) == UPSERT_METHODS
    for result in figures["results"].values():
        assert set(result) >= FIGURES
        assert len(result["runs_seconds"]) == 1
        assert result["min_seconds"] <= result["seconds"] <= result["max_seconds"]
        assert result["rows_per_s"] > 0
    assert figures["results"]["best_plain_script"]["variant"] in PLAIN_VARIANTS
    assert figures["notes"]["framework_upsert_unchanged_new_row_versions"] == 0
    # The server-side floors ran: this test's server is on this host.
    assert "copy_floor_server" not in figures["notes"]
    assert figures["results"]["copy_floor_server_binary"]["rows"] == 2000
    assert bench_schemas(pg_url) == []


def test_bench_upsert_json_carries_every_variants_plan_into_the_empty_and_the_loaded_table(
    pg_url, tmp_path
):
    figures = bench(
        ["upsert", "--rows", "2000", "--repeats", "1", "--warmup", "0", "--database-url", pg_url],
        {},
        tmp_path,
    )

    plans = figures["plans"]
    assert set(plans) == set(PLAIN_VARIANTS)
    for labelled in plans.values():
        assert set(labelled) == {"chunk_rows=2000,table_rows=0", "chunk_rows=2000,table_rows=2000"}
        assert all(plan.startswith(("Insert on", "Merge on")) for plan in labelled.values())
    # The scalar probe stays one index probe per staged row.
    assert "Index Scan" in plans["scalar_probe"]["chunk_rows=2000,table_rows=2000"]


def test_bench_merge_reports_each_changed_fraction_with_the_row_versions_it_created(
    pg_url, tmp_path
):
    figures = bench(
        [
            "merge",
            "--rows",
            "1000",
            "--changed",
            "0.01",
            "0.5",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--database-url",
            pg_url,
        ],
        {},
        tmp_path,
    )

    assert figures["rows"] == 1000
    rounds = figures["results"]
    assert [r["changed_fraction"] for r in rounds] == [0.01, 0.5]
    assert [r["changed_rows"] for r in rounds] == [10, 500]
    # Only the changed rows get new versions, from the writer and the baseline alike.
    assert [r["framework_new_row_versions"] for r in rounds] == [10, 500]
    assert [r["best_plain_script_new_row_versions"] for r in rounds] == [10, 500]
    assert all(r["framework_seconds"] > 0 and r["best_plain_script_seconds"] > 0 for r in rounds)
    for r in rounds:  # every variant of the plain script, each as exact as the writer
        assert set(r["methods"]) == {"framework", *(f"plain_script_{v}" for v in PLAIN_VARIANTS)}
        assert {m["new_row_versions"] for m in r["methods"].values()} == {r["changed_rows"]}
        assert all(len(m["runs_seconds"]) == 1 for m in r["methods"].values())
    # Every variant's plan, per changed fraction, against the populated table.
    assert set(figures["plans"]) == set(PLAIN_VARIANTS)
    for labelled in figures["plans"].values():
        assert set(labelled) == {
            "chunk_rows=1000,table_rows=1000,changed=0.01",
            "chunk_rows=1000,table_rows=1000,changed=0.5",
        }
    assert bench_schemas(pg_url) == []


def test_bench_backfill_reports_both_times_and_their_ratio(pg_url, tmp_path):
    env = {"JOBS_PLATFORM_DATABASE_URL": pg_url}

    figures = bench(
        [
            "backfill",
            "--partitions",
            "2",
            "--rows-per-partition",
            "200",
            "--repeats",
            "2",
            "--warmup",
            "0",
        ],
        env,
        tmp_path,
    )

    assert set(figures) <= {
        "dagster_backfill_seconds",
        "plain_script_seconds",
        "ratio",
        "plans",
        "notes",
    }
    assert set(figures["plans"]) == set(PLAIN_VARIANTS)
    assert set(figures["plans"]["on_conflict"]) == {
        "chunk_rows=200,table_rows=0",
        "chunk_rows=200,table_rows=400",
    }
    for field in ("dagster_backfill_seconds", "plain_script_seconds", "ratio"):
        assert figures[field] > 0
    notes = figures["notes"]
    assert notes["dagster_rerun_unchanged_new_row_versions"] == 0
    # Alternated rounds after a warm-up: each method's runs, the median between min and max.
    for method in ("dagster_backfill", "plain_script"):
        assert len(notes[method]["runs_seconds"]) == 2
        assert notes[method]["min_seconds"] <= notes[method]["seconds"]
        assert notes[method]["seconds"] <= notes[method]["max_seconds"]
    assert bench_schemas(pg_url) == []


def test_bench_without_a_reachable_postgresql_says_so(tmp_path):
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"

    completed = run_cli(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "upsert",
            "--rows",
            "10",
            "--database-url",
            unreachable,
        ],
        {},
        cwd=tmp_path,
    )

    assert completed.returncode == 2
    assert "cannot connect to PostgreSQL" in completed.stderr


@pytest.mark.slow
def test_bench_backfill_via_daemon_launches_through_graphql_and_reports_the_ui_path(
    pg_url, tmp_path
):
    # The daemon loops every second (`daemon_loops`), not every 30 s: the figures stay
    # consistent, only the daemon's idle waits before and after the runs are shorter.
    env = fast_daemon_loops({"JOBS_PLATFORM_DATABASE_URL": pg_url})

    # Two UI backfills (the first and its unchanged re-run), each one run (orders and
    # daily_revenue are one chain).
    figures = bench(
        ["backfill", "--partitions", "2", "--rows-per-partition", "50", "--via", "daemon"],
        env,
        tmp_path,
    )

    for field in ("dagster_backfill_seconds", "plain_script_seconds", "ratio"):
        assert figures[field] > 0
    assert figures["via"] == "daemon"
    # orders and daily_revenue are one chain, so one run holds both days of both.
    assert figures["runs_created"] >= 1
    assert figures["end_to_end_seconds"] >= figures["first_run_created_to_last_run_ended_seconds"]
    assert figures["wait_for_first_run_seconds"] >= 0
    assert figures["ratio_end_to_end"] >= figures["ratio"]
    rerun = figures["rerun_unchanged"]
    assert rerun["new_row_versions"] == 0 and rerun["runs_created"] >= 1
    assert figures["peak_rss_mib"]["daemon_step"] > 0
    assert bench_schemas(pg_url) == []


@pytest.mark.slow
def test_bench_backfill_hourly_via_daemon_reports_the_ui_path_against_the_dagster_floor(
    pg_url, tmp_path
):
    # Two UI backfills, one round: the framework's, then the Dagster floor's, each on its
    # own webserver and daemon, looping every second (`daemon_loops`): only the daemon's
    # idle waits before and after the runs are shorter. On SQLite instances, as `dagster
    # dev` has them (no scratch database and Dagster schema to build per stack); the
    # default PostgreSQL storage is the in-process test's, so both storages run.
    figures = bench(
        ["backfill", "--shape", "hourly", "--partitions", "2", "--rows-per-partition", "3",
         "--via", "daemon", "--policy", "multi_run:24", "--repeats", "1", "--warmup", "0",
         "--no-rerun", "--dagster-storage", "sqlite", "--database-url", pg_url],
        fast_daemon_loops({}),
        tmp_path,
    )  # fmt: skip

    ui = figures["ui"]["multi_run:24"]
    floor = ui["dagster_floor"]
    windows = []
    for side in (ui, floor):
        # Every row landed (counted in the warehouse) and every partition materialized
        # once, in one run (the policy's 24 hours hold both).
        assert side["rows_stored"] == 6
        assert side["breakdown"]["partitions_materialized"] == 2
        assert side["runs_created"] == side["breakdown"]["runs"] == 1
        windows.append(side["first_run_created_to_last_run_ended_seconds"])
        assert side["run_window"]["runs_seconds"] == [windows[-1]] and windows[-1] > 0
    # The floor is plain Dagster: no lifecycle lines and no asset check, two log lines a run.
    floor_events = floor["breakdown"]["dagster_events_per_partition"]
    assert floor_events["LOG"] == 1 and "ASSET_CHECK_EVALUATION" not in floor_events
    assert ui["breakdown"]["dagster_events_per_partition"]["ASSET_CHECK_EVALUATION"] == 0.5
    assert ui["framework_to_floor_ratio"] == round(windows[0] / windows[1], 3)
    assert floor["ratio_to_best_plain_script"] > 0
    # The framework's window a partition = the floor's (Dagster's own) + the framework's.
    split = ui["per_partition_split"]
    assert abs(split["window_ms"] - split["dagster_floor_ms"] - split["framework_own_ms"]) < 0.05
    assert set(split["phases_ms_summed_over_runs"]) == set(
        ui["breakdown"]["seconds_summed_over_runs"]
    )
    assert bench_schemas(pg_url) == []


def test_bench_status_times_status_dead_letter_list_and_platform_health(pg_url, tmp_path):
    figures = bench(
        ["status", "--partitions", "200", "--quarantined", "20", "--repeats", "1",
         "--database-url", pg_url],
        {},
        tmp_path,
    )  # fmt: skip

    assert figures["partitions_per_asset"] == 200 and figures["quarantine_entries"] == 20
    assert set(figures["results"]) == {
        "status_cli_catalog",
        "status_cli_load_location",
        "dead_letter_list_cli",
        "status_in_process",
        "dead_letter_list_in_process",
        "platform_health_materialize_in_process",
    }
    for result in figures["results"].values():
        assert result["min_seconds"] > 0 and len(result["seconds"]) == 1
    assert figures["results"]["status_cli_load_location"]["ratio_to_first"] > 0
    assert figures["notes"]["dead_letter_entries_listed"] == 20
    assert bench_schemas(pg_url) == []


# The redrive tick's `get_sensor_def` warns, once per process, of a Dagster 1.11 change
# that does not concern it; as a `bin/bench` process, its stderr held it.
@pytest.mark.filterwarnings("ignore:Starting in dagster 1.11, get_sensor_def:UserWarning")
def test_bench_scale_times_the_four_on_an_hourly_backfill_it_seeds(pg_url, tmp_path):
    figures = bench(
        ["scale", "--partitions", "300", "--entries", "30", "--repeats", "1", "--warmup", "0",
         "--database-url", pg_url],
        {},
        tmp_path,
    )  # fmt: skip

    assert (figures["partitions"], figures["entries"], figures["asset"]) == (300, 30, "events")
    assert set(figures["results"]) == set(figures["met"]) == {
        "status_cli", "metrics_scrape_cold", "dead_letter_groups_cli", "redrive_tick",
    }  # fmt: skip
    for result in figures["results"].values():
        assert set(result) >= FIGURES and len(result["runs_seconds"]) == 1
    # Status counted the seeded backfill whole, from its catalog's window: every
    # partition has a state (one in 50 failed, the last 30 quarantined).
    said = figures["notes"]["status_figures"]
    assert (said["done"] + said["failed"], said["quarantined"], said["missing"]) == (270, 30, 0)
    # The redrive sensor found nothing to release: every entry current.
    assert figures["notes"]["redrive_ticks_said"] == [
        "no dead-letter entry whose cause is gone, none newly out of redrives"
    ]
    assert set(figures["notes"]["seed_seconds"]) == {"copy", "analyze", "catalog"}
    assert bench_schemas(pg_url) == []


def test_bench_memory_reports_the_peak_rss_of_one_partition(pg_url, tmp_path):
    figures = bench(
        ["memory", "--rows", "3000", "--chunk-rows", "1000", "--database-url", pg_url],
        {},
        tmp_path,
    )

    assert (figures["rows"], figures["chunk_rows"]) == (3000, 1000)
    assert figures["peak_rss_mib"] > 0 and figures["attempt_duration_seconds"] > 0
    assert bench_schemas(pg_url) == []


def test_bench_triage_times_the_grouping_in_process_and_as_a_command(pg_url, tmp_path):
    figures = bench(
        ["triage", "--entries", "300", "--repeats", "2", "--database-url", pg_url], {}, tmp_path
    )

    assert figures["entries"] == 300 and figures["notes"]["resolved_entries"] == 60
    # Every cause of the seeded mix is one group, however its messages vary.
    assert figures["groups"] == figures["causes_seeded"] == figures["notes"]["open_causes_metric"]
    assert set(figures["results"]) == {"signature_groups_in_process", "dead_letter_groups_cli"}
    for result in figures["results"].values():
        assert len(result["seconds"]) == 2
        assert 0 < result["min_seconds"] <= result["median_seconds"] <= result["max_seconds"]
    assert bench_schemas(pg_url) == []


def test_bench_staging_compares_the_ways_psycopg_copies_a_frame(pg_url, tmp_path):
    figures = bench(
        ["staging", "--rows", "500", "--repeats", "1", "--warmup", "0", "--database-url", pg_url],
        {},
        tmp_path,
    )

    assert set(figures["results"]) == {
        "text_write_row",
        "binary_numpy",
        "binary_python",
        "csv_to_csv",
        "prepared_text",
    }
    assert figures["fastest"] in figures["results"]
    assert figures["plain_script_stages_with"] in figures["results"]
    for result in figures["results"].values():
        assert set(result) >= FIGURES | {"cpu_seconds"}
        assert result["rows"] == 500 and len(result["runs_seconds"]) == 1


@pytest.mark.slow
def test_bench_rerun_times_a_corrected_day_through_dagster_and_the_plain_scripts(pg_url, tmp_path):
    raw = tmp_path / "step.raw"
    figures = bench(
        [
            "rerun", "--rows", "300", "--repeats", "1", "--warmup", "0",
            "--profile", str(raw), "--database-url", pg_url,
        ],
        {},
        tmp_path,
    )  # fmt: skip

    assert figures["changed_rows"] == 30
    assert set(figures["methods"]) == {"framework", *(f"plain_script_{v}" for v in PLAIN_VARIANTS)}
    assert figures["best_plain_script"] in PLAIN_VARIANTS
    assert figures["ratio"] > 0
    assert set(figures["plans"]) == set(PLAIN_VARIANTS)
    split = figures["framework_seconds_split_median"]
    assert split["step"] > 0 and split["attempt_recorded_by_the_framework"] > 0
    # The profiled round: py-spy caught the attempt, and its phases add up to it.
    phases = dict(figures["attempt_profile"]["attempt_seconds_by_phase"])
    attempt = phases.pop("attempt")
    phases.pop(READ_AHEAD)  # the reader's own thread, overlapped: not in the attempt's
    assert raw.stat().st_size > 0 and attempt > 0
    assert sum(phases.values()) == pytest.approx(attempt, abs=0.001 * len(phases))
    assert bench_schemas(pg_url) == []


def test_bench_backfill_hourly_in_process_reports_the_plain_scripts_and_the_profile(
    pg_url, tmp_path
):
    profile = tmp_path / "step.prof"

    # On the default Dagster storage, a scratch PostgreSQL database (the UI-path test
    # takes SQLite).
    figures = bench(
        ["backfill", "--shape", "hourly", "--partitions", "3", "--rows-per-partition", "5",
         "--via", "process", "--profile", str(profile),
         "--repeats", "1", "--warmup", "0", "--database-url", pg_url],
        {},
        tmp_path,
    )  # fmt: skip

    assert figures["shape"] == "hourly" and figures["rows"] == 15
    assert figures["seed"]["files"] == 3 and figures["seed"]["bytes"] > 0
    plain = figures["plain_script"]
    assert plain["best"] in ("per_hour", "per_day", "whole_range")
    for batch in ("per_hour", "per_day", "whole_range"):
        assert plain[batch]["rows"] == 15 and len(plain[batch]["runs_seconds"]) == 1
    assert set(figures["plain_script_plans"]) == set(PLAIN_VARIANTS)
    assert "batch=per_hour,chunk_rows=5,table_rows=15" in figures["plain_script_plans"]["merge"]
    in_process = figures["in_process"]
    assert in_process["seconds"] > 0 and in_process["ratio"] > 0
    assert profile.is_file()
    assert in_process["profile"]["  one attempt, whole"]["seconds"] > 0
    # Every partition materialized once, and the framework's transactions counted.
    assert in_process["dagster_events_per_partition"]["ASSET_MATERIALIZATION"] == 1
    assert in_process["statements_per_partition"]["postgresql_commits"] >= 1
    assert figures["ui"] == {}
    assert bench_schemas(pg_url) == []
