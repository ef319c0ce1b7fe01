"""Specifications of a failure's signature (`dead_letter.signature`): one cause, one signature.

The messages are the taxonomy's real ones: raised by the orders reader on real files,
by PostgreSQL through SQLAlchemy, by httpx and requests, by the writer's refusals and by
the engine (crash, deadline). Each is signed as the runner records it: the class
`classify` gives, the exception's type name and its text.
"""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
import requests
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs_platform.dead_letter.signature import (
    SIGNATURE_LENGTH,
    failure_signature,
    normalised_message,
)
from jobs_platform.errors import AttemptTimedOut, InputValidationError, classify
from jobs_platform.store.attempts import crash_values
from jobs_platform.writer.rejected_value import RejectedValue
from orders_example.orders.landing import read_order_chunks

GOOD_LINE = (
    '{{"schema_version":1,"order_id":{id},"customer_id":1,"amount_cents":100,'
    '"currency":"{currency}","status":"{status}","ordered_at":"{day}T10:00:00Z"}}'
)
DAYS = ("2024-08-01", "2024-08-02", "2024-08-03")


def signed(exc: BaseException, *, asset: str = "orders", partition: str = "") -> str:
    """The signature the runner records for an attempt that raised `exc`."""
    verdict = classify(exc)
    return failure_signature(
        verdict.classification, type(exc).__name__, str(exc), asset=asset, partition=partition
    )


def reader_error(folder, day: str, lines: list[str]) -> BaseException:
    """What the orders reader raises on a landing file of `lines` for `day`."""
    path = folder / f"{day}.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    with pytest.raises(InputValidationError) as caught:
        for _chunk in read_order_chunks(str(path), day, chunk_rows=1000):
            pass
    return caught.value


def good_lines(day: str, count: int) -> list[str]:
    return [
        GOOD_LINE.format(id=n + 1, currency="USD", status="paid", day=day) for n in range(count)
    ]


def test_a_signature_is_twelve_hex_characters_and_stable():
    first = failure_signature("terminal", "InputValidationError", "line 3: bad")

    assert len(first) == SIGNATURE_LENGTH == 12
    assert int(first, 16) >= 0
    assert failure_signature("terminal", "InputValidationError", "line 3: bad") == first


def test_malformed_json_on_different_lines_of_different_days_is_one_cause(tmp_path):
    errors = [
        reader_error(tmp_path, day, [*good_lines(day, before), broken])
        for day, before, broken in zip(
            DAYS,
            (2, 57, 1000),
            (
                '{"schema_version": 1, "order_id": this is not JSON',
                '{"schema_version": 1, "order_id": this is not JSON',
                '{"order_id": 12, "customer_id": nope}',
            ),
            strict=True,
        )
    ]

    assert [e.line for e in errors] == [3, 58, 1001]
    assert len({signed(e, partition=day) for e, day in zip(errors, DAYS, strict=True)}) == 1


def test_an_unknown_currency_is_one_cause_whatever_the_value_line_and_day(tmp_path):
    errors = [
        reader_error(
            tmp_path,
            day,
            [*good_lines(day, line), GOOD_LINE.format(id=9, currency=code, status="paid", day=day)],
        )
        for day, line, code in zip(DAYS, (0, 41, 999), ("JPY", "CHF", "usd"), strict=True)
    ]

    assert "field 'currency': must be one of 'EUR', 'GBP', 'USD', got 'JPY'" in str(errors[0])
    assert len({signed(e, partition=day) for e, day in zip(errors, DAYS, strict=True)}) == 1


def test_a_refused_currency_and_a_refused_status_are_two_causes(tmp_path):
    day = DAYS[0]
    currency = reader_error(
        tmp_path, day, [GOOD_LINE.format(id=1, currency="JPY", status="paid", day=day)]
    )
    status = reader_error(
        tmp_path, day, [GOOD_LINE.format(id=1, currency="USD", status="lost", day=day)]
    )

    assert signed(currency, partition=day) != signed(status, partition=day)


def test_malformed_json_and_an_unknown_currency_are_two_causes(tmp_path):
    day = DAYS[0]
    malformed = reader_error(tmp_path, day, ["{nope"])
    currency = reader_error(
        tmp_path, day, [GOOD_LINE.format(id=1, currency="JPY", status="paid", day=day)]
    )

    assert signed(malformed, partition=day) != signed(currency, partition=day)


def test_a_missing_input_file_is_one_cause_whatever_the_day_and_landing_root(tmp_path):
    errors = []
    for root, day in ((tmp_path / "a", DAYS[0]), (tmp_path / "landing" / "b", DAYS[1])):
        with pytest.raises(Exception) as caught:
            next(read_order_chunks(str(root / "orders" / f"{day}.jsonl"), day, chunk_rows=10))
        errors.append((caught.value, day))

    assert str(errors[0][0]).startswith("no input: ")
    assert len({signed(e, partition=day) for e, day in errors}) == 1


def test_a_missing_input_file_and_malformed_json_are_two_causes(tmp_path):
    with pytest.raises(Exception) as missing:
        next(read_order_chunks(str(tmp_path / "nothing.jsonl"), DAYS[0], chunk_rows=10))
    malformed = reader_error(tmp_path, DAYS[0], ["{nope"])

    assert signed(missing.value, partition=DAYS[0]) != signed(malformed, partition=DAYS[0])


def http_errors(status: int, url: str) -> list[BaseException]:
    """The errors httpx and requests raise for a response of `status` from `url`."""
    raised = []
    response = httpx.Response(status, request=httpx.Request("GET", url), text='{"error": "x"}')
    with pytest.raises(httpx.HTTPStatusError) as by_httpx:
        response.raise_for_status()
    raised.append(by_httpx.value)
    old_style = requests.Response()
    old_style.status_code, old_style.url = status, url
    old_style.reason = {400: "Bad Request", 404: "Not Found"}[status]
    with pytest.raises(requests.HTTPError) as by_requests:
        old_style.raise_for_status()
    raised.append(by_requests.value)
    return raised


def test_an_http_404_is_one_cause_whatever_the_url_and_a_400_is_another():
    days = [f"https://api.example.com/v1/orders?day={day}&page=7" for day in DAYS[:2]]
    not_found = [[signed(e) for e in http_errors(404, url)] for url in days]
    bad_request = [[signed(e) for e in http_errors(400, url)] for url in days]

    # One cause per library (each words it its own way), whatever the URL.
    assert not_found[0] == not_found[1]
    assert bad_request[0] == bad_request[1]
    assert not set(not_found[0]) & set(bad_request[0])


def test_a_bare_http_status_in_a_message_is_part_of_the_cause():
    assert normalised_message("HTTP 404 for order 123") != normalised_message(
        "HTTP 400 for order 123"
    )
    assert normalised_message("HTTP 404 for order 123") == normalised_message(
        "HTTP 404 for order 98765"
    )


def database_error(connection: sa.Connection, statement: str, parameters) -> BaseException:
    with pytest.raises(sa.exc.DBAPIError) as caught, connection.begin_nested():
        connection.execute(sa.text(statement), parameters)
    return caught.value


@pytest.fixture
def pg_connection(pg_url):
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as connection:
        connection.execute(
            sa.text(
                "CREATE TEMPORARY TABLE refusals (id int PRIMARY KEY, n smallint, "
                "s text CHECK (s <> 'bad' AND s <> 'worse'), code varchar(3))"
            )
        )
        yield connection
    engine.dispose()


def test_sqlstate_errors_with_sqlalchemys_statement_and_parameters_sign_by_cause(
    pg_connection,
):
    insert_n = "INSERT INTO refusals (id, n) VALUES (:id, :n)"
    insert_s = "INSERT INTO refusals (id, s) VALUES (:id, :s)"
    out_of_range = [
        database_error(pg_connection, insert_n, {"id": 1, "n": 40_000}),
        database_error(pg_connection, insert_n, [{"id": 2, "n": 7}, {"id": 3, "n": 99_999}]),
    ]
    check = [
        database_error(pg_connection, insert_s, {"id": 4, "s": "bad"}),
        database_error(pg_connection, insert_s, {"id": 5, "s": "worse"}),
    ]
    pg_connection.execute(sa.text("INSERT INTO refusals (id) VALUES (6), (7)"))
    duplicate = [
        database_error(pg_connection, "INSERT INTO refusals (id) VALUES (:id)", {"id": key})
        for key in (6, 7)
    ]

    assert "[SQL: " in str(out_of_range[0]) and "[parameters: " in str(out_of_range[0])
    assert "Failing row contains" in str(check[0])
    assert [type(e.orig).__name__ for e in (out_of_range[0], check[0], duplicate[0])] == [
        "NumericValueOutOfRange",
        "CheckViolation",
        "UniqueViolation",
    ]
    signatures = [
        {signed(e, partition=day) for e, day in zip(errors, DAYS, strict=False)}
        for errors in (out_of_range, check, duplicate)
    ]
    assert [len(one_cause) for one_cause in signatures] == [1, 1, 1]
    assert len(set.union(*signatures)) == 3


def test_a_value_the_warehouse_refuses_is_one_cause_per_column_and_problem():
    def refused(column: str, value: str, chunk: int, row: int) -> RejectedValue:
        problem = f"{value} is out of range for BIGINT"
        return RejectedValue(problem, row=f"line {row}", column=column).in_chunk(chunk)

    refusals = (("-9e30", 0, 4), ("1e40", 3, 19))
    same = {signed(refused("amount_cents", value, chunk, row)) for value, chunk, row in refusals}
    other_column = signed(refused("order_id", "1e40", 3, 19))

    assert len(same) == 1
    assert other_column not in same


def test_a_crash_and_a_passed_deadline_are_each_one_cause_on_every_partition():
    crash = crash_values(dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    crashes = {
        failure_signature("crash", str(crash["error_type"]), str(crash["message"]), partition=day)
        for day in DAYS
    }
    deadlines = {
        signed(AttemptTimedOut(f"attempt on orders/{day} passed its deadline"), partition=day)
        for day in DAYS
    }

    assert len(crashes) == len(deadlines) == 1
    assert crashes != deadlines


def test_a_missing_key_names_its_cause():
    assert signed(KeyError("currency")) != signed(KeyError("status"))
    assert signed(KeyError("currency"), partition="2024-01-01") == signed(
        KeyError("currency"), partition="2024-01-02"
    )


def test_a_partition_key_of_several_dimensions_and_a_prefixed_asset_are_placeholders():
    message = "acme/events 2024-03-03|apac: no input for acme/events at 2024-03-03|apac"

    assert normalised_message(message, asset="acme/events", partition="2024-03-03|apac") == (
        "<asset> <partition>: no input for <asset> at <partition>"
    )


REFUSED_VALUES = st.one_of(
    st.text(max_size=80),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    line=st.integers(min_value=1, max_value=10**9),
    day=st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)),
    value=REFUSED_VALUES,
)
def test_an_unknown_currency_signs_alike_for_any_value_line_and_day(line, day, value):
    # As the reader words it (`landing._invalid`, `_shown`): the value's repr, cut at 60.
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    error = InputValidationError(
        f"must be one of 'EUR', 'GBP', 'USD', got {shown}", line=line, field="currency"
    )
    baseline = InputValidationError(
        "must be one of 'EUR', 'GBP', 'USD', got 'JPY'", line=3, field="currency"
    )

    assert signed(error, partition=day.isoformat()) == signed(baseline, partition="2024-08-01")


@settings(max_examples=200, deadline=None)
@given(
    fields=st.lists(
        st.sampled_from(
            [
                "schema_version",
                "order_id",
                "customer_id",
                "amount_cents",
                "currency",
                "status",
                "ordered_at",
            ]
        ),
        min_size=2,
        max_size=2,
        unique=True,
    ),
    line=st.integers(min_value=1, max_value=10**6),
)
def test_the_same_problem_in_two_fields_is_two_causes(fields, line):
    first, second = (
        InputValidationError("required field is missing", line=line, field=field)
        for field in fields
    )

    assert signed(first) != signed(second)


def test_a_static_partition_key_is_replaced_as_a_word_only():
    message = "line 3, field 'status': no data for region us"

    assert normalised_message(message, partition="us") == (
        "line <n>, field 'status': no data for region <partition>"
    )


def test_an_asset_named_in_a_path_or_as_a_table_is_the_same_cause_on_every_asset():
    programming = (
        "TypeError in parse_row() at /srv/app/readers/orders.py:88: unsupported operand "
        "type(s) for +: 'int' and 'str'"
    )
    missing_column = 'column "discount_cents" of table "orders" does not exist in the warehouse'

    for message in (programming, missing_column):
        assert len({failure_signature("terminal", "E", message, asset=a) for a in (
            "orders", "daily_revenue", "acme/events")}) == 1  # fmt: skip
