"""Real local receivers for alerts (HTTP, SMTP, a server that never answers) and factories of
quarantine entries."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter
from jobs_platform.errors import Classification
from jobs_platform.store.attempts import AttemptFailure, Attempts
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import current_episode
from jobs_platform.store.schema import EntryStatus, quarantine


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """A real HTTP server on 127.0.0.1 that records every POST and answers as told."""

    url: str
    requests: list[ReceivedRequest] = field(default_factory=list)
    # Statuses to answer with, first to last; 200 once they run out.
    planned_statuses: list[int] = field(default_factory=list)
    response_body: bytes = b'{"ok": true}'
    # Sent with every planned failure when set.
    retry_after: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, status: int, times: int = 1) -> None:
        with self.lock:
            self.planned_statuses.extend([status] * times)

    def keys(self) -> list[str | None]:
        return [request.headers.get("idempotency-key") for request in self.requests]


@contextmanager
def http_receiver() -> Iterator[HttpReceiver]:
    receiver: HttpReceiver

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with receiver.lock:
                receiver.requests.append(
                    ReceivedRequest(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                status = receiver.planned_statuses.pop(0) if receiver.planned_statuses else 200
            self.send_response(status)
            if status >= 300 and receiver.retry_after is not None:
                self.send_header("Retry-After", receiver.retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(receiver.response_body)))
            self.end_headers()
            self.wfile.write(receiver.response_body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = HttpReceiver(url=f"http://127.0.0.1:{server.server_address[1]}/hooks/quarantine")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class SilentServer:
    """A real server on 127.0.0.1 that reads each request and never answers: a dead Slack
    behind a load balancer, found out only by the client's timeout."""

    url: str
    connections: int = 0


@contextmanager
def silent_server() -> Iterator[SilentServer]:
    server_socket = socket.create_server(("127.0.0.1", 0))
    server_socket.settimeout(0.05)
    silent = SilentServer(url=f"http://127.0.0.1:{server_socket.getsockname()[1]}")
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server_socket.accept()
            except TimeoutError:
                continue
            silent.connections += 1
            held.append(connection)  # kept open, unanswered, until the server stops

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield silent
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server_socket.close()


@dataclass
class SmtpReceiver:
    host: str
    port: int
    messages: list[dict] = field(default_factory=list)


@contextmanager
def smtp_receiver() -> Iterator[SmtpReceiver]:
    """A minimal real SMTP server (EHLO, MAIL, RCPT, DATA, QUIT) recording each message."""
    receiver: SmtpReceiver

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self._say("220 test SMTP ready")
            sender, recipients = None, []
            while line := self.rfile.readline().decode().rstrip("\r\n"):
                verb = line.split(" ", 1)[0].upper()
                if verb in ("EHLO", "HELO"):
                    self._say("250 test")
                elif verb == "MAIL":
                    sender = line.split(":", 1)[1].strip()
                    self._say("250 OK")
                elif verb == "RCPT":
                    recipients.append(line.split(":", 1)[1].strip())
                    self._say("250 OK")
                elif verb == "DATA":
                    self._say("354 end with .")
                    data = []
                    while (row := self.rfile.readline().decode()) not in (".\r\n", ""):
                        data.append(row)
                    receiver.messages.append(
                        {"from": sender, "to": recipients, "data": "".join(data)}
                    )
                    self._say("250 queued")
                elif verb == "QUIT":
                    self._say("221 bye")
                    return
                else:
                    self._say("250 OK")

        def _say(self, text: str) -> None:
            self.wfile.write(f"{text}\r\n".encode())

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = SmtpReceiver("127.0.0.1", server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def quarantine_entry(
    engine: sa.Engine,
    asset: str = "orders",
    partition: str = "2024-01-05",
    *,
    failures: int = 2,
    error_class: Classification = Classification.RETRYABLE,
    message: str = "connection reset by peer",
) -> int:
    """Record `failures` failed attempts at the partition and quarantine it; the entry id."""
    with engine.begin() as connection:
        episode = current_episode(connection, asset, partition)
        for number in range(failures):
            attempt_id, _ = Attempts(DATABASE_CLOCK).start(
                connection,
                asset=asset,
                partition=partition,
                episode=episode,
                run_id=f"run-{number}",
                step_retry=number,
                token=number + 1,
                holder="test",
                correlation_id=None,
            )
            Attempts(DATABASE_CLOCK).finish(
                connection, attempt_id, AttemptFailure(error_class, "ConnectionError", message)
            )
        return DeadLetter(DATABASE_CLOCK).quarantine_partition(
            connection, asset, partition, episode
        )


def bulk_quarantine_entries(engine: sa.Engine, count: int, asset: str = "orders") -> int:
    """Insert `count` quarantined entries directly (fast); returns the highest id."""
    now = dt.datetime.now(dt.UTC)
    rows = [
        {
            "asset": asset,
            "partition": f"bulk-{number:06d}",
            "episode": 1,
            "status": EntryStatus.QUARANTINED,
            "attempts": 1,
            "error_class": "terminal",
            "last_error": "bulk",
            "first_failed_at": now,
            "last_failed_at": now,
            "quarantined_at": now,
        }
        for number in range(count)
    ]
    with engine.begin() as connection:
        connection.execute(sa.insert(quarantine), rows)
        return connection.execute(sa.select(sa.func.max(quarantine.c.id))).scalar_one()
