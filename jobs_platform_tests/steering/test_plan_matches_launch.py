"""What `jobs-platform plan` says a launch will do is what the launch then does.

Real PostgreSQL; the states are made by real runs where a run makes them (done, changed
input, an older code version, a poison line, an outage), by the store's own writes where
it takes a crash or another worker (a failed partition, a live lease, attempts whose worker
died), or a time gone by (a partition held past its `max_wait`). The plan is the
CLI's (`-m`, in this process); the launch is one in-process run over the whole range, as
`dagster job execute` with the range tags runs it, and its partitions' outcomes are read
from the lifecycle events it logged.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.cli.main import main
from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.store.attempts import crash_values
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.leases import this_holder
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.schema import attempts, backfill_holds, circuits, leases, partitions
from jobs_platform_tests.cli_in_process import run_in_process
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.locations.planned import (
    defs,
    planned_events,
    planned_events_at,
    planned_gated,
    planned_gated_table,
    planned_metadata,
    planned_source,
    planned_totals,
)

LOCATION = "jobs_platform_tests.locations.planned"
ASSET = "planned_events"
ASSET_GATED = "planned_gated"
KEYS = [f"p{index:02d}" for index in range(12)]
# Long enough for the plan and the launch's first try to find it held; the launch's snooze
# then waits it out.
IN_FLIGHT_SECONDS = 8.0


@pytest.fixture
def landing(pg_platform_env) -> Path:
    folder = Path(pg_platform_env["JOBS_PLATFORM_LANDING"]) / "planned"
    folder.mkdir(parents=True)
    for key in KEYS:
        (folder / f"{key}.csv").write_text(f"1,{int(key[1:]) + 1}\n2,10\n")
    return folder


@pytest.fixture
def store(pg_platform_env) -> Iterator[Warehouse]:
    engine = engine_from(pg_platform_env)
    planned_metadata.create_all(engine)
    yield Warehouse(engine, DATABASE_CLOCK)


@pytest.fixture
def instance(pg_platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def run(
    instance: dg.DagsterInstance,
    keys: list[str],
    events: dg.AssetsDefinition = planned_events,
    selection: dg.AssetsDefinition = planned_events,
) -> dg.ExecuteInProcessResult:
    """One in-process run of `selection` over `keys` (a range, first to last)."""
    return dg.materialize(
        [planned_source, events, planned_totals],
        selection=[selection],
        instance=instance,
        resources=dict(defs.resources),
        tags={PARTITION_RANGE_START_TAG: keys[0], PARTITION_RANGE_END_TAG: keys[-1]},
        raise_on_error=False,
    )


def plan(env: dict[str, str], *args: str, asset: str = ASSET) -> dict:
    done = run_in_process(main, ["plan", "-m", LOCATION, asset, *args, "--json"], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def launched(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """What the run did first to each partition, as a plan names it."""
    first: dict[str, str] = {}
    for entry in instance.all_logs(result.run_id):
        try:
            event = json.loads(entry.user_message)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("asset") != ASSET:
            continue
        seen = _as_planned(event)
        if seen is not None:
            first.setdefault(event["partition"], seen)
    return first


def _as_planned(event: dict) -> str | None:
    match event["event"]:
        case "succeeded" if event["message"].startswith("input unchanged"):
            return "skip"  # done_unchanged: finished without reading
        case "succeeded":
            return "run"
        case "quarantined" if event["attempt"] is None:
            return "skip"  # refused by the gate: quarantined, or cooling down
        case "blocked" | "held":
            return "skip"  # blocked by its upstream; held: paused, or its input not ready
        case "retrying" if event["attempt"] is None and event.get("snooze"):
            return "skip"  # busy: another worker's lease
    return None


def test_the_plan_of_a_range_is_what_its_launch_does(
    pg_platform_env, landing, store, instance, monkeypatch
):
    monkeypatch.setenv("JOBS_PLATFORM_LOG_FORMAT", "json")
    # Upstream done for every key but p08 (blocked).
    assert run(instance, KEYS[:8], selection=planned_source).success
    assert run(instance, ["p09", "p11"], selection=planned_source).success
    # Done at code version 1 (p03), then at 2 (p01, p02, p09).
    run(instance, ["p03"], events=planned_events_at("1"))
    assert run(instance, ["p01", "p02"]).success
    assert run(instance, ["p09"]).success
    (landing / "p02.csv").write_text("1,99\n")  # its input changed since
    (landing / "p05.csv").write_text("poison\n")
    (landing / "p06.csv").write_text("outage\n")
    run(instance, ["p05", "p06"])  # a terminal entry, and one an outage spent
    (landing / "p05.csv").write_text("1,5\n")
    (landing / "p06.csv").write_text("1,6\n")
    with store.begin() as connection:
        store.partitions.set_status(connection, ASSET, "p04", PartitionStatus.FAILED)
    # p10's file has not landed: a run held it 7 hours ago (its max_wait is 6).
    (landing / "p10.csv").unlink()
    assert run(instance, ["p10"], selection=planned_source).success
    run(instance, ["p10"])
    with store.begin() as connection:
        connection.execute(
            sa.update(backfill_holds)
            .where(backfill_holds.c.partition == "p10")
            .values(since=sa.func.now() - dt.timedelta(hours=7))
        )
    # p11: its workers died three times (the budget), the last one never recorded.
    crashed_three_times(store, "p11")
    store.leases.acquire(
        ASSET, "p07", holder=this_holder(), run_id="run-elsewhere", ttl_seconds=IN_FLIGHT_SECONDS
    )

    planned = plan(pg_platform_env, "--from", "p00", "--to", "p11")
    result = run(instance, KEYS)

    rows = {row["partition"]: row for row in planned["partitions"]}
    assert {key: (row["action"], row["reason"]) for key, row in rows.items()} == {
        "p00": ("run", "missing"),
        "p01": ("skip", "done_unchanged"),
        "p02": ("run", "input_changed"),
        "p03": ("run", "code_changed"),
        "p04": ("run", "failed_due"),
        "p05": ("skip", "quarantined"),
        "p06": ("skip", "cooling_down"),
        "p07": ("skip", "in_flight"),
        "p08": ("skip", "blocked"),
        "p09": ("skip", "done_unchanged"),
        "p10": ("skip", "not_ready"),
        "p11": ("skip", "budget_spent"),
    }
    assert launched(instance, result) == {key: row["action"] for key, row in rows.items()}
    assert rows["p10"]["past_max_wait"] is True
    assert rows["p11"]["failures"] == 3
    with store.connect() as connection:
        assert active_entry(connection, ASSET, "p11") is not None  # as the plan said
        assert active_entry(connection, ASSET, "p10") is None  # held, never quarantined
    assert rows["p07"]["run_id"] == "run-elsewhere"
    assert rows["p08"]["upstream"] == "planned_source/p08"
    assert rows["p06"]["until"] > rows["p05"].get("until", "")
    assert rows["p00"]["downstream"] == ["planned_totals/p00"]
    assert rows["p01"]["downstream"] == []  # nothing recomputed, nothing made stale
    assert planned["totals"]["run"] == 4
    # p50 of the done partitions' durations and rows, times 4, over 1 run of multi_run(5).
    assert planned["estimate"]["rows"] == 4 * planned["estimate"]["p50_rows"]
    assert planned["estimate"]["runs_at_once"] == 1


def crashed_three_times(store: Warehouse, partition: str) -> None:
    """Three attempts whose worker died (two found as crashes since, the last not yet),
    their leases long gone, as the attempt history and the lease table keep them."""
    with store.begin() as connection:
        for token in (1, 2, 3):
            attempt_id, _ = store.attempts.start(
                connection,
                asset=ASSET,
                partition=partition,
                episode=1,
                run_id=f"run-{token}",
                step_retry=0,
                token=token,
                holder="a-host-gone:1",
                correlation_id=None,
                code_version="2",
            )
            if token < 3:
                connection.execute(
                    sa.update(attempts)
                    .where(attempts.c.id == attempt_id)
                    .values(crash_values(DATABASE_CLOCK.now(connection)))
                )
        # The last worker's lease, expired: the next start takes it over with token 4.
        connection.execute(
            sa.insert(leases).values(
                asset=ASSET,
                partition=partition,
                token=3,
                holder="a-host-gone:1",
                run_id="run-3",
                acquired_at=sa.func.now() - dt.timedelta(hours=2),
                expires_at=sa.func.now() - dt.timedelta(hours=1),
            )
        )


def test_a_plan_changes_nothing(pg_platform_env, landing, store, instance):
    assert run(instance, ["p00", "p01"], selection=planned_source).success
    assert run(instance, ["p00"]).success

    def snapshot() -> list:
        with store.connect() as connection:
            return [
                list(connection.execute(sa.text(f"SELECT * FROM {table} ORDER BY 1, 2")))
                for table in ("jp_partitions", "jp_attempts", "jp_leases", "jp_checkpoints")
            ]

    before = snapshot()
    first = plan(pg_platform_env, "--partition", "p00", "--partition", "p01")
    assert snapshot() == before
    assert [(row["partition"], row["reason"]) for row in first["partitions"]] == [
        ("p00", "done_unchanged"),
        ("p01", "missing"),
    ]
    assert plan(pg_platform_env, "--partition", "p00", "--partition", "p01") == first


def test_a_backfill_without_history_has_no_estimate(pg_platform_env, landing, store):
    planned = plan(pg_platform_env, "--from", "p00", "--to", "p02")
    assert planned["estimate"] == {"rows": None, "seconds": None, "history": "no history"}
    assert planned["totals"]["by_reason"] == {"blocked": 3}


def test_an_unknown_partition_is_refused_in_one_line(pg_platform_env, store):
    done = run_in_process(main, ["plan", "-m", LOCATION, ASSET, "--partition", "p99"])
    assert done.returncode == 2
    assert done.stderr.strip() == "error: planned_events has no partition p99"


def test_status_shows_a_backfills_progress_and_its_eta(pg_platform_env, landing, store, instance):
    assert run(instance, KEYS, selection=planned_source).success
    assert run(instance, KEYS[:4]).success
    with store.begin() as connection:
        store.partitions.set_status(connection, ASSET, "p04", PartitionStatus.FAILED)

    done = run_in_process(
        main, ["status", "-m", LOCATION, "--load-location", "--json"], pg_platform_env
    )

    events = json.loads(done.stdout)["assets"][ASSET]
    # 8 to go in runs of 5 (multi_run(5)): 2 runs side by side, each its p50 per partition.
    eta = round(events["duration_p50_seconds"] * 8 / 2, 1)
    assert events["progress"] == {"done": 4, "remaining": 8, "failing": 1, "eta_seconds": eta}
    assert json.loads(done.stdout)["assets"]["planned_totals"]["progress"]["eta_seconds"] is None


def test_ready_is_asked_now_not_only_what_a_run_held(pg_platform_env, landing, store, instance):
    assert run(instance, ["p00", "p01"], selection=planned_source).success
    (landing / "p01.csv").unlink()
    run(instance, ["p01"])  # held: its file had not landed
    (landing / "p01.csv").write_text("1,1\n")  # it has now
    (landing / "p00.csv").unlink()  # and p00's is gone, though no run held it yet

    planned = plan(pg_platform_env, "--partition", "p00", "--partition", "p01")

    assert [(row["partition"], row["action"], row["reason"]) for row in planned["partitions"]] == [
        ("p00", "skip", "not_ready"),
        ("p01", "run", "missing"),
    ]
    assert (planned["partitions"][0]["since"], planned["partitions"][0]["past_max_wait"]) == (
        None,
        False,
    )


def test_an_open_circuit_is_planned_as_its_launch_snoozes_it(
    pg_platform_env, landing, store, instance, monkeypatch
):
    monkeypatch.setenv("JOBS_PLATFORM_LOG_FORMAT", "json")
    keys = ["p00", "p01", "p02"]
    assert run(instance, keys, selection=planned_source).success
    (landing / "p01.csv").write_text("poison\n")
    run(instance, ["p01"])  # quarantined: the gate refuses it before any circuit
    # An outage opened the backfill's circuit; its next probe is due in 3 s.
    with store.begin() as connection:
        connection.execute(
            sa.insert(circuits).values(
                asset=ASSET,
                signature="5e1f00d5",
                error_class="retryable",
                error_type="HTTPError",
                last_error="503 Service Unavailable",
                opened_at=sa.func.now(),
                partitions=5,
                times_opened=1,
                probes_failed=0,
                snoozes=0,
                next_probe_at=sa.func.now() + dt.timedelta(seconds=3),
            )
        )

    planned = plan(pg_platform_env, "--from", "p00", "--to", "p02")
    text = run_in_process(
        main, ["plan", "-m", LOCATION, ASSET, "--from", "p00", "--to", "p02"], pg_platform_env
    )
    result = run(instance, keys)

    rows = {row["partition"]: row for row in planned["partitions"]}
    assert {key: row["reason"] for key, row in rows.items()} == {
        "p00": "circuit_open",
        "p01": "quarantined",
        "p02": "circuit_open",
    }
    assert rows["p00"]["signature"] == "5e1f00d5" and rows["p00"]["next_probe_at"]
    line = next(line for line in text.stdout.splitlines() if line.startswith("p00"))
    assert line.split()[1:4] == ["skip", "circuit_open", "cause"]
    assert "5e1f00d5; next probe 20" in line
    assert launched(instance, result) == {key: row["action"] for key, row in rows.items()}
    # The snoozed partitions came back when the probe was due: one probed, its success
    # closed the circuit, and the other went on (a plan's circuit_open is a wait, not a stop).
    with store.connect() as connection:
        status = dict(
            connection.execute(
                sa.select(partitions.c.partition, partitions.c.status).where(
                    partitions.c.asset == ASSET
                )
            ).all()
        )
        assert connection.execute(sa.select(circuits.c.closed_at)).scalar_one() is not None
    assert (status["p00"], status["p02"]) == ("done", "done")


def test_a_gated_backfill_plans_each_runs_change_as_its_gate_judges_it(
    pg_platform_env, landing, store, instance
):
    def launch(keys: list[str]) -> None:
        dg.materialize(
            [planned_gated],
            instance=instance,
            resources=dict(defs.resources),
            tags={PARTITION_RANGE_START_TAG: keys[0], PARTITION_RANGE_END_TAG: keys[-1]},
            raise_on_error=False,
        )

    def table() -> list:
        with store.connect() as connection:
            return list(connection.execute(sa.select(planned_gated_table).order_by("part", "id")))

    launch(["p00", "p01"])
    (landing / "p00.csv").write_text("1,100\n2,200\n")  # both rows changed: over the quarter
    (landing / "p01.csv").write_text("1,2\n2,10\n3,30\n")  # one row more
    before = table()

    planned = plan(pg_platform_env, "--from", "p00", "--to", "p02", asset=ASSET_GATED)

    assert table() == before  # staged, diffed and rolled back: nothing published
    changes = {row["partition"]: row["change"] for row in planned["partitions"]}
    assert {
        key: (c["inserted"], c["updated"], c["swept"], c["refused"]) for key, c in changes.items()
    } == {
        "p00": (0, 2, 0, True),
        "p01": (1, 0, 0, False),
        "p02": (2, 0, 0, False),
    }
    assert "updated" in changes["p00"]["broken"][0]
    launch(["p00", "p01", "p02"])
    with store.connect() as connection:
        status = dict(
            connection.execute(
                sa.select(partitions.c.partition, partitions.c.status).where(
                    partitions.c.asset == ASSET_GATED
                )
            ).all()
        )
        refused = active_entry(connection, ASSET_GATED, "p00")
    assert status == {"p00": "quarantined", "p01": "done", "p02": "done"}
    assert refused is not None and refused.error_class == "terminal"
