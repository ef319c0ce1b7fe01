"""Deterministic landing files for the orders example, optionally with poisoned days.

The same arguments always write byte-identical files, so a re-seed leaves every input
fingerprint unchanged and a backfill over it converges to the same rows.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterable, Iterator
from datetime import date, timedelta

from orders_example.orders.landing import landing_file

__all__ = ["iter_days", "seed_orders"]

# Order ids are (days since ORDER_ID_EPOCH) * ORDER_ID_DAY_STRIDE + index + 1, so they are
# unique across days, positive, and a glance at one tells which day it came from.
ORDER_ID_EPOCH = date(2024, 1, 1)
ORDER_ID_DAY_STRIDE = 100_000_000
MAX_ORDERS_PER_DAY = ORDER_ID_DAY_STRIDE - 2  # the last id of a day's stride is the poison line's

_CURRENCIES = ("USD", "EUR", "GBP")
_STATUSES = ("paid", "paid", "paid", "refunded", "pending")  # mostly paid, like real traffic
_CUSTOMERS = 5_000
_MAX_AMOUNT_CENTS = 50_000
_SECONDS_PER_DAY = 86_400
_NOT_JSON_LINE = '{"schema_version": 1, "order_id": this is not JSON'


def iter_days(start: date, end: date) -> Iterator[date]:
    """Every day from ``start`` to ``end``, both included."""
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    for offset in range((end - start).days + 1):
        yield start + timedelta(days=offset)


def seed_orders(
    landing_root: str,
    start: date,
    end: date,
    *,
    orders_per_day: int = 100,
    poison_days: Iterable[date] = (),
    seed: int = 0,
) -> list[str]:
    """Write one landing file per day from ``start`` to ``end`` and return their paths.

    ``landing_root`` is a local folder. A poison day holds its valid orders plus two
    malformed lines in the middle: one that is not JSON and one with a negative amount.
    """
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    if start < ORDER_ID_EPOCH:
        raise ValueError(f"start ({start}) is before the first orders day ({ORDER_ID_EPOCH})")
    if not 0 <= orders_per_day <= MAX_ORDERS_PER_DAY:
        raise ValueError(
            f"orders_per_day must be between 0 and {MAX_ORDERS_PER_DAY}, got {orders_per_day}"
        )
    poisoned = set(poison_days)
    outside = sorted(day for day in poisoned if not start <= day <= end)
    if outside:
        shown = ", ".join(day.isoformat() for day in outside)
        raise ValueError(f"poison days outside {start}..{end}: {shown}")
    paths = []
    for day in iter_days(start, end):
        lines = _order_lines(day, orders_per_day, seed)
        if day in poisoned:
            lines = _with_poison_in_the_middle(lines, day, orders_per_day)
        path = landing_file(landing_root, day.isoformat())
        _write_atomically(path, lines)
        paths.append(path)
    return paths


def _order_lines(day: date, count: int, seed: int) -> Iterator[str]:
    """A day's orders, one line at a time: a day of any size is written in bounded memory.

    Times are spread evenly over the day in order (order ids and times rise together);
    the other fields come from one generator per day, seeded by the day, so a day's file
    does not depend on the range.
    """
    rng = random.Random(f"{seed}:{day.isoformat()}")
    first_id = (day - ORDER_ID_EPOCH).days * ORDER_ID_DAY_STRIDE + 1
    for index in range(count):
        yield _order_line(
            day,
            order_id=first_id + index,
            customer_id=rng.randint(1, _CUSTOMERS),
            amount_cents=rng.randint(0, _MAX_AMOUNT_CENTS),
            currency=rng.choice(_CURRENCIES),
            status=rng.choice(_STATUSES),
            second_of_day=index * _SECONDS_PER_DAY // count,
        )


def _with_poison_in_the_middle(lines: Iterator[str], day: date, count: int) -> Iterator[str]:
    for index, line in enumerate(lines):
        if index == count // 2:
            yield from _poison_lines(day)
        yield line
    if count == 0:
        yield from _poison_lines(day)


def _poison_lines(day: date) -> list[str]:
    last_id = (day - ORDER_ID_EPOCH).days * ORDER_ID_DAY_STRIDE + ORDER_ID_DAY_STRIDE - 1
    negative_amount = _order_line(
        day,
        order_id=last_id,
        customer_id=1,
        amount_cents=-500,
        currency="USD",
        status="paid",
        second_of_day=_SECONDS_PER_DAY // 2,
    )
    return [_NOT_JSON_LINE, negative_amount]


def _order_line(
    day: date,
    *,
    order_id: int,
    customer_id: int,
    amount_cents: int,
    currency: str,
    status: str,
    second_of_day: int,
) -> str:
    hours, remainder = divmod(second_of_day, 3600)
    minutes, seconds = divmod(remainder, 60)
    # The JSON `json.dumps(…, separators=(",", ":"))` writes, spelled out: every field is
    # a number or a word of a fixed set, and formatting is 3 x faster for large days.
    return (
        f'{{"schema_version":1,"order_id":{order_id},"customer_id":{customer_id},'
        f'"amount_cents":{amount_cents},"currency":"{currency}","status":"{status}",'
        f'"ordered_at":"{day.isoformat()}T{hours:02d}:{minutes:02d}:{seconds:02d}Z"}}'
    )


def _write_atomically(path: str, lines: Iterable[str]) -> None:
    """Replace ``path`` in one step, so a reader never sees a half-written landing file."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".seed-", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as stream:
            stream.writelines(f"{line}\n" for line in lines)
        os.chmod(temporary, 0o644)  # mkstemp makes it owner-only; landing files are shared
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
