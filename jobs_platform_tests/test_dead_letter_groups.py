"""`jobs-platform dead-letter groups`: a dead letter of many days read by cause."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from jobs_platform.cli.dead_letter import run_groups
from jobs_platform.dead_letter.triage import signature_groups
from jobs_platform_tests.commands import run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.runs import materialize
from jobs_platform_tests.store.factories import AT, SECOND, a_quarantine_entry
from orders_example.orders.assets import orders
from orders_example.orders.landing import landing_file
from orders_example.orders.seed import seed_orders

JOBS_PLATFORM = str(Path(sys.executable).with_name("jobs-platform"))
FIRST = dt.date(2024, 8, 1)
MALFORMED_DAYS = [FIRST + dt.timedelta(days=n) for n in range(5)]
CURRENCY_DAYS = [FIRST + dt.timedelta(days=n) for n in range(5, 9)]
MISSING_DAYS = [FIRST + dt.timedelta(days=n) for n in range(9, 12)]
GROUP_FIELDS = {
    "signature", "error_class", "error_type", "count", "assets", "first_failed_at",
    "last_failed_at", "sample_partitions", "sample_message", "hint", "teach", "rule",
}  # fmt: skip


def with_unknown_currency(landing: str, day: dt.date, at_line: int) -> None:
    """The day's seeded input with one order in a currency the backfill does not know."""
    path = Path(landing_file(landing, day.isoformat()))
    lines = path.read_text().splitlines()
    lines[at_line - 1] = lines[at_line - 1].replace('"currency":"', '"currency":"JP', 1)
    path.write_text("\n".join(lines) + "\n")


def quarantine_twelve_days_of_three_causes(landing: str) -> dict[str, str]:
    """5 days of malformed JSON on various lines, 4 of an unknown currency, 3 with no input;
    each day run for real (in process); returns each day's cause."""
    for size, day in zip((10, 20, 30, 40, 50), MALFORMED_DAYS, strict=True):
        seed_orders(landing, day, day, orders_per_day=size, poison_days=[day])
    seed_orders(landing, CURRENCY_DAYS[0], CURRENCY_DAYS[-1], orders_per_day=20)
    for line, day in zip((1, 7, 13, 20), CURRENCY_DAYS, strict=True):
        with_unknown_currency(landing, day, line)
    causes = {}
    for cause, days in (
        ("malformed", MALFORMED_DAYS),
        ("currency", CURRENCY_DAYS),
        ("missing", MISSING_DAYS),
    ):
        for day in days:
            assert not materialize([orders], day.isoformat()).success
            causes[day.isoformat()] = cause
    return causes


def test_twelve_quarantined_days_of_three_causes_are_three_groups_and_each_entry_names_its_own(
    pg_platform_env,
):
    causes = quarantine_twelve_days_of_three_causes(pg_platform_env["JOBS_PLATFORM_LANDING"])

    finished = run_cli([JOBS_PLATFORM, "dead-letter", "groups", "--json"], pg_platform_env)
    assert finished.returncode == 0, finished.stderr[-3000:]
    groups = json.loads(finished.stdout)

    assert [set(group) for group in groups] == [GROUP_FIELDS] * 3
    assert [(g["count"], g["assets"], g["error_class"]) for g in groups] == [
        (5, {"orders": 5}, "terminal"),
        (4, {"orders": 4}, "terminal"),
        (3, {"orders": 3}, "terminal"),
    ]
    malformed, currency, missing = groups
    assert "not valid JSON" in malformed["sample_message"]
    assert "field 'currency'" in currency["sample_message"]
    assert missing["sample_message"].startswith("no input: ")
    by_signature = {group["signature"]: group for group in groups}
    assert len(by_signature) == 3
    for group in groups:
        assert len(group["sample_partitions"]) == min(group["count"], 5)
        assert {causes[p] for p in group["sample_partitions"]} == {
            causes[group["sample_partitions"][0]]
        }
    listed = json.loads(
        run_cli([JOBS_PLATFORM, "dead-letter", "list", "--json"], pg_platform_env).stdout
    )
    assert len(listed) == 12
    signature_of_cause = {
        "malformed": malformed["signature"],
        "currency": currency["signature"],
        "missing": missing["signature"],
    }
    assert {e["partition"]: e["signature"] for e in listed} == {
        day: signature_of_cause[cause] for day, cause in causes.items()
    }
    show = [JOBS_PLATFORM, "dead-letter", "show", "orders", CURRENCY_DAYS[-1].isoformat()]
    shown = run_cli([*show, "--json"], pg_platform_env)
    assert json.loads(shown.stdout)["entry"]["signature"] == currency["signature"]


def entries_of_two_causes(env) -> None:
    with engine_from(env).begin() as connection:
        for n, (asset, message) in enumerate(
            [("orders", "line 4: not valid JSON (Expecting value, column 3)")] * 3
            + [("returns", "line 9: not valid JSON (Expecting value, column 3)")]
            + [("orders", "no input: /landing/orders/x.jsonl does not exist")]
        ):
            a_quarantine_entry(
                connection,
                asset=asset,
                partition=f"2024-09-{n + 1:02d}",
                error_class="terminal",
                error_type="InputValidationError",
                last_error=message,
                last_failed_at=AT + n * SECOND,
            )


def groups_output(capsys, *, asset=None, json_output=False, module=None) -> str:
    code = run_groups(argparse.Namespace(module=module, asset=asset, json=json_output))
    assert code == 0
    return capsys.readouterr().out


def test_each_cause_is_shown_with_the_command_that_requeues_its_group(pg_platform_env, capsys):
    entries_of_two_causes(pg_platform_env)
    groups = json.loads(groups_output(capsys, json_output=True))

    shown = groups_output(capsys, module="orders_example.definitions")

    assert "5 quarantined partition(s), 2 cause(s), largest first" in shown
    for group in groups:
        assert (
            "requeue: jobs-platform dead-letter requeue -m orders_example.definitions "
            f"--group {group['signature']}"
        ) in shown
    assert "assets: orders 3, returns 1; e.g. returns/2024-09-04, orders/2024-09-03" in shown
    assert shown.index("not valid JSON") < shown.index("no input")


def test_groups_of_one_asset_leave_the_others_out(pg_platform_env, capsys):
    entries_of_two_causes(pg_platform_env)

    (group,) = json.loads(groups_output(capsys, asset="returns", json_output=True))

    assert (group["count"], group["assets"]) == (1, {"returns": 1})
    assert group["sample_partitions"] == ["2024-09-04"]


def test_an_empty_dead_letter_says_so(pg_platform_env, capsys):
    assert "the dead letter is empty" in groups_output(capsys)
    assert json.loads(groups_output(capsys, json_output=True)) == []


def test_groups_answer_without_importing_dagster(pg_platform_env):
    entries_of_two_causes(pg_platform_env)
    probe = (
        "import sys; from jobs_platform.cli.main import main; code = main(["
        "'dead-letter', 'groups', '--json']); "
        "assert 'dagster' not in sys.modules, 'dagster imported'; sys.exit(code)"
    )

    # No code location named: the groups of the environment's warehouse.
    finished = run_cli(
        [sys.executable, "-c", probe], {**pg_platform_env, "JOBS_PLATFORM_MODULE": ""}
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    assert json.loads(finished.stdout)


def test_platform_health_shows_the_locations_causes_with_their_requeue_commands(
    pg_platform_env,
):
    import dagster as dg

    from orders_example.definitions import defs

    entries_of_two_causes(pg_platform_env)  # `returns` is no backfill of this location
    with engine_from(pg_platform_env).connect() as connection:
        orders_causes = signature_groups(connection, asset="orders")
    platform_health = defs.get_assets_def(dg.AssetKey("platform_health"))

    result = dg.materialize(
        [platform_health],
        instance=dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        raise_on_error=False,
    )

    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    table = metadata["dead_letter_groups"].value
    assert metadata["dead_letter_causes"].value == 2
    assert table.splitlines()[0].startswith("| entries | signature |")
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| 3", "| 1"]  # returns' entry left out
    for group, row in zip(orders_causes, rows, strict=True):
        assert (
            f"`jobs-platform dead-letter requeue -m orders_example.definitions "
            f"--group {group.signature}`"
        ) in row
