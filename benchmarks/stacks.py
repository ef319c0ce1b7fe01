"""Where a partition attempt's seconds go, from a py-spy recording of the step.

`py-spy record --idle --format raw` writes one line per distinct stack: its frames from the
outermost, joined by ";", then how many samples caught it. With `--idle` a thread waiting on
the database is sampled too, so a thread's samples divided by the rate are its wall
seconds. The attempt runs on the step's main thread under `PartitionRunner._attempt`; its
samples are split into phases: a stack belongs to the first phase of `PHASES` whose frame
it holds (the keys' COPY into the seen keys counts as seen keys, an upsert's COPY as the
stage COPY, what else the chunk does as the chunk).

The reader runs one chunk ahead on a thread of its own (`engine.read_ahead`), overlapped
with the commits: its busy seconds are given apart, not in the attempt's. Its waits for a
permit to read on are left out; the attempt's waits for the next chunk count as reading.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ATTEMPT_FRAME = "PartitionRunner._attempt "
# (phase, a frame that marks it), in the order they are matched.
PHASES = (
    ("lifecycle log lines (Dagster log events)", "EventTrail.emit "),
    ("seen keys (the input's keys, for the sweep)", "SeenKeys.add "),
    ("stage COPY", "copy_into "),
    ("merge from the stage", "_merge_from_stage "),
    ("sweep (rows no longer in the input)", "sweep_partition "),
    ("read and validate the input (waiting for the reader)", "PartitionRunner._chunks "),
    # Before the chunk: a short last chunk commits with finalize, inside `_write_chunks`.
    ("finalize: done record, attempt, lease", "finalize_in_transaction "),
    ("chunk: dedupe, hash, checkpoint, fence, commit", "PartitionRunner._write_chunks "),
    ("fingerprint of the input", "PartitionRunner._fingerprint "),
    ("committed chunks (checkpoints read)", "PartitionRunner._committed_chunks "),
)
OTHER = "other (gate, lease, attempt row, report)"
READ_AHEAD_FRAME = "_read (jobs_platform/engine/read_ahead.py"
READ_AHEAD_WAIT = "Semaphore.acquire "  # the reader, one chunk ahead, waits to read on
READ_AHEAD = "the reader on its thread, read ahead (overlapped, not in the attempt)"


def attempt_phases(raw: Path, rate: int) -> dict[str, float]:
    """Seconds per phase of every attempt in the recording, `rate` samples a second."""
    samples: Counter[str] = Counter()
    read_ahead = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if any(frame.startswith(READ_AHEAD_FRAME) for frame in frames):
            if not any(frame.startswith(READ_AHEAD_WAIT) for frame in frames):
                read_ahead += int(count)
            continue
        if not any(frame.startswith(ATTEMPT_FRAME) for frame in frames):
            continue
        samples[_phase(frames)] += int(count)
    total = sum(samples.values())
    phases = {name: round(samples[name] / rate, 3) for name, _ in PHASES}
    phases[OTHER] = round(samples[OTHER] / rate, 3)
    phases[READ_AHEAD] = round(read_ahead / rate, 3)
    return {"attempt": round(total / rate, 3), **phases}


def _phase(frames: list[str]) -> str:
    for name, marker in PHASES:
        if any(frame.startswith(marker) for frame in frames):
            return name
    return OTHER
