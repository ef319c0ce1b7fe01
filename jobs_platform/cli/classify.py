"""`jobs-platform dead-letter classify -m MODULE --group SIG (terminal|retryable) [--reason
TEXT]`, `dead-letter classify -m MODULE --group SIG --remove` and `dead-letter rules [-m
MODULE] [--json]`: classification a person teaches (`dead_letter.rules`).

A rule is set in a code location: it covers the backfills the location serves (loaded
from `-m`, as `dead-letter requeue` loads them), and no other location's, even on a shared
warehouse. Setting it again after the location gained a backfill covers that one too. The
person is the OS user who ran the command.

Exit status: 0 when the rule was set, removed or listed; 2 when the signature matches no
entry or rule of the location, matches several (an ambiguous prefix), names a cause a rule
cannot change (a crash, a lost lease, an interruption), or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import getpass
import json
import re

import sqlalchemy as sa

from jobs_platform.cli.warehouse import (
    add_reading_command,
    command_settings,
    open_store,
    open_warehouse,
)
from jobs_platform.dead_letter.rules import (
    RULED_CLASSES,
    TAUGHT_CLASSES,
    ClassificationRules,
    forget,
    list_rules,
    signatures_starting,
)
from jobs_platform.dead_letter.signature import SIGNATURE_LENGTH, failure_signature
from jobs_platform.dead_letter.triage import SignatureGroup
from jobs_platform.dead_letter.view import group_teach_command, one_line, plain, rule_summary
from jobs_platform.errors import Classification
from jobs_platform.location import (
    add_module_option,
    code_location_module,
    load_definitions,
    location_settings,
    named_location,
)
from jobs_platform.store.schema import EntryStatus, quarantine
from jobs_platform.suggested_commands import suggested_command

_SIGNATURE_PREFIX = re.compile(rf"[0-9a-f]{{1,{SIGNATURE_LENGTH}}}")


def register(actions) -> None:
    """`dead-letter classify` and `dead-letter rules`."""
    classify = actions.add_parser(
        "classify",
        help="teach the class of one cause (a signature of `dead-letter groups`) in a code "
        "location: terminal (quarantined at once) or retryable; --remove restores the "
        "built-in table's",
    )
    add_module_option(classify)
    classify.add_argument(
        "--group",
        metavar="SIGNATURE",
        required=True,
        help="the cause: a signature from `dead-letter groups` (or a prefix naming one)",
    )
    classify.add_argument(
        "classification",
        nargs="?",
        choices=[str(taught) for taught in TAUGHT_CLASSES],
        help="the class its failures are recorded with from now on",
    )
    classify.add_argument("--reason", metavar="TEXT", help="why, for whoever reads the rule")
    classify.add_argument(
        "--remove", action="store_true", help="remove the rule: the table's verdict applies"
    )
    classify.set_defaults(handler=run_classify, parser=classify)
    add_reading_command(
        actions,
        "rules",
        "the classification rules people taught: the warehouse's, or one code location's (-m)",
        run_rules,
    )


def run_classify(args: argparse.Namespace) -> int:
    """Set or remove the location's rule for one cause."""
    if args.remove == (args.classification is not None):
        args.parser.error("give the class (terminal or retryable), or --remove")
    if args.remove and args.reason is not None:
        args.parser.error("--reason explains a rule being set, not one removed")
    prefix = args.group.strip().lower()
    if not _SIGNATURE_PREFIX.fullmatch(prefix):
        args.parser.error(
            f"--group {args.group!r}: a signature is {SIGNATURE_LENGTH} hexadecimal "
            "characters, as `dead-letter groups` prints it (or a prefix of one)"
        )
    from jobs_platform.orchestration.selections import served_backfills

    module = code_location_module(args.module)
    definitions = load_definitions(args.module)
    served = served_backfills(definitions.get_repository_def())
    if not served:
        raise LookupError(f"code location {module} serves no backfill: no rule to set")
    store = open_store(location_settings(definitions))
    with store.begin() as connection:
        signature = _one_signature(connection, prefix, served, module)
        if args.remove:
            return _remove(connection, module, signature)
        return _teach(
            connection,
            ClassificationRules(store.clock),
            args,
            module,
            served,
            signature,
        )


def run_rules(args: argparse.Namespace) -> int:
    """The rules, the latest set first: the location's (-m), or the warehouse's."""
    module = named_location(args.module)
    with open_warehouse(command_settings(args.module)).connect() as connection:
        rules = list_rules(connection, location=module)
    if args.json:
        print(json.dumps([rule_summary(rule) for rule in rules], indent=2))
        return 0
    if not rules:
        where = f" in code location {module}" if module else ""
        print(f"no classification rule{where}: the built-in table classifies every failure")
        return 0
    for rule in rules:
        print(
            f"{rule.signature}  {rule.classification:<9}  (table: {rule.error_class}"
            f" {rule.error_type or ''})  location {rule.location}\n"
            f"    set by {rule.set_by} at {plain(rule.set_at)}"
            f"{f': {one_line(rule.reason, 200)}' if rule.reason else ''}\n"
            f"    backfills: {', '.join(rule.assets)}\n"
            f"    e.g. {one_line(rule.sample_message, 200)}"
        )
    print(f"\n{len(rules)} rule(s); remove one with: {_remove_command('SIGNATURE', module)}")
    return 0


def taught_line(group: SignatureGroup, module: str | None) -> str | None:
    """What `dead-letter groups` says of a cause's rule, or of the hint to teach one."""
    if group.rule is not None:
        rule = group.rule
        return (
            f"rule: {rule.classification}, set by {rule.set_by} at {plain(rule.set_at)} in "
            f"{rule.location}{f' ({one_line(rule.reason, 120)})' if rule.reason else ''}"
        )
    teach = group_teach_command(group, module)
    if teach is None:
        return None
    return f"{group.hint}: teach it with {teach}"


def _one_signature(connection: sa.Connection, prefix: str, served: list[str], module: str) -> str:
    found = signatures_starting(connection, prefix, served, module)
    if not found:
        raise LookupError(
            f"no dead-letter entry or rule of code location {module} has a signature "
            f"starting {prefix!r}: {suggested_command('dead-letter', 'groups', '-m', module)} "
            "lists the causes"
        )
    if len(found) > 1:
        raise LookupError(
            f"signature prefix {prefix!r} is ambiguous in code location {module}: it names "
            f"{', '.join(found)}; give more of it"
        )
    return found[0]


def _teach(
    connection: sa.Connection,
    rules: ClassificationRules,
    args: argparse.Namespace,
    module: str,
    served: list[str],
    signature: str,
) -> int:
    taught = Classification(args.classification)
    table_class, error_type, sample = _cause(connection, module, served, signature)
    if table_class not in RULED_CLASSES:
        raise ValueError(
            f"signature {signature} is a {table_class}: a rule cannot change it (a crash or a "
            "lost lease says nothing about the input: look at the worker's memory and "
            "deadline instead); nothing was set"
        )
    by = _person()
    at = rules.teach(
        connection,
        location=module,
        assets=served,
        signature=signature,
        classification=taught,
        reason=args.reason,
        by=by,
        error_class=str(table_class),
        error_type=error_type,
        sample_message=sample,
    )
    print(
        f"rule set in code location {module}: a failure with signature {signature} "
        f"({table_class} {error_type or ''} by the built-in table) is recorded {taught} from "
        f"now on, in its backfills {', '.join(served)}.\n"
        f"set by {by} at {plain(at)}{f': {args.reason}' if args.reason else ''}\n"
        f"e.g. {one_line(sample, 300)}"
    )
    quarantined, released = _open_entries(connection, served, signature)
    requeue = suggested_command("dead-letter", "requeue", "-m", module, "--group", signature)
    what = (
        "is quarantined at once, without retries"
        if taught is Classification.TERMINAL
        else "is retried with backoff until the budget is spent"
    )
    print(f"\nA new failure of this cause {what}.")
    if quarantined:
        print(
            f"Its {quarantined} open entr{'y stays' if quarantined == 1 else 'ies stay'} "
            "quarantined as they are: the rule does not release them. Once the cause is "
            f"fixed, or to try them under the rule: {requeue}"
        )
    if released:
        print(f"{released} released entr{'y' if released == 1 else 'ies'} awaiting a run: "
              "its next failure is decided by the rule.")  # fmt: skip
    print(f"Remove the rule: {_remove_command(signature, module)}")
    return 0


def _remove(connection: sa.Connection, module: str, signature: str) -> int:
    rules = list_rules(connection, location=module, signatures=[signature])
    if not rules:
        raise LookupError(
            f"code location {module} has no rule for signature {signature}: "
            f"{suggested_command('dead-letter', 'rules', '-m', module)} lists them"
        )
    forget(connection, module, signature)
    rule = rules[0]
    print(
        f"rule removed from code location {module}: a failure with signature {signature} is "
        f"classified by the built-in table again ({rule.error_class}), not {rule.classification}."
    )
    return 0


def _cause(
    connection: sa.Connection, module: str, served: list[str], signature: str
) -> tuple[Classification, str | None, str | None]:
    """The class the table gives the cause, its error type and a message of it.

    From the latest entry with the signature: a failure a rule decided is recorded with the
    rule's class, and the signature (signed with the table's) says which class that was.
    Without an entry (only a rule, its entries resolved), from the rule.
    """
    latest = connection.execute(
        sa.select(quarantine)
        .where(quarantine.c.signature == signature, quarantine.c.asset.in_(served))
        .order_by(quarantine.c.last_failed_at.desc().nulls_last(), quarantine.c.id.desc())
        .limit(1)
    ).first()
    if latest is None:
        [rule] = list_rules(connection, location=module, signatures=[signature])
        return Classification(rule.error_class or "unknown"), rule.error_type, rule.sample_message
    for candidate in (latest.error_class, *sorted(RULED_CLASSES)):
        signed = failure_signature(
            candidate,
            latest.error_type,
            latest.last_error,
            asset=latest.asset,
            partition=latest.partition,
        )
        if signed == signature:
            return Classification(candidate), latest.error_type, latest.last_error
    return Classification(latest.error_class), latest.error_type, latest.last_error


def _open_entries(connection: sa.Connection, served: list[str], signature: str) -> tuple[int, int]:
    """The cause's entries in the location's backfills: quarantined, and released awaiting
    their run."""
    counts: dict[str, int] = dict(
        connection.execute(
            sa.select(quarantine.c.status, sa.func.count())
            .where(quarantine.c.signature == signature, quarantine.c.asset.in_(served))
            .group_by(quarantine.c.status)
        ).all()
    )
    return counts.get(EntryStatus.QUARANTINED, 0), counts.get(EntryStatus.REQUEUED, 0)


def _remove_command(signature: str, module: str | None) -> str:
    location = ["-m", module] if module else []
    return suggested_command("dead-letter", "classify", *location, "--group", signature, "--remove")


def _person() -> str:
    """Who set the rule: the OS user running the command (`cli` when the system cannot say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        return "cli"
