"""Specifications of taught classification (`dead_letter.rules`) and the hints that suggest
it (`dead_letter.hints`), on PostgreSQL and SQLite."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.dead_letter.hints import Hint
from jobs_platform.dead_letter.rules import ClassificationRules, forget, list_rules, taught_verdict
from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.dead_letter.triage import signature_groups
from jobs_platform.dead_letter.view import groups_markdown
from jobs_platform.errors import Classification, Verdict
from jobs_platform.store.schema import requeues
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import AT, a_quarantine_entry, an_attempt

ASSET = "spend"
OTHER_ASSET = "clicks"  # a backfill of another code location on the same warehouse
HEADER = "vendor export {partition} has an unreadable header"
UNKNOWN = Verdict(Classification.UNKNOWN, None, "unrecognised error")


def signature_of(partition: str = "p1", asset: str = ASSET) -> str:
    message = HEADER.format(partition=partition)
    return failure_signature("unknown", "VendorQuirk", message, asset=asset, partition=partition)


def teach(connection, classification=Classification.TERMINAL, *, assets=(ASSET,), location="a"):
    return ClassificationRules(ManualClock(AT)).teach(
        connection,
        location=location,
        assets=assets,
        signature=signature_of(),
        classification=classification,
        reason="the vendor never fixes its header",
        by="alice",
        error_class="unknown",
        error_type="VendorQuirk",
        sample_message=HEADER.format(partition="p1"),
    )


def verdict_of(connection, partition: str, verdict: Verdict = UNKNOWN, asset: str = ASSET):
    message = HEADER.format(partition=partition)
    return taught_verdict(connection, asset, partition, verdict, "VendorQuirk", message)


def test_without_a_rule_the_tables_verdict_stands(connection):
    taught = verdict_of(connection, "p7")

    assert taught.verdict is UNKNOWN
    assert taught.rule is None


def test_a_rule_decides_every_partition_of_its_cause_in_its_backfills(connection):
    teach(connection)

    taught = verdict_of(connection, "p7")  # another partition, the same cause

    assert taught.verdict.classification is Classification.TERMINAL
    assert taught.rule == signature_of()
    assert "the table said unknown" in taught.verdict.reason


def test_a_rule_does_not_decide_for_a_backfill_it_does_not_cover(connection):
    teach(connection)

    taught = verdict_of(connection, "p7", asset=OTHER_ASSET)

    assert (taught.verdict, taught.rule) == (UNKNOWN, None)


def test_a_rule_never_turns_a_lost_lease_or_an_interruption(connection):
    teach(connection)
    for classification in (Classification.LEASE_LOST, Classification.INTERRUPTED):
        verdict = Verdict(classification, None, "the framework's own account")

        assert verdict_of(connection, "p1", verdict).verdict is verdict


def test_a_retryable_rule_keeps_the_wait_the_failure_asked_for(connection):
    teach(connection, Classification.RETRYABLE)
    asked = Verdict(Classification.UNKNOWN, 30.0, "unrecognised error")

    taught = verdict_of(connection, "p2", asked)

    assert taught.verdict.classification is Classification.RETRYABLE
    assert taught.verdict.retry_after == 30.0


def test_rules_are_listed_one_per_location_and_cause_and_removed_per_location(connection):
    teach(connection, assets=(ASSET, "spend_daily"))
    teach(connection, Classification.RETRYABLE, assets=(OTHER_ASSET,), location="b")

    listed = {(r.location, r.classification, r.assets) for r in list_rules(connection)}
    assert listed == {
        ("a", "terminal", ("spend", "spend_daily")),
        ("b", "retryable", ("clicks",)),
    }
    [rule] = list_rules(connection, location="a")
    assert (rule.set_by, rule.set_at, rule.reason) == (
        "alice",
        AT,
        "the vendor never fixes its header",
    )

    assert forget(connection, "a", signature_of()) == 2
    assert [r.location for r in list_rules(connection)] == ["b"]
    assert verdict_of(connection, "p7").rule is None


def failed_identically(connection, partition: str, *, asset: str = ASSET, classes=("unknown",) * 3):
    message = HEADER.format(partition=partition)
    for error_class in classes:
        an_attempt(
            connection,
            asset=asset,
            partition=partition,
            error_class=error_class,
            error_type="VendorQuirk",
            message=message,
        )
    a_quarantine_entry(
        connection,
        asset=asset,
        partition=partition,
        error_class="unknown",
        error_type="VendorQuirk",
        last_error=message,
    )


def test_an_unknown_cause_that_spent_three_budgets_identically_looks_permanent(connection):
    for partition in ("p1", "p2", "p3"):
        failed_identically(connection, partition)

    [group] = signature_groups(connection)

    assert group.hint is Hint.LOOKS_PERMANENT
    assert group.hint.teaches is Classification.TERMINAL
    teach = f"jobs-platform dead-letter classify -m acme.defs --group {signature_of()} terminal"
    assert f"looks_permanent: `{teach}`" in groups_markdown([group], "acme.defs")  # the UI


def test_two_budgets_or_a_budget_spent_by_mixed_failures_is_no_pattern(connection):
    failed_identically(connection, "p1")
    failed_identically(connection, "p2")
    failed_identically(connection, "p3", classes=("retryable", "unknown", "unknown"))

    [group] = signature_groups(connection)

    assert group.count == 3
    assert group.hint is None


def test_a_cause_with_a_rule_shows_the_rule_and_no_hint(connection):
    for partition in ("p1", "p2", "p3"):
        failed_identically(connection, partition)
    teach(connection)

    [group] = signature_groups(connection)

    assert group.hint is None
    assert group.rule is not None
    assert group.rule.classification == "terminal"


def redriven(connection, partition: str, reason: str, *, status: str = "resolved") -> None:
    entry = a_quarantine_entry(
        connection,
        asset=ASSET,
        partition=partition,
        status=status,
        error_class="terminal",
        error_type="FileNotFoundError",
        last_error=f"no input: /landing/{partition}.json",
    )
    connection.execute(
        sa.insert(requeues).values(
            entry_id=entry, asset=ASSET, partition=partition, by="redrive", reason=reason, at=AT
        )
    )


def test_a_terminal_cause_whose_redriven_entries_succeeded_looks_transient(connection):
    redriven(connection, "p1", "input_changed")
    redriven(connection, "p2", "input_changed")
    redriven(connection, "p3", "input_changed", status="quarantined")  # the open group

    [group] = signature_groups(connection)

    assert (group.count, group.hint) == (1, Hint.LOOKS_TRANSIENT)
    assert group.hint.teaches is Classification.RETRYABLE


def test_redrives_that_followed_a_code_change_say_nothing_of_the_cause(connection):
    redriven(connection, "p1", "code_changed")
    redriven(connection, "p2", "code_changed")
    redriven(connection, "p3", "input_changed")
    redriven(connection, "p4", "input_changed", status="quarantined")

    [group] = signature_groups(connection)

    assert group.hint is None
