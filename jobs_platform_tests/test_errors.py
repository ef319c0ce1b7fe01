"""Specifications of the error taxonomy, provoked with real databases, sockets and HTTP."""

from __future__ import annotations

import inspect
import json
import pickle
import socket
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import httpx
import pandas as pd
import psycopg
import psycopg.sql
import pydantic
import pytest
import sqlalchemy as sa

from jobs_platform.errors import (
    AttemptInterrupted,
    AttemptTimedOut,
    Classification,
    InputValidationError,
    JobsPlatformError,
    LeaseLostError,
    RetryableError,
    TerminalError,
    Verdict,
    as_recorded,
    classify,
    parse_retry_after,
)
from jobs_platform.writer.copy_text import copy_text

RETRYABLE = Classification.RETRYABLE
TERMINAL = Classification.TERMINAL


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.NullPool)


def _create_accounts(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE accounts (id int PRIMARY KEY, balance int)"))
        connection.execute(sa.text("INSERT INTO accounts VALUES (1, 0), (2, 0)"))


def _closed_port() -> int:
    """A local port nothing listens on: bound once to learn a free number, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# PostgreSQL


def test_real_serialization_failure_is_retryable(pg_url):
    engine = _engine(pg_url)
    _create_accounts(engine)
    serializable = engine.execution_options(isolation_level="SERIALIZABLE")
    # Write skew: each transaction reads the row the other one writes, so one must fail.
    with serializable.connect() as first, serializable.connect() as second:
        first.begin()
        second.begin()
        first.execute(sa.text("SELECT balance FROM accounts WHERE id = 2"))
        second.execute(sa.text("SELECT balance FROM accounts WHERE id = 1"))
        first.execute(sa.text("UPDATE accounts SET balance = 1 WHERE id = 1"))
        second.execute(sa.text("UPDATE accounts SET balance = 1 WHERE id = 2"))
        first.commit()
        with pytest.raises(sa.exc.DBAPIError) as caught:
            second.commit()
    engine.dispose()

    verdict = classify(caught.value)

    assert verdict.classification is RETRYABLE
    assert "40001" in verdict.reason


def test_real_deadlock_is_retryable(pg_url):
    engine = _engine(pg_url)
    _create_accounts(engine)
    both_hold_their_first_lock = threading.Barrier(2, timeout=10)
    failures: list[BaseException] = []

    def lock_in_order(first_id: int, second_id: int) -> None:
        try:
            with engine.connect() as connection, connection.begin():
                # A short deadlock_timeout keeps the test fast; lock_timeout keeps a missed
                # deadlock from hanging it (it would then fail with 55P03 instead).
                connection.execute(sa.text("SET LOCAL deadlock_timeout = '100ms'"))
                connection.execute(sa.text("SET LOCAL lock_timeout = '10s'"))
                update = sa.text("UPDATE accounts SET balance = balance + 1 WHERE id = :id")
                connection.execute(update, {"id": first_id})
                both_hold_their_first_lock.wait()
                connection.execute(update, {"id": second_id})
        except BaseException as exc:
            failures.append(exc)

    workers = [
        threading.Thread(target=lock_in_order, args=(1, 2)),
        threading.Thread(target=lock_in_order, args=(2, 1)),
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    engine.dispose()

    assert len(failures) == 1, failures
    verdict = classify(failures[0])
    assert verdict.classification is RETRYABLE
    assert "40P01" in verdict.reason


def test_real_lock_not_available_is_retryable(pg_url):
    engine = _engine(pg_url)
    _create_accounts(engine)
    lock_row = sa.text("SELECT * FROM accounts WHERE id = 1 FOR UPDATE NOWAIT")
    with engine.connect() as holder, engine.connect() as contender:
        holder.begin()
        holder.execute(lock_row)
        with pytest.raises(sa.exc.DBAPIError) as caught:
            contender.execute(lock_row)
    engine.dispose()

    verdict = classify(caught.value)

    assert verdict.classification is RETRYABLE
    assert "55P03" in verdict.reason


def test_connection_terminated_by_admin_is_retryable(pg_url):
    engine = _engine(pg_url)
    with engine.connect() as victim, engine.connect() as admin:
        pid = victim.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(sa.exc.DBAPIError) as caught:
            victim.execute(sa.text("SELECT 1"))
    engine.dispose()

    assert classify(caught.value).classification is RETRYABLE


def test_real_connection_refused_by_postgres_url_is_retryable():
    engine = _engine(f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/x")
    with pytest.raises(sa.exc.OperationalError) as caught:
        engine.connect()

    assert classify(caught.value).classification is RETRYABLE


def test_real_connection_refused_by_socket_is_retryable():
    with pytest.raises(ConnectionRefusedError) as caught:
        socket.create_connection(("127.0.0.1", _closed_port()), timeout=5)

    assert classify(caught.value).classification is RETRYABLE


def test_real_socket_timeout_is_retryable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.create_connection(server.getsockname(), timeout=0.05)
        with client, pytest.raises(TimeoutError) as caught:
            client.recv(1)  # the server accepts nothing and sends nothing

    assert classify(caught.value).classification is RETRYABLE


def test_real_unique_violation_is_terminal(pg_url):
    engine = _engine(pg_url)
    _create_accounts(engine)
    with pytest.raises(sa.exc.IntegrityError) as caught, engine.begin() as connection:
        connection.execute(sa.text("INSERT INTO accounts VALUES (1, 5)"))
    engine.dispose()

    verdict = classify(caught.value)

    assert verdict.classification is TERMINAL
    assert "23505" in verdict.reason


@pytest.mark.parametrize(
    ("statement", "sqlstate"),
    [
        ("SELECT CAST(:value AS integer)", "22P02"),  # invalid text representation
        ("SELECT 1 / CAST(:value AS integer)", "22012"),  # division by zero
    ],
)
def test_real_data_error_is_terminal(pg_url, statement, sqlstate):
    engine = _engine(pg_url)
    value = "abc" if sqlstate == "22P02" else "0"
    with pytest.raises(sa.exc.DBAPIError) as caught, engine.connect() as connection:
        connection.execute(sa.text(statement), {"value": value})
    engine.dispose()

    verdict = classify(caught.value)

    assert verdict.classification is TERMINAL
    assert sqlstate in verdict.reason


def test_raw_psycopg_error_is_classified_by_its_sqlstate(pg_url):
    conninfo = sa.make_url(pg_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(conninfo) as connection, pytest.raises(psycopg.Error) as caught:
        connection.execute("SELECT 1 / 0")

    verdict = classify(caught.value)

    assert verdict.classification is TERMINAL
    assert "22012" in verdict.reason


# SQLite


def test_sqlite_integrity_error_without_sqlstate_is_terminal(sqlite_url):
    engine = _engine(sqlite_url)
    _create_accounts(engine)
    with pytest.raises(sa.exc.IntegrityError) as caught, engine.begin() as connection:
        connection.execute(sa.text("INSERT INTO accounts VALUES (1, 5)"))
    engine.dispose()

    assert classify(caught.value).classification is TERMINAL


def test_sqlite_database_is_locked_is_retryable(sqlite_url):
    engine = sa.create_engine(sqlite_url, poolclass=sa.NullPool, connect_args={"timeout": 0})
    _create_accounts(engine)
    with engine.connect() as holder, engine.connect() as contender:
        holder.exec_driver_sql("BEGIN IMMEDIATE")
        with pytest.raises(sa.exc.OperationalError) as caught:
            contender.exec_driver_sql("BEGIN IMMEDIATE")
        holder.rollback()
    engine.dispose()

    assert "locked" in str(caught.value)
    assert classify(caught.value).classification is RETRYABLE


def test_sqlite_syntax_error_is_terminal_without_a_deploy_step(sqlite_url):
    engine = _engine(sqlite_url)
    with pytest.raises(sa.exc.OperationalError) as caught, engine.connect() as connection:
        connection.execute(sa.text("SELEC 1"))
    engine.dispose()

    verdict = classify(caught.value)

    assert verdict == Verdict(
        TERMINAL,
        None,
        "SQLite error like SQLSTATE 42601 syntax error, a bug in code",
        sqlstate="42601",
    )


def test_raw_sqlite_integrity_error_is_terminal():
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (id int PRIMARY KEY)")
    connection.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as caught:
        connection.execute("INSERT INTO t VALUES (1)")
    connection.close()

    assert classify(caught.value).classification is TERMINAL


# HTTP against a real local server

_RETRY_AT = "retry-at"  # path whose Retry-After is an HTTP-date 30 s ahead


class _ScriptedHandler(BaseHTTPRequestHandler):
    """Answers GET /<status>[/<retry-after>] with that status; /slow sleeps, /hangup hangs up."""

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] == "slow":
            time.sleep(1)
            return
        if parts[0] == "hangup":
            self.close_connection = True
            return
        self.send_response(int(parts[0]))
        if len(parts) > 1:
            retry_after = parts[1]
            if retry_after == _RETRY_AT:
                retry_after = format_datetime(datetime.now(UTC) + timedelta(seconds=30), True)
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture(scope="module")
def http_base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _http_error(url: str) -> httpx.HTTPStatusError:
    response = httpx.get(url, timeout=5)
    with pytest.raises(httpx.HTTPStatusError) as caught:
        response.raise_for_status()
    return caught.value


def test_http_429_is_retryable_after_the_seconds_the_server_asked_for(http_base_url):
    assert classify(_http_error(f"{http_base_url}/429/7")) == Verdict(RETRYABLE, 7.0, "HTTP 429")


def test_http_429_honours_a_retry_after_http_date(http_base_url):
    verdict = classify(_http_error(f"{http_base_url}/429/{_RETRY_AT}"))

    assert verdict.classification is RETRYABLE
    # HTTP-dates have one-second resolution and the request itself takes a moment.
    assert 27.0 <= verdict.retry_after <= 31.0


def test_http_429_without_retry_after_is_retryable_with_no_delay(http_base_url):
    assert classify(_http_error(f"{http_base_url}/429")) == Verdict(RETRYABLE, None, "HTTP 429")


def test_http_503_is_retryable_and_honours_retry_after(http_base_url):
    assert classify(_http_error(f"{http_base_url}/503")) == Verdict(RETRYABLE, None, "HTTP 503")
    assert classify(_http_error(f"{http_base_url}/503/2")).retry_after == 2.0


@pytest.mark.parametrize("status", [408, 500, 502, 504])
def test_http_transient_statuses_are_retryable(http_base_url, status):
    assert classify(_http_error(f"{http_base_url}/{status}")).classification is RETRYABLE


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_http_other_client_errors_are_terminal(http_base_url, status):
    verdict = classify(_http_error(f"{http_base_url}/{status}"))

    assert verdict == Verdict(TERMINAL, None, f"HTTP {status}")


def test_http_retry_after_is_ignored_on_statuses_that_do_not_promise_it(http_base_url):
    assert classify(_http_error(f"{http_base_url}/404/7")).retry_after is None


def test_httpx_timeout_is_retryable(http_base_url):
    with pytest.raises(httpx.TimeoutException) as caught:
        httpx.get(f"{http_base_url}/slow", timeout=0.1)

    assert classify(caught.value).classification is RETRYABLE


def test_httpx_connection_refused_is_retryable():
    with pytest.raises(httpx.ConnectError) as caught:
        httpx.get(f"http://127.0.0.1:{_closed_port()}/", timeout=5)

    assert classify(caught.value).classification is RETRYABLE


def test_server_hanging_up_without_a_response_is_retryable(http_base_url):
    with pytest.raises(httpx.RemoteProtocolError) as caught:
        httpx.get(f"{http_base_url}/hangup", timeout=5)

    assert classify(caught.value).classification is RETRYABLE


class _RequestsStyleHTTPError(OSError):
    """Shaped like requests.HTTPError, which the platform must recognise without importing."""

    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(f"{status_code} error")
        self.response = SimpleNamespace(status_code=status_code, headers=headers)


def test_requests_style_http_error_is_classified_by_duck_typing():
    throttled = _RequestsStyleHTTPError(429, {"Retry-After": "5"})

    assert classify(throttled) == Verdict(RETRYABLE, 5.0, "HTTP 429")
    assert classify(_RequestsStyleHTTPError(404, {})).classification is TERMINAL


def test_a_response_attribute_that_raises_does_not_break_classify():
    class Hostile(Exception):
        @property
        def response(self):
            raise RuntimeError("no response here")

    assert classify(Hostile()).classification is Classification.UNKNOWN


# Python's own errors


def test_malformed_json_is_terminal():
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads("{not json")

    assert classify(caught.value).classification is TERMINAL


def test_pydantic_validation_error_is_terminal():
    class Payment(pydantic.BaseModel):
        amount_cents: pydantic.NonNegativeInt

    with pytest.raises(pydantic.ValidationError) as caught:
        Payment(amount_cents=-1)

    assert classify(caught.value).classification is TERMINAL


def test_undecodable_bytes_are_terminal():
    with pytest.raises(UnicodeDecodeError) as caught:
        b"\xff\xfe\xfa".decode("utf-8")

    assert classify(caught.value).classification is TERMINAL


def test_missing_input_file_is_terminal(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        (tmp_path / "missing.jsonl").read_text()

    assert classify(caught.value).classification is TERMINAL


# A programming error: terminal when the user's code made it, recorded naming where


def _raised(function: Callable[[], object]) -> BaseException:
    try:
        function()
    except BaseException as error:  # what a reader raises, as the runner catches it
        return error
    raise AssertionError(f"{function.__name__} raised nothing")


def _adds_a_number_to_text() -> object:
    total = 1
    return total + "1"


def _reads_an_undefined_name() -> object:
    return undefined_name  # noqa: F821


def _reads_a_local_before_assigning_it() -> object:
    if False:
        late = 1
    return late


def _reads_an_attribute_of_none() -> object:
    row = None
    return row.amount


def _imports_a_missing_module() -> object:
    import jobs_platform_no_such_module  # noqa: F401

    return None


def _imports_a_missing_name() -> object:
    from json import no_such_name  # noqa: F401

    return None


def _compiles_broken_code() -> object:
    return compile("amount =", "<generated>", "exec")


def _is_not_written_yet() -> object:
    raise NotImplementedError("read the new source")


@pytest.mark.parametrize(
    ("function", "error_type"),
    [
        (_adds_a_number_to_text, TypeError),
        (_reads_an_undefined_name, NameError),
        (_reads_a_local_before_assigning_it, UnboundLocalError),
        (_reads_an_attribute_of_none, AttributeError),
        (_imports_a_missing_module, ModuleNotFoundError),
        (_imports_a_missing_name, ImportError),
        (_compiles_broken_code, SyntaxError),
        (_is_not_written_yet, NotImplementedError),
    ],
)
def test_a_programming_error_raised_by_user_code_is_terminal(function, error_type):
    error = _raised(function)

    assert type(error) is error_type
    verdict = classify(error)
    assert verdict.classification is TERMINAL
    assert verdict.reason == f"programming error in user code ({error_type.__name__})"


def _line_of(function: Callable[..., object], text: str) -> int:
    """The line of `function`'s source holding `text`."""
    lines, first = inspect.getsourcelines(function)
    return first + next(n for n, line in enumerate(lines) if text in line)


def test_a_programming_error_is_recorded_naming_its_function_file_and_line():
    error = _raised(_adds_a_number_to_text)

    recorded = as_recorded(error, classify(error))

    line = _line_of(_adds_a_number_to_text, 'total + "1"')
    assert type(recorded) is TypeError
    assert str(recorded) == (f"TypeError in _adds_a_number_to_text() at {__file__}:{line}: {error}")
    assert recorded.__cause__ is error  # the recorded traceback still shows the original
    assert classify(recorded).classification is TERMINAL


def test_a_method_is_named_with_its_class():
    class Reader:
        def read(self) -> object:
            return None.amount

    error = _raised(Reader().read)

    assert "AttributeError in test_a_method_is_named_with_its_class.<locals>.Reader.read() at " in (
        str(as_recorded(error, classify(error)))
    )


def _parses_nothing() -> object:
    return json.loads(None)


def _builds_sql_from_a_number() -> object:
    return sa.text(5)


def _quotes_a_number_as_an_identifier() -> object:
    return psycopg.sql.Identifier(5)


@pytest.mark.parametrize(
    ("function", "text"),
    [
        (_parses_nothing, "json.loads(None)"),  # raised in the standard library
        (_builds_sql_from_a_number, "sa.text(5)"),  # raised in SQLAlchemy
        (_quotes_a_number_as_an_identifier, "Identifier(5)"),  # raised in psycopg
    ],
)
def test_a_programming_error_a_library_raised_for_user_code_names_the_users_function(
    function, text
):
    error = _raised(function)

    assert classify(error).classification is TERMINAL
    recorded = str(as_recorded(error, classify(error)))
    assert f" in {function.__name__}() at {__file__}:{_line_of(function, text)}: " in recorded


def test_a_programming_error_raised_inside_the_framework_is_not_the_users():
    # The framework's own bug: `parse_retry_after` given a number fails in jobs_platform.
    error = _raised(lambda: parse_retry_after(5))

    assert type(error) is AttributeError
    assert classify(error) == Verdict(Classification.UNKNOWN, None, "unclassified AttributeError")
    assert as_recorded(error, classify(error)) is error


def test_a_programming_error_a_library_raised_for_the_framework_is_not_the_users():
    # The writer hands SQLAlchemy what it has; SQLAlchemy fails: the framework called it.
    error = _raised(lambda: copy_text(pd.DataFrame({"amount": [1]}), [sa.Integer()], None))

    assert type(error) is AttributeError
    assert "sqlalchemy" in traceback.extract_tb(error.__traceback__)[-1].filename
    assert classify(error).classification is Classification.UNKNOWN


def test_a_programming_error_never_raised_has_no_author_and_stays_unknown():
    assert classify(TypeError("built, not raised")).classification is Classification.UNKNOWN


def test_a_programming_error_wrapped_by_user_code_is_terminal_through_its_cause():
    def wrapped() -> object:
        try:
            return _adds_a_number_to_text()
        except TypeError as error:
            raise RuntimeError("could not total the day") from error

    verdict = classify(_raised(wrapped))

    assert verdict.classification is TERMINAL
    assert verdict.reason.endswith("the cause of RuntimeError")


@pytest.mark.parametrize(
    "function",
    [lambda: {}["amount"], lambda: [][0]],
    ids=["KeyError", "IndexError"],
)
def test_a_missing_key_or_index_stays_unknown(function):
    # Often the shape of a transient answer (an API's error payload lacks the expected
    # key): retried within the budget, not quarantined at once.
    assert classify(_raised(function)).classification is Classification.UNKNOWN


def test_plain_value_error_is_unknown():
    verdict = classify(ValueError("surprise"))

    assert verdict == Verdict(Classification.UNKNOWN, None, "unclassified ValueError")


def test_unknown_error_is_classified_by_its_explicit_cause():
    try:
        try:
            raise TimeoutError("upstream slow")
        except TimeoutError as timeout:
            raise RuntimeError("fetch failed") from timeout
    except RuntimeError as wrapped:
        verdict = classify(wrapped)

    assert verdict.classification is RETRYABLE
    assert "RuntimeError" in verdict.reason


def test_implicit_context_is_not_used_to_classify():
    # What `raise` inside an `except` block sets: the new error may be unrelated to the old.
    bug_in_handler = RuntimeError("bug in the handler")
    bug_in_handler.__context__ = TimeoutError("upstream slow")

    assert classify(bug_in_handler).classification is Classification.UNKNOWN


def test_a_cyclic_cause_chain_ends_as_unknown():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first

    assert classify(first).classification is Classification.UNKNOWN


def test_keyboard_interrupt_is_interrupted():
    assert classify(KeyboardInterrupt()).classification is Classification.INTERRUPTED


# The platform's own errors


def test_retryable_error_is_retryable_with_its_retry_after():
    assert classify(RetryableError("busy upstream", retry_after=3)).retry_after == 3.0
    assert classify(RetryableError("busy upstream")).classification is RETRYABLE


def test_attempt_timed_out_is_retryable():
    assert classify(AttemptTimedOut("deadline passed")).classification is RETRYABLE


def test_terminal_error_is_terminal():
    assert classify(TerminalError("unknown schema version 9")).classification is TERMINAL


def test_terminal_error_outranks_a_retryable_cause():
    try:
        raise TerminalError("gave up on purpose") from TimeoutError()
    except TerminalError as exc:
        assert classify(exc).classification is TERMINAL


def test_input_validation_error_is_terminal_and_names_the_line_and_field():
    exc = InputValidationError("must be >= 0", line=7, field="amount_cents")

    assert str(exc) == "line 7, field 'amount_cents': must be >= 0"
    assert (exc.line, exc.field, exc.detail) == (7, "amount_cents", "must be >= 0")
    assert classify(exc).classification is TERMINAL
    assert str(InputValidationError("empty file")) == "empty file"


def test_lease_lost_error_is_lease_lost():
    assert classify(LeaseLostError("token 4 superseded")).classification is (
        Classification.LEASE_LOST
    )


def test_attempt_interrupted_is_interrupted():
    assert classify(AttemptInterrupted("SIGTERM")).classification is Classification.INTERRUPTED


def test_platform_errors_survive_pickling_with_their_fields():
    retryable = pickle.loads(pickle.dumps(RetryableError("busy", retry_after=3)))
    invalid = pickle.loads(pickle.dumps(InputValidationError("bad", line=2, field="id")))

    assert retryable.retry_after == 3
    assert (str(invalid), invalid.line, invalid.field) == ("line 2, field 'id': bad", 2, "id")


def test_all_platform_errors_share_one_base():
    for error_type in (RetryableError, TerminalError, LeaseLostError, AttemptInterrupted):
        assert issubclass(error_type, JobsPlatformError)


def test_classifications_are_spelled_as_in_the_design():
    assert [c.value for c in Classification] == [
        "retryable",
        "terminal",
        "crash",
        "lease_lost",
        "interrupted",
        "unknown",
    ]


# parse_retry_after


@pytest.mark.parametrize("value", [None, "", "   ", "soon", "Fri, 99 Foo 2024", "nan", "inf"])
def test_unusable_retry_after_is_none(value):
    assert parse_retry_after(value) is None


@pytest.mark.parametrize(("value", "seconds"), [("7", 7.0), (" 120 ", 120.0), ("-5", 0.0)])
def test_retry_after_seconds_are_parsed_and_never_negative(value, seconds):
    assert parse_retry_after(value) == seconds


def test_retry_after_http_date_is_seconds_from_now():
    now = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)

    assert parse_retry_after("Fri, 01 Mar 2024 12:00:45 GMT", now=now) == 45.0


def test_retry_after_http_date_in_the_past_means_now():
    now = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)

    assert parse_retry_after("Fri, 01 Mar 2024 11:00:00 GMT", now=now) == 0.0
