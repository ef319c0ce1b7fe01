"""A TCP proxy between the processes under test and PostgreSQL, which a test can cut.

`cut()` drops every connection through it and refuses new ones (the port closes, so a
client sees "connection refused"), as a warehouse behind a failed network or a restarting
server does; `restore()` listens on the same port again. Threads, one per direction of
each connection: the tests push little data through it.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class TcpProxy:
    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 5432)):
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None

    def __enter__(self) -> TcpProxy:
        self.restore()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cut()

    def url(self, database_url: str) -> str:
        """`database_url` (on the target) through this proxy."""
        import sqlalchemy as sa

        url = sa.make_url(database_url)
        return url.set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._connections |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._connections -= {source, sink}
