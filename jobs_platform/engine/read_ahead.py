"""Reading one chunk ahead: the reader parses the next chunk while the engine commits this one.

Safety argument: only the reading moves to a thread. The engine still takes the chunks
one at a time, in the reader's order, and commits each with its checkpoint in its own
thread, so a crash or a resume finds what it found without the read-ahead. The thread
reads at most one chunk past the one being committed, so memory stays bounded at two
chunks. The rows a reader rejects travel with the chunk they precede: each chunk's
rejects reach the engine when that chunk does, as when the reader ran in the engine's
thread. An error the reader raises is raised where its chunk would have come.

Example: with chunks of 10,000 rows, chunk 3 is parsed while chunk 2's upsert, checkpoint
and fence commit; chunk 4 waits until the engine takes chunk 3.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd

from jobs_platform.engine.spec import RejectCollector
from jobs_platform.writer.rejects import RejectedRow

__all__ = ["read_ahead"]


@dataclass(frozen=True)
class _Read:
    """What the reader produced next: a chunk, its end (no chunk) or its error, and the
    rows it rejected before that."""

    chunk: pd.DataFrame | None = None
    rejects: list[RejectedRow] = field(default_factory=list)
    error: BaseException | None = None


def read_ahead(
    chunks: Iterator[pd.DataFrame], reader_rejects: RejectCollector, rejects: RejectCollector
) -> Iterator[pd.DataFrame]:
    """`chunks` in their order, each read in a thread while the caller works on the one before.

    The reader rejects rows into `reader_rejects`; those before a chunk move to `rejects`
    as the chunk is handed over. Closing this generator stops the thread: it finishes the
    chunk it is reading, if any, and closes the reader.
    """
    handoff: queue.SimpleQueue[_Read] = queue.SimpleQueue()
    may_read = threading.Semaphore(1)  # a permit per chunk taken: one chunk ahead, no more
    stop = threading.Event()
    # The reader's context (a tracing span, for one) is the attempt's, as before.
    context = contextvars.copy_context()
    reader = threading.Thread(
        target=context.run,
        args=(_read, chunks, reader_rejects, handoff, may_read, stop),
        name="jobs_platform-read-ahead",
        daemon=True,
    )
    reader.start()
    try:
        while True:
            read = handoff.get()
            may_read.release()
            for row in read.rejects:
                rejects.add(row)
            if read.error is not None:
                raise read.error
            if read.chunk is None:
                return
            yield read.chunk
    finally:
        stop.set()
        may_read.release()  # a reader waiting for a permit wakes, sees the stop and ends
        reader.join()


def _read(
    chunks: Iterator[pd.DataFrame],
    reader_rejects: RejectCollector,
    handoff: queue.SimpleQueue[_Read],
    may_read: threading.Semaphore,
    stop: threading.Event,
) -> None:
    try:
        while True:
            may_read.acquire()
            if stop.is_set():
                return
            try:
                chunk = next(chunks)
            except StopIteration:
                handoff.put(_Read(rejects=reader_rejects.drain()))
                return
            except BaseException as error:  # raised again by the engine's thread
                handoff.put(_Read(rejects=reader_rejects.drain(), error=error))
                return
            handoff.put(_Read(chunk=chunk, rejects=reader_rejects.drain()))
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # a generator's `with` blocks (its open file) end here
