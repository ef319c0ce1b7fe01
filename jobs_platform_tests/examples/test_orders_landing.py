"""The orders example's landing input: validation, chunking, fingerprints and the seeder."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import fsspec
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs_platform.errors import InputValidationError, TerminalError
from orders_example.orders.landing import (
    _MICROSECOND,
    _UNIX_EPOCH,
    ORDER_COLUMNS,
    _columns,
    _frame,
    _parse_line,
    _validated_columns,
    input_fingerprint,
    landing_file,
    read_order_chunks,
)
from orders_example.orders.seed import iter_days, seed_orders

DAY = "2024-01-03"


def order(**overrides: object) -> dict[str, object]:
    """A valid order of DAY; keyword arguments replace fields, `None` values are dropped."""
    fields: dict[str, object] = {
        "schema_version": 1,
        "order_id": 1001,
        "customer_id": 7,
        "amount_cents": 1250,
        "currency": "EUR",
        "status": "paid",
        "ordered_at": f"{DAY}T05:06:07Z",
    }
    fields.update(overrides)
    return {key: value for key, value in fields.items() if value is not None}


def write_lines(path: os.PathLike[str] | str, lines: list[str | dict[str, object]]) -> str:
    """Write a landing file, encoding dict lines as JSON and writing str lines verbatim."""
    text = "".join((json.dumps(line) if isinstance(line, dict) else line) + "\n" for line in lines)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return str(path)


def read_all(path: str, day: str = DAY, chunk_rows: int = 1000) -> pd.DataFrame:
    chunks = list(read_order_chunks(path, day, chunk_rows))
    return pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame()


def validation_error_at_line_3(tmp_path, bad_line: str | dict[str, object]) -> InputValidationError:
    path = write_lines(tmp_path / "in.jsonl", [order(order_id=1), order(order_id=2), bad_line])
    with pytest.raises(InputValidationError) as raised:
        read_all(path)
    return raised.value


# Each rule: the bad third line, the field the error must name (None for whole-line
# problems) and a fragment of the message that says what is wrong.
VALIDATION_RULES = [
    pytest.param("{not json", None, "not valid JSON", id="line-not-json"),
    pytest.param("[1, 2]", None, "must be a JSON object, got an array", id="line-is-array"),
    pytest.param("42", None, "must be a JSON object, got a number", id="line-is-number"),
    pytest.param(
        order(schema_version=None), "schema_version", "missing", id="schema-version-missing"
    ),
    pytest.param(
        order(schema_version=2),
        "schema_version",
        "unknown schema_version 2",
        id="schema-version-unknown",
    ),
    pytest.param(
        order(schema_version=True),
        "schema_version",
        "unknown schema_version True",
        id="schema-version-bool",
    ),
    *(
        pytest.param(order(**{field: None}), field, "missing", id=f"{field}-missing")
        for field in ORDER_COLUMNS
    ),
    pytest.param(order(order_id="5"), "order_id", "must be an integer", id="order-id-string"),
    pytest.param(order(order_id=5.0), "order_id", "must be an integer", id="order-id-float"),
    pytest.param(order(customer_id=True), "customer_id", "integer", id="customer-id-bool"),
    pytest.param(order(amount_cents=1.5), "amount_cents", "integer", id="amount-float"),
    pytest.param(order(order_id=0), "order_id", "must be >= 1, got 0", id="order-id-zero"),
    pytest.param(order(customer_id=-3), "customer_id", ">= 1", id="customer-id-negative"),
    pytest.param(order(order_id=2**63), "order_id", "must be <=", id="order-id-beyond-int64"),
    pytest.param(
        order(amount_cents=-5), "amount_cents", "must be >= 0, got -5", id="amount-negative"
    ),
    pytest.param(order(currency="JPY"), "currency", "got 'JPY'", id="currency-unknown"),
    pytest.param(order(currency=["USD"]), "currency", "must be one of", id="currency-list"),
    pytest.param(order(status="shipped"), "status", "got 'shipped'", id="status-unknown"),
    pytest.param(order(ordered_at="yesterday"), "ordered_at", "ISO-8601", id="ordered-at-text"),
    pytest.param(order(ordered_at=1704258000), "ordered_at", "ISO-8601", id="ordered-at-number"),
    pytest.param(order(ordered_at=DAY), "ordered_at", "ISO-8601", id="ordered-at-date-only"),
    pytest.param(
        order(ordered_at="2024-01-04T00:00:00Z"),
        "ordered_at",
        f"must fall on {DAY}",
        id="ordered-at-next-day",
    ),
]


@pytest.mark.parametrize(("bad_line", "field", "problem"), VALIDATION_RULES)
def test_invalid_line_raises_validation_error_naming_line_and_field(
    tmp_path, bad_line, field, problem
):
    error = validation_error_at_line_3(tmp_path, bad_line)

    assert (error.line, error.field) == (3, field)
    assert str(error).startswith("line 3")
    if field is not None:
        assert f"field '{field}'" in str(error)
    assert problem in str(error)


def test_negative_amount_message_reads_as_a_sentence(tmp_path):
    error = validation_error_at_line_3(tmp_path, order(amount_cents=-5))

    assert str(error) == "line 3, field 'amount_cents': must be >= 0, got -5"


def test_validation_error_is_terminal(tmp_path):
    error = validation_error_at_line_3(tmp_path, "{not json")

    assert isinstance(error, TerminalError)


def test_invalid_utf8_is_a_validation_error_of_its_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(json.dumps(order()).encode() + b'\n{"currency": "\xff"}\n')

    with pytest.raises(InputValidationError, match="UTF-8") as raised:
        read_all(str(path))
    assert raised.value.line == 2


def test_a_file_starting_with_a_byte_order_mark_is_terminal_and_says_how_to_fix_it(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\ufeff" + json.dumps(order()) + "\n", encoding="utf-8")

    with pytest.raises(InputValidationError) as raised:
        read_all(str(path))

    assert isinstance(raised.value, TerminalError)
    assert raised.value.line == 1
    assert "starts with a UTF-8 byte-order mark" in str(raised.value)
    assert "save the file as UTF-8 without a BOM" in str(raised.value)


def test_timestamp_of_another_day_in_its_own_offset_is_rejected(tmp_path):
    # 23:30 at UTC-01:00 is 00:30 the next day in UTC: the partition must not write it.
    error = validation_error_at_line_3(tmp_path, order(ordered_at=f"{DAY}T23:30:00-01:00"))

    assert error.field == "ordered_at"
    assert "2024-01-04T00:30:00+00:00 in UTC" in str(error)


def test_timestamp_with_offset_is_converted_to_utc(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(ordered_at=f"{DAY}T12:00:00+02:00")])

    assert read_all(path)["ordered_at"][0] == pd.Timestamp(f"{DAY}T10:00:00", tz="UTC")


def test_timestamp_without_offset_is_taken_as_utc(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(ordered_at=f"{DAY}T05:06:07.250")])

    assert read_all(path)["ordered_at"][0] == pd.Timestamp(f"{DAY}T05:06:07.250", tz="UTC")


def test_previous_day_local_time_that_is_on_the_day_in_utc_is_accepted(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(ordered_at="2024-01-02T23:30:00-02:00")])

    assert read_all(path)["ordered_at"][0] == pd.Timestamp(f"{DAY}T01:30:00", tz="UTC")


def test_chunks_hold_chunk_rows_rows_and_the_last_one_the_rest(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(order_id=i) for i in range(1, 26)])

    chunks = list(read_order_chunks(path, DAY, 10))

    assert [len(chunk) for chunk in chunks] == [10, 10, 5]
    assert pd.concat(chunks)["order_id"].tolist() == list(range(1, 26))


def test_chunks_have_exactly_the_order_columns_and_their_dtypes(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order()])

    [chunk] = read_order_chunks(path, DAY, 10)

    assert tuple(chunk.columns) == ORDER_COLUMNS
    assert chunk.dtypes.astype(str).to_dict() == {
        "order_id": "int64",
        "customer_id": "int64",
        "amount_cents": "int64",
        "currency": "object",
        "status": "object",
        "ordered_at": "datetime64[ns, UTC]",
    }
    assert chunk.iloc[0].to_dict() == {
        "order_id": 1001,
        "customer_id": 7,
        "amount_cents": 1250,
        "currency": "EUR",
        "status": "paid",
        "ordered_at": pd.Timestamp(f"{DAY}T05:06:07", tz="UTC"),
    }


def test_empty_file_yields_no_chunks(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [])

    assert list(read_order_chunks(path, DAY, 10)) == []


def test_extra_fields_are_ignored(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(coupon="WINTER", notes={"gift": True})])

    assert tuple(read_all(path).columns) == ORDER_COLUMNS


def test_blank_lines_are_skipped_but_count_for_line_numbers(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order(order_id=1), "", "  \t", order(status="x")])

    with pytest.raises(InputValidationError) as raised:
        read_all(path)
    assert raised.value.line == 4


def test_blank_lines_produce_no_rows(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", ["", order(order_id=1), "   ", order(order_id=2)])

    assert read_all(path)["order_id"].tolist() == [1, 2]


def test_duplicate_order_ids_are_all_kept_in_file_order(tmp_path):
    lines = [order(order_id=5, amount_cents=1), order(order_id=5, amount_cents=2)]
    path = write_lines(tmp_path / "in.jsonl", lines)

    assert read_all(path)["amount_cents"].tolist() == [1, 2]


def test_missing_file_is_a_terminal_no_input_error(tmp_path):
    path = str(tmp_path / "orders" / f"{DAY}.jsonl")

    with pytest.raises(TerminalError, match=f"no input: {path} does not exist"):
        list(read_order_chunks(path, DAY, 10))


def test_chunk_rows_below_one_is_rejected_at_the_call(tmp_path):
    with pytest.raises(ValueError, match="chunk_rows"):
        read_order_chunks(str(tmp_path / "never-opened.jsonl"), DAY, 0)


def test_landing_file_joins_local_roots_with_the_os_separator(tmp_path):
    assert landing_file(str(tmp_path), DAY) == os.path.join(str(tmp_path), "orders", f"{DAY}.jsonl")


def test_landing_file_joins_urls_with_slashes():
    assert landing_file("s3://bucket/landing/", DAY) == f"s3://bucket/landing/orders/{DAY}.jsonl"


def test_landing_file_rejects_a_day_that_is_not_yyyy_mm_dd(tmp_path):
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        landing_file(str(tmp_path), "../2024-01-03")


def test_orders_are_read_from_an_fsspec_url():
    url = landing_file(f"memory://landing-{uuid.uuid4().hex}", DAY)
    content = (json.dumps(order()) + "\n").encode()
    with fsspec.open(url, "wb") as stream:
        stream.write(content)

    assert read_all(url)["order_id"].tolist() == [1001]
    assert input_fingerprint(url) == hashlib.sha256(content).hexdigest()


def test_missing_fsspec_url_is_a_terminal_no_input_error():
    url = landing_file(f"memory://landing-{uuid.uuid4().hex}", DAY)

    with pytest.raises(TerminalError, match="no input"):
        list(read_order_chunks(url, DAY, 10))


def test_fingerprint_is_the_sha256_of_the_file_bytes(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order()])

    with open(path, "rb") as stream:
        expected = hashlib.sha256(stream.read()).hexdigest()
    assert input_fingerprint(path) == expected == input_fingerprint(path)


def test_fingerprint_changes_when_the_file_changes(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [order()])
    before = input_fingerprint(path)

    write_lines(path, [order(amount_cents=1251)])

    assert input_fingerprint(path) != before


def test_fingerprint_of_a_missing_file_is_a_terminal_error(tmp_path):
    with pytest.raises(TerminalError, match="no input"):
        input_fingerprint(str(tmp_path / "absent.jsonl"))


def test_seeding_twice_with_the_same_arguments_writes_identical_bytes(tmp_path):
    arguments = {"orders_per_day": 50, "poison_days": [date(2024, 1, 2)], "seed": 3}
    first = seed_orders(str(tmp_path / "a"), date(2024, 1, 1), date(2024, 1, 3), **arguments)
    second = seed_orders(str(tmp_path / "b"), date(2024, 1, 1), date(2024, 1, 3), **arguments)

    assert [Path(p).read_bytes() for p in first] == [Path(p).read_bytes() for p in second]


def test_a_day_seeds_the_same_file_whatever_the_range_around_it(tmp_path):
    [alone] = seed_orders(str(tmp_path / "a"), date(2024, 1, 2), date(2024, 1, 2))
    in_range = seed_orders(str(tmp_path / "b"), date(2024, 1, 1), date(2024, 1, 3))

    assert Path(alone).read_bytes() == Path(in_range[1]).read_bytes()


def test_a_different_seed_writes_different_orders(tmp_path):
    [first] = seed_orders(str(tmp_path / "a"), date(2024, 1, 1), date(2024, 1, 1), seed=1)
    [second] = seed_orders(str(tmp_path / "b"), date(2024, 1, 1), date(2024, 1, 1), seed=2)

    assert Path(first).read_bytes() != Path(second).read_bytes()


def test_seeded_days_are_at_their_landing_paths_and_read_clean(tmp_path):
    root = str(tmp_path)
    paths = seed_orders(root, date(2024, 1, 1), date(2024, 1, 3), orders_per_day=40)

    days = [day.isoformat() for day in iter_days(date(2024, 1, 1), date(2024, 1, 3))]
    assert paths == [landing_file(root, day) for day in days]
    assert [len(read_all(path, day)) for path, day in zip(paths, days, strict=True)] == [40] * 3
    assert sorted(os.listdir(tmp_path / "orders")) == [f"{day}.jsonl" for day in days]


def test_poison_day_fails_validation_while_other_days_read_clean(tmp_path):
    paths = seed_orders(
        str(tmp_path), date(2024, 1, 1), date(2024, 1, 3), poison_days=[date(2024, 1, 2)]
    )

    assert len(read_all(paths[0], "2024-01-01")) == 100
    assert len(read_all(paths[2], "2024-01-03")) == 100
    with pytest.raises(InputValidationError) as raised:
        read_all(paths[1], "2024-01-02")
    assert 1 < raised.value.line < 102  # in the middle, after some valid orders


def test_poison_day_holds_a_non_json_line_and_a_negative_amount(tmp_path):
    [path] = seed_orders(
        str(tmp_path), date(2024, 1, 2), date(2024, 1, 2), poison_days=[date(2024, 1, 2)]
    )

    errors = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        single = tmp_path / "single.jsonl"
        write_lines(single, [line])
        try:
            read_all(str(single), "2024-01-02")
        except InputValidationError as error:
            errors.append((error.field, str(error)))
    assert len(errors) == 2
    assert errors[0][0] is None and "not valid JSON" in errors[0][1]
    assert errors[1][0] == "amount_cents" and "must be >= 0" in errors[1][1]


def test_seeded_order_ids_are_unique_across_days(tmp_path):
    paths = seed_orders(str(tmp_path), date(2024, 1, 1), date(2024, 1, 5), orders_per_day=200)

    days = [day.isoformat() for day in iter_days(date(2024, 1, 1), date(2024, 1, 5))]
    ids = pd.concat([read_all(p, d) for p, d in zip(paths, days, strict=True)])["order_id"]
    assert len(ids) == 1000
    assert ids.is_unique


def test_seeding_zero_orders_writes_empty_files(tmp_path):
    [path] = seed_orders(str(tmp_path), date(2024, 1, 1), date(2024, 1, 1), orders_per_day=0)

    assert Path(path).read_bytes() == b""


def test_iter_days_includes_both_ends():
    assert list(iter_days(date(2024, 2, 28), date(2024, 3, 1))) == [
        date(2024, 2, 28),
        date(2024, 2, 29),
        date(2024, 3, 1),
    ]


@pytest.mark.parametrize(
    ("start", "end", "options", "message"),
    [
        (date(2024, 1, 2), date(2024, 1, 1), {}, "before start"),
        (date(2024, 1, 1), date(2024, 1, 1), {"orders_per_day": -1}, "orders_per_day"),
        (date(2023, 12, 31), date(2024, 1, 1), {}, "before the first orders day"),
        (date(2024, 1, 1), date(2024, 1, 2), {"poison_days": [date(2024, 1, 9)]}, "2024-01-09"),
    ],
    ids=["end-before-start", "negative-orders", "before-2024", "poison-outside-range"],
)
def test_seed_rejects_bad_arguments_with_a_clear_message(tmp_path, start, end, options, message):
    with pytest.raises(ValueError, match=message):
        seed_orders(str(tmp_path), start, end, **options)
    assert not (tmp_path / "orders").exists()


_DAY_START = datetime.fromisoformat(DAY)

valid_orders = st.fixed_dictionaries(
    {
        "order_id": st.integers(1, 2**63 - 1),
        "customer_id": st.integers(1, 2**63 - 1),
        "amount_cents": st.integers(0, 2**63 - 1),
        "currency": st.sampled_from(["USD", "EUR", "GBP"]),
        "status": st.sampled_from(["paid", "refunded", "pending"]),
        # The instant, as naive UTC, and how the line spells it: naive, "Z" or an offset.
        "instant": st.datetimes(_DAY_START, _DAY_START + timedelta(days=1, microseconds=-1)),
        "offset_minutes": st.one_of(st.none(), st.just(0), st.integers(-23 * 60, 23 * 60)),
    }
)


def order_line(generated: dict[str, object]) -> dict[str, object]:
    instant = generated["instant"].replace(tzinfo=UTC)
    offset = generated["offset_minutes"]
    if offset is None:
        ordered_at = instant.replace(tzinfo=None).isoformat()
    elif offset == 0:
        ordered_at = instant.isoformat().replace("+00:00", "Z")
    else:
        ordered_at = instant.astimezone(timezone(timedelta(minutes=offset))).isoformat()
    fields = {key: generated[key] for key in ORDER_COLUMNS if key != "ordered_at"}
    return {"schema_version": 1, **fields, "ordered_at": ordered_at}


@settings(max_examples=150, deadline=None)
@given(orders=st.lists(valid_orders, min_size=1, max_size=6), chunk_rows=st.integers(1, 4))
def test_valid_orders_round_trip_through_read_order_chunks(orders, chunk_rows):
    with tempfile.TemporaryDirectory() as folder:
        path = write_lines(os.path.join(folder, "in.jsonl"), [order_line(o) for o in orders])
        read = read_all(path, DAY, chunk_rows)

    expected = [
        {
            **{key: o[key] for key in ORDER_COLUMNS if key != "ordered_at"},
            "ordered_at": pd.Timestamp(o["instant"], tz="UTC"),
        }
        for o in orders
    ]
    assert read.to_dict("records") == expected


def test_with_a_rejecter_an_invalid_line_is_refused_by_row_number_and_the_file_read_on(tmp_path):
    lines = [order(order_id=1), "", "{oops", order(order_id=3), order(order_id=4, amount_cents=-1)]
    path = write_lines(tmp_path / "in.jsonl", [*lines, order(order_id=6)])
    refused: list[tuple[int, str, dict]] = []

    chunks = list(
        read_order_chunks(
            path, DAY, 2, reject=lambda row, reason, values: refused.append((row, reason, values))
        )
    )

    assert [chunk["order_id"].tolist() for chunk in chunks] == [[1, 3], [6]]
    # Row numbers count the non-blank lines (rows and rejected rows); the reason names the line.
    assert [(row, values) for row, _, values in refused] == [
        (2, {"line": "{oops"}),
        (4, {"line": json.dumps(order(order_id=4, amount_cents=-1))}),
    ]
    assert refused[0][1].startswith("line 3: not valid JSON")
    assert refused[1][1] == "line 5, field 'amount_cents': must be >= 0, got -1"


# Lines a batch check could misjudge: valid orders spelled as json.dumps writes them (keys
# in any order, with or without spaces, CRLF), and each field pushed past its rule.
_PAST_THE_RULES = {
    "schema_version": st.sampled_from([1, 2, True, 1.0, "1"]),
    "order_id": st.one_of(st.integers(-2, 2**64), st.sampled_from([1.0, "1", False])),
    "customer_id": st.integers(0, 10**19),
    "amount_cents": st.one_of(st.integers(-1, 2**63 + 1), st.just(None)),
    "currency": st.sampled_from(["USD", "EUR", "GBP", "usd", "XXX", "", 1]),
    "status": st.sampled_from(["paid", "refunded", "pending", "Paid", None]),
    "ordered_at": st.one_of(
        st.datetimes(min_value=datetime(2024, 1, 2, 22), max_value=datetime(2024, 1, 4, 2)).map(
            datetime.isoformat
        ),
        st.sampled_from(
            [
                f"{DAY}T05:06:07Z",
                f"{DAY}T00:00:00+01:00",
                f"{DAY}T23:30:00-01:00",
                f"{DAY}T05:06:07.5Z",
                f"{DAY}T05:06:07.1234567Z",
                f"{DAY}T24:00:00Z",
                "2024-02-30T05:06:07Z",
                "0001-01-01T00:00:00+01:00",
                DAY,
            ]
        ),
    ),
}


@st.composite
def landing_lines(draw: st.DrawFn) -> str:
    fields = order(order_id=draw(st.integers(1, 10**18)))
    for field in draw(st.lists(st.sampled_from(sorted(_PAST_THE_RULES)), max_size=2)):
        fields[field] = draw(_PAST_THE_RULES[field])
    if draw(st.booleans()):
        fields.pop(draw(st.sampled_from(sorted(fields))))
    keys = draw(st.permutations(sorted(fields))) if draw(st.booleans()) else list(fields)
    spaced = draw(st.booleans())
    text = json.dumps(
        {key: fields[key] for key in keys},
        separators=(", ", ": ") if spaced else (",", ":"),
    )
    return text + draw(st.sampled_from(["", "", "\r", " "]))


def read_line_by_line(path: str, chunk_rows: int, events: list) -> list[pd.DataFrame]:
    """The reader as it was before the batch check: each line parsed on its own."""
    first_us = (datetime.fromisoformat(DAY).replace(tzinfo=UTC) - _UNIX_EPOCH) // _MICROSECOND
    end_us = first_us + timedelta(days=1) // _MICROSECOND
    rows: list = []
    chunks = []
    row_number = 0
    with open(path, "rb") as stream:
        for line_number, raw in enumerate(stream, start=1):
            if raw.isspace():
                continue
            row_number += 1
            try:
                rows.append(_parse_line(raw, line_number, DAY, first_us, end_us))
            except InputValidationError as invalid:
                events.append(("rejected", row_number, str(invalid)))
                continue
            if len(rows) == chunk_rows:
                events.append(("chunk", len(chunks)))
                chunks.append(_frame([_columns(rows)]))
                rows = []
    if rows:
        events.append(("chunk", len(chunks)))
        chunks.append(_frame([_columns(rows)]))
    return chunks


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.one_of(landing_lines(), st.sampled_from(["", "{oops", "[1]"])), max_size=8),
    chunk_rows=st.integers(1, 4),
)
def test_the_batch_check_accepts_rejects_and_chunks_as_the_line_by_line_rules(lines, chunk_rows):
    with tempfile.TemporaryDirectory() as folder:
        path = write_lines(Path(folder) / "in.jsonl", lines)
        expected_events: list = []
        expected = read_line_by_line(path, chunk_rows, expected_events)
        events: list = []
        reject = lambda row, reason, values: events.append(("rejected", row, reason))  # noqa: E731
        read = []
        for chunk in read_order_chunks(path, DAY, chunk_rows, reject=reject):
            events.append(("chunk", len(read)))
            read.append(chunk)

    # The same rows in the same chunks, each rejected line before the chunk it falls in.
    assert events == expected_events
    for chunk, chunk_expected in zip(read, expected, strict=True):
        pd.testing.assert_frame_equal(chunk, chunk_expected)


def test_the_seeders_lines_pass_the_batch_check_whole(tmp_path):
    seed_orders(str(tmp_path), date(2024, 1, 3), date(2024, 1, 3), orders_per_day=50)
    with open(landing_file(str(tmp_path), DAY), "rb") as stream:
        lines = stream.readlines()
    first_us = (datetime.fromisoformat(DAY).replace(tzinfo=UTC) - _UNIX_EPOCH) // _MICROSECOND

    columns = _validated_columns(lines, first_us, first_us + timedelta(days=1) // _MICROSECOND)

    assert columns is not None and len(columns[0]) == 50
