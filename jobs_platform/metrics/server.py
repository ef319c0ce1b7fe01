"""`/metrics` over HTTP: Prometheus's text (or OpenMetrics) format, one small WSGI app.

`/metrics` serves the registry through `prometheus_client` (content negotiation and gzip
are its own); `/` says where to look; anything else is 404. A reading the warehouse
refuses answers 503 with one line naming why (the URL's password never appears), so
Prometheus marks the target down (`up == 0`) instead of keeping old figures.
"""

from __future__ import annotations

import logging
import socket
import socketserver
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from jobs_platform.metrics import DEFAULT_HOST, DEFAULT_PORT, METRICS_PATH

log = logging.getLogger("jobs_platform.metrics")


def metrics_app(registry: CollectorRegistry) -> Callable:
    """The WSGI application of `metrics serve`."""
    prometheus = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == METRICS_PATH:
            try:
                # prometheus_client renders the whole body before it starts the response.
                return prometheus(environ, start_response)
            except Exception as error:  # the warehouse, not the request, is at fault
                reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
                log.warning("metrics reading failed: %s", reason)
                return _text(start_response, "503 Service Unavailable", f"{reason}\n")
        if path == "/":
            return _text(start_response, "200 OK", f"jobs_platform metrics: {METRICS_PATH}\n")
        return _text(start_response, "404 Not Found", f"not found; try {METRICS_PATH}\n")

    return app


def _text(start_response: Callable, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per scrape, so a slow client never holds up the others."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape (once a second is noise, not news)."""

    def log_message(self, format, *args) -> None:
        pass


class _ThreadingServerV6(_ThreadingServer):
    address_family = socket.AF_INET6


def bind(app: Callable, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> WSGIServer:
    """A bound server (port 0 picks a free one: see `server.server_port`); not yet serving."""
    server_class = _ThreadingServerV6 if ":" in host else _ThreadingServer
    return make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
