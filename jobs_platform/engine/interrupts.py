"""A shutdown signal stops an attempt's work, never the records of how the attempt ended.

A step stopped through its process group is interrupted twice, milliseconds apart: the
group's SIGTERM, then the SIGINT Dagster's multiprocess executor forwards to its step
process. The first stops the work. A second that lands while the attempt records how it
ended (the attempt `interrupted`, the lease released: one transaction) would roll that
transaction back: the attempt stays `running`, its lease stays held by a process about to
exit, and the next run counts a crash. The same goes for any signal landing while a
failure is recorded, or while the attempt starts.

`InterruptShield` owns SIGINT and SIGTERM for one attempt, wrapping the Python handlers
installed for them (Dagster's raises its interrupt error; Python's raises
`KeyboardInterrupt`):

- inside `delivering()` (the attempt's work: its reads and chunks) the first signal goes
  to the handler that was installed, which raises and stops the work;
- everywhere else (the gates, the lease, the start, the finalize, the bookkeeping of a
  failure), and after that first one, a signal is held: it interrupts nothing;
- a signal held before the work starts is delivered as the work starts; when the attempt
  has ended, held signals are dropped if it ended on an interrupt (they asked for what was
  done), and otherwise delivered to the restored handler, after the records are written.

A signal whose handler is not a Python function (the default action, ignored) is left
alone, and outside the main thread (where Python runs no signal handler) the shield does
nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

SHIELDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_Handler = Callable[[int, FrameType | None], object]


class InterruptShield:
    """Holds SIGINT and SIGTERM outside `delivering()`; see the module's docstring."""

    def __init__(self, signals: tuple[signal.Signals, ...] = SHIELDED_SIGNALS):
        self._signals = signals
        self._installed: dict[int, _Handler] = {}
        self._held: list[int] = []
        self._open = False
        self.interrupted = False  # a signal raised through the installed handler

    def __enter__(self) -> InterruptShield:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self._signals:
            installed = signal.getsignal(signum)
            if callable(installed):
                self._installed[signum] = installed
                signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._open = False
        for signum, installed in self._installed.items():
            signal.signal(signum, installed)
        held, self._held = self._held, []
        if held and not self.interrupted:
            # Nobody acted on it yet: the shutdown stops the step now, records written.
            self._installed[held[0]](held[0], None)

    @contextmanager
    def delivering(self) -> Iterator[None]:
        """The work: the first signal raises here (and one held before is raised now)."""
        self._open = not self.interrupted
        try:
            if self._open and self._held:
                signum = self._held.pop(0)
                self._deliver(signum, None)
            yield
        finally:
            self._open = False

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Inside `delivering()`, a commit not to cut short: a signal waits, held, for
        `deliver_held()` or the attempt's end."""
        was_open, self._open = self._open, False
        try:
            yield
        finally:
            self._open = was_open and not self.interrupted

    def deliver_held(self) -> None:
        """Inside `delivering()`: raise a signal held meanwhile now (none: nothing)."""
        if self._open and self._held:
            self._deliver(self._held.pop(0), None)

    def drop_held(self) -> None:
        """The attempt ended on an interrupt: the signals still held asked for the same."""
        self._held.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._open and not self.interrupted:
            self._deliver(signum, frame)
        else:
            self._held.append(signum)

    def _deliver(self, signum: int, frame: FrameType | None) -> None:
        try:
            self._installed[signum](signum, frame)
        except BaseException:
            # From here on every signal is held: this one is what the attempt ends on.
            self.interrupted = True
            self._open = False
            raise
