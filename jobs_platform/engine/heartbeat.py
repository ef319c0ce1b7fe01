"""The heartbeat: renews a lease while an attempt works, until the attempt's deadline."""

from __future__ import annotations

import logging
import threading
import time

import sqlalchemy as sa

from jobs_platform.store.leases import Lease, renew_lease

log = logging.getLogger(__name__)


class Heartbeat:
    """Renews `lease` every third of its TTL; stops at `deadline` so a hung attempt loses it."""

    def __init__(self, engine: sa.Engine, lease: Lease, ttl_seconds: float, deadline: float):
        self._engine = engine
        self._lease = lease
        self._ttl = ttl_seconds
        self._deadline = deadline  # time.monotonic() value
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name="jobs-platform-heartbeat", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=self._ttl)

    @property
    def past_deadline(self) -> bool:
        return time.monotonic() >= self._deadline

    def _beat(self) -> None:
        interval = self._ttl / 3
        while not self._stop.wait(interval):
            if self.past_deadline:
                log.warning("attempt passed its deadline; no longer renewing %s", self._lease)
                return
            try:
                if not renew_lease(self._engine, self._lease, self._ttl):
                    self.lost.set()
                    return
            except sa.exc.SQLAlchemyError as exc:
                # A missed beat is not fatal: the lease outlives two of them, and the
                # fence check at commit is what guarantees safety.
                log.warning("heartbeat for %s failed: %s", self._lease, exc)
