"""Metrics an operations team collects: the warehouse's figures as a Prometheus endpoint.

`reader` reads them set-based from the warehouse alone (no Dagster); `exposition` turns
a reading into Prometheus metric families, read at most once per short interval however
many scrape; `server` serves them at `/metrics` (`jobs-platform metrics serve`).
"""

METRICS_PATH = "/metrics"
DEFAULT_HOST = "127.0.0.1"  # loopback unless told: the figures name the assets of a warehouse
DEFAULT_PORT = 9464  # the port OpenTelemetry's Prometheus exporters use by convention
