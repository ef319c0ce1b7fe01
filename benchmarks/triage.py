"""`bench triage`: reading a dead letter of 10,000 open entries by cause, on PostgreSQL.

It builds, in a fresh schema, the dead letter a bad week leaves: `entries` open
(quarantined) entries over three assets, from a realistic mix of `len(CAUSES)` causes (a
few large, many small: entry n's cause is drawn with weight 1/rank), each message with its
own variable parts (line numbers, refused values, paths, URLs, SQLAlchemy's statement
and parameters), signed by `dead_letter.signature` as `quarantine_partition` signs them; plus a
fifth as many resolved entries, which the grouping must skip; and the attempts each entry
spent, which the hints read. It then times, `repeats` times each:

- `signature_groups` in this process (the queries and the grouping);
- `jobs-platform dead-letter groups --json` as a person runs it: a new process each.

The timings are `TIMINGS`: (name, factory) pairs, each factory taking the seeded
`DeadLetterBench` and returning the work to time. A later measurement over the same
warehouse (the redrive sensor's tick) adds itself there; nothing else changes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from benchmarks.database import copy_rows, fresh_schema, server_facts
from benchmarks.timing import run_command, wall_seconds
from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.store.db import normalize_url, warehouse_engine
from jobs_platform.store.migrate import upgrade_warehouse
from jobs_platform.store.schema import attempts, quarantine

ASSETS = ("orders", "daily_revenue", "acme/events")
FIRST_DAY = dt.date(2015, 1, 1)
RESOLVED_SHARE = 0.2  # resolved entries per open one: history the grouping must skip
TARGET_SECONDS = 1.0

_SQLALCHEMY_LINK = "(Background on this error at: https://sqlalche.me/e/20/{code})"


@dataclass(frozen=True)
class Cause:
    """One cause of the mix: how the runner records it, with the parts that vary drawn."""

    error_class: str
    error_type: str
    message: Callable[[random.Random, str, str], str]  # (rng, asset, partition) -> text


def _line(rng: random.Random) -> int:
    return rng.randint(1, 250_000)


CAUSES: tuple[Cause, ...] = (
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}: not valid JSON (Expecting value, column {r.randint(1, 200)})")),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'currency': must be one of 'EUR', 'GBP', 'USD', got "
        f"{r.choice(['JPY', 'CHF', 'usd', None, 7])!r}")),
    Cause("terminal", "TerminalError", lambda r, a, p: (
        f"no input: /data/landing/{a}/{p}.jsonl does not exist")),
    Cause("crash", "WorkerLost", lambda r, a, p: (
        "the worker stopped (killed, out of memory or hung) without reporting a result, and "
        "its lease expired or was taken over")),
    Cause("terminal", "HTTPStatusError", lambda r, a, p: (
        f"Client error '404 Not Found' for url 'https://api.example.com/v1/{a}?day={p}&page="
        f"{r.randint(1, 90)}'\nFor more information check: "
        "https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/404")),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'status': must be one of 'paid', 'pending', 'refunded', got "
        f"{r.choice(['lost', 'PAID', ''])!r}")),
    Cause("retryable", "AttemptTimedOut", lambda r, a, p: (
        f"attempt on {a}/{p} passed its deadline")),
    Cause("terminal", "IntegrityError", lambda r, a, p: (
        '(psycopg.errors.CheckViolation) new row for relation "jp_stage" violates check '
        f'constraint "amount_not_negative"\nDETAIL:  Failing row contains ({_line(r)}, '
        f"{r.randint(1, 5000)}, -{r.randint(1, 900)}, USD, paid, {p} 10:00:00+00).\n"
        "[SQL: INSERT INTO jp_stage (order_id, customer_id, amount_cents, currency, status, "
        "ordered_at) VALUES (%(order_id)s, %(customer_id)s, %(amount_cents)s, %(currency)s, "
        f"%(status)s, %(ordered_at)s)]\n[parameters: {{'order_id': {_line(r)}, "
        f"'amount_cents': -{r.randint(1, 900)}}}]\n" + _SQLALCHEMY_LINK.format(code="gkpj"))),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'amount_cents': must be >= 0, got -{r.randint(1, 10**6)}")),
    Cause("terminal", "HTTPStatusError", lambda r, a, p: (
        f"Client error '400 Bad Request' for url 'https://api.example.com/v1/{a}?day={p}'\n"
        "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/400")),
    Cause("terminal", "DataError", lambda r, a, p: (
        "(psycopg.errors.NumericValueOutOfRange) integer out of range\n[SQL: INSERT INTO "
        + "jp_stage (order_id, amount_cents) VALUES "
        + ", ".join(f"(%(order_id_m{i})s, %(amount_m{i})s)" for i in range(r.randint(1, 40)))
        + f"]\n[parameters: {{'order_id_m0': {_line(r)}, 'amount_m0': {r.randint(2**31, 2**40)}}}]"
        "\n" + _SQLALCHEMY_LINK.format(code="9h9h"))),
    Cause("terminal", "RejectedValue", lambda r, a, p: (
        f"chunk {r.randint(0, 30)}, line {_line(r)}, column 'currency': "
        f"{r.choice(['EURO', 'DOLLAR', 'POUNDS'])!r} is too long for VARCHAR(3)")),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'ordered_at': must fall on {p} (UTC), got "
        f"'{FIRST_DAY.isoformat()}T{r.randint(10, 23)}:00:00Z'")),
    Cause("retryable", "OperationalError", lambda r, a, p: (
        "(psycopg.OperationalError) connection failed: connection to server at "
        f'"10.0.{r.randint(0, 9)}.{r.randint(2, 250)}", port 5432 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
        + _SQLALCHEMY_LINK.format(code="e3q8"))),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'customer_id': required field is missing")),
    Cause("unknown", "KeyError", lambda r, a, p: "'customer'"),
    Cause("terminal", "TypeError", lambda r, a, p: (
        "TypeError in parse_row() at /srv/app/readers/orders.py:88: unsupported operand "
        "type(s) for +: 'int' and 'str'")),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}, field 'schema_version': unknown schema_version "
        f"{r.choice([0, 2, 3, 99])}")),
    Cause("terminal", "DeploymentError", lambda r, a, p: (
        'column "discount_cents" of table "orders" does not exist in the warehouse: add it at '
        "deploy time with your own migration (create_user_tables never alters a table) "
        '[UndefinedColumn: column "discount_cents" of relation "orders" does not exist]')),
    Cause("terminal", "InputValidationError", lambda r, a, p: (
        f"line {_line(r)}: not valid UTF-8 (invalid start byte)")),
)  # fmt: skip


class CauseMix:
    """Dead-letter entries from the mix of `CAUSES`, drawn with weight 1/rank (a few
    large causes, many small), each message with its own variable parts, signed as
    `quarantine_partition` signs them. Seeded: the same entries every time."""

    def __init__(self, seed: int = 24) -> None:
        self.rng = random.Random(seed)
        self.weights = [1 / rank for rank in range(1, len(CAUSES) + 1)]

    def entry(self, asset: str, partition: str, at: dt.datetime, *, resolved: bool = False) -> dict:
        """One entry's row (episode 1), open unless `resolved`, failed at `at`."""
        cause = self.rng.choices(CAUSES, self.weights)[0]
        message = cause.message(self.rng, asset, partition)
        return {
            "asset": asset, "partition": partition, "episode": 1,
            "status": "resolved" if resolved else "quarantined",
            "attempts": 1 if cause.error_class == "terminal" else 5,
            "error_class": cause.error_class, "error_type": cause.error_type,
            "last_error": message, "first_failed_at": at, "last_failed_at": at,
            "quarantined_at": at,
            "signature": failure_signature(
                cause.error_class, cause.error_type, message, asset=asset, partition=partition
            ),
        }  # fmt: skip


@dataclass
class DeadLetterBench:
    """The seeded warehouse a timing runs against."""

    url: str
    folder: str
    env: dict[str, str]
    entries: int
    assets: tuple[str, ...] = ASSETS
    causes: int = len(CAUSES)
    facts: dict = field(default_factory=dict)


def _time_signature_groups(bench: DeadLetterBench) -> Callable[[], object]:
    from jobs_platform.dead_letter.triage import signature_groups

    engine = warehouse_engine(bench.url)

    def work() -> object:
        with engine.connect() as connection:
            return signature_groups(connection)

    return work


def _time_groups_command(bench: DeadLetterBench) -> Callable[[], object]:
    command = [str(Path(sys.executable).with_name("jobs-platform")), "dead-letter", "groups",
               "--json"]  # fmt: skip
    return lambda: run_command(command, bench.env, bench.folder)


TimingFactory = Callable[[DeadLetterBench], Callable[[], object]]
# What the bench times, in order. The redrive sensor's tick is meant to join here.
TIMINGS: list[tuple[str, TimingFactory]] = [
    ("signature_groups_in_process", _time_signature_groups),
    ("dead_letter_groups_cli", _time_groups_command),
]


def run_triage_bench(database_url: str, entries: int, repeats: int = 5) -> dict:
    """Seed the dead letter, time each of `TIMINGS`; a JSON-ready dict."""
    if entries < 1 or repeats < 1:
        raise ValueError("need --entries >= 1 and --repeats >= 1")
    load_before = round(os.getloadavg()[0], 2)
    with seeded_dead_letter(database_url, entries) as bench:
        results = {}
        for name, factory in TIMINGS:
            work = factory(bench)
            work()  # warm: connections opened, caches filled, as a second run finds them
            results[name] = _without_results(wall_seconds(repeats, work))
        with warehouse_engine(bench.url).connect() as connection:
            from jobs_platform.dead_letter.triage import open_signature_count, signature_groups

            groups = signature_groups(connection)
            open_causes = open_signature_count(connection)
    return {
        "entries": entries,
        "assets": list(ASSETS),
        "causes_seeded": len(CAUSES),
        "groups": len(groups),
        "largest_groups": [group.count for group in groups[:5]],
        "target_seconds": TARGET_SECONDS,
        "results": results,
        "notes": {
            "repeats": repeats,
            "resolved_entries": bench.facts["resolved"],
            "build_seconds": bench.facts["build_seconds"],
            "open_causes_metric": open_causes,
            "load_average_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "server": server_facts(database_url),
        },
    }


@contextlib.contextmanager
def seeded_dead_letter(database_url: str, entries: int) -> Iterator[DeadLetterBench]:
    """A fresh schema holding the dead letter, and the environment of a command on it."""
    with (
        tempfile.TemporaryDirectory(prefix="jp_bench_triage_") as folder,
        fresh_schema(database_url, "triage") as url,
    ):
        began = time.perf_counter()
        resolved = _build(url, entries)
        env = {**os.environ, "JOBS_PLATFORM_DATABASE_URL": url}
        # No code location named: the command reads the warehouse without loading Dagster,
        # as a person's `dead-letter groups` does.
        for name in ("JOBS_PLATFORM_MODULE", "JOBS_PLATFORM_FAILPOINTS"):
            env.pop(name, None)
        facts = {"resolved": resolved, "build_seconds": round(time.perf_counter() - began, 2)}
        yield DeadLetterBench(url=url, folder=folder, env=env, entries=entries, facts=facts)


def _build(url: str, entries: int) -> int:
    """Stream the entries in (signed as `quarantine_partition` signs them); returns how many
    resolved entries were added."""
    draw = CauseMix()
    resolved = int(entries * RESOLVED_SHARE)
    now = dt.datetime.now(dt.UTC)

    def rows() -> Iterator[dict]:
        for n in range(entries + resolved):
            asset = ASSETS[n % len(ASSETS)]
            partition = (FIRST_DAY + dt.timedelta(days=n // len(ASSETS))).isoformat()
            at = now - dt.timedelta(minutes=entries + resolved - n)
            yield draw.entry(asset, partition, at, resolved=n >= entries)

    engine = sa.create_engine(normalize_url(url), poolclass=sa.NullPool)
    seeded = list(rows())
    try:
        upgrade_warehouse(engine)
        with engine.begin() as connection:
            copy_rows(connection, quarantine, seeded)
            copy_rows(connection, attempts, _failed_attempts(seeded))
            connection.execute(sa.text("ANALYZE jp_quarantine"))
            connection.execute(sa.text("ANALYZE jp_attempts"))
    finally:
        engine.dispose()
    return resolved


def _failed_attempts(entries: list[dict]) -> Iterator[dict]:
    """The attempts each entry spent, all failing as its last did: what the hints
    (`dead_letter.hints`) read to tell a cause that failed identically every time."""
    for entry in entries:
        for number in range(1, entry["attempts"] + 1):
            yield {
                "asset": entry["asset"], "partition": entry["partition"], "episode": 1,
                "attempt": number, "outcome": "failed", "error_class": entry["error_class"],
                "error_type": entry["error_type"], "message": entry["last_error"],
                "started_at": entry["last_failed_at"], "ended_at": entry["last_failed_at"],
            }  # fmt: skip


def _without_results(figures: dict) -> dict:
    figures.pop("results")
    return figures
