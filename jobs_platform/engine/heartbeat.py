"""The heartbeat: renews a lease while an attempt works, until the attempt's deadline.

Every renewal is bounded (PostgreSQL gives up on a lock or statement after a third of the
TTL), so the thread always notices that it was told to stop, and `__exit__` waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.store.leases import Lease

log = logging.getLogger(__name__)

# Headroom over one bounded renewal for the thread to notice `stop` and return.
_SHUTDOWN_MARGIN_SECONDS = 5.0


class Heartbeat:
    """Renews `lease` every third of its TTL; stops at `deadline` so a hung attempt loses it."""

    def __init__(
        self,
        store: Warehouse,
        lease: Lease,
        ttl_seconds: float,
        deadline: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._store = store
        self._lease = lease
        self._ttl = ttl_seconds
        self._deadline = deadline  # a `monotonic()` value
        self._monotonic = monotonic
        # A renewal that takes longer than the interval is a missed beat, not a wait.
        self.call_timeout_seconds = ttl_seconds / 3
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name="jobs-platform-heartbeat", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.call_timeout_seconds + _SHUTDOWN_MARGIN_SECONDS)
        if self._thread.is_alive():
            # Only a connection stuck below PostgreSQL's own timeouts gets here; the thread
            # is a daemon and its renewal cannot extend a released lease (expiry is past).
            log.error("heartbeat for %s did not stop in time", self._lease)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def past_deadline(self) -> bool:
        return self._monotonic() >= self._deadline

    def _beat(self) -> None:
        while not self._stop.wait(self.call_timeout_seconds):
            if self.past_deadline:
                log.warning("attempt passed its deadline; no longer renewing %s", self._lease)
                return
            try:
                renewed = self._store.leases.renew(
                    self._lease, self._ttl, timeout_seconds=self.call_timeout_seconds
                )
            except sa.exc.SQLAlchemyError as exc:
                # A missed beat is not fatal: the lease outlives two of them, and the
                # fence check at commit is what guarantees safety.
                log.warning("heartbeat for %s failed: %s", self._lease, exc)
                continue
            if not renewed:
                self.lost.set()
                return
