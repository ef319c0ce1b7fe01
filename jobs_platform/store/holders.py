"""Who holds a lease: an identity unique per process across hosts, boots and PID namespaces.

A holder id is `host:pid:start-ticks:boot-id:pid-namespace`. Host and pid alone repeat
across containers that share a host name but not a PID namespace, and across reboots; the
process start time protects against a recycled pid. A holder is judged dead early (before
its lease expires) only when it is provably a process of this kernel boot, in this PID
namespace, read through a /proc that belongs to that namespace; every other holder is
waited out until its lease expires.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass

_UNKNOWN = "?"


@dataclass(frozen=True)
class HolderIdentity:
    host: str
    pid: int
    start_ticks: str
    boot_id: str
    pid_namespace: str

    def __str__(self) -> str:
        fields = (self.host, self.pid, self.start_ticks, self.boot_id, self.pid_namespace)
        return ":".join(map(str, fields))

    @classmethod
    def parse(cls, holder: str) -> HolderIdentity | None:
        """The identity in a holder id, or None for anything else (an old or foreign id)."""
        parts = holder.rsplit(":", 4)
        if len(parts) != 5 or not parts[1].isdigit():
            return None
        host, pid, start_ticks, boot_id, pid_namespace = parts
        return cls(host, int(pid), start_ticks, boot_id, pid_namespace)


def this_holder() -> str:
    """This process as a lease holder."""
    return str(_this_identity())


def holder_is_dead(holder: str) -> bool:
    """True only when `holder` provably was a process here that no longer runs."""
    identity = HolderIdentity.parse(holder)
    if identity is None or not _can_judge(identity):
        return False
    return _process_start_ticks(str(identity.pid)) != identity.start_ticks


def _can_judge(identity: HolderIdentity) -> bool:
    here = _this_identity()
    return (
        _UNKNOWN not in (identity.boot_id, identity.pid_namespace, here.boot_id)
        and (identity.host, identity.boot_id, identity.pid_namespace)
        == (here.host, here.boot_id, here.pid_namespace)
        and _proc_is_our_namespace()
    )


@functools.cache
def _this_identity_of(pid: int) -> HolderIdentity:
    return HolderIdentity(
        host=socket.gethostname(),
        pid=pid,
        start_ticks=_process_start_ticks("self") or _UNKNOWN,
        boot_id=_read("/proc/sys/kernel/random/boot_id") or _UNKNOWN,
        pid_namespace=_pid_namespace() or _UNKNOWN,
    )


def _this_identity() -> HolderIdentity:
    # Keyed by pid: a forked child is another process, with an identity of its own.
    return _this_identity_of(os.getpid())


def _proc_is_our_namespace() -> bool:
    """Whether /proc shows pids as this process sees them (not so under a bare `unshare`)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _pid_namespace() -> str:
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    return link.removeprefix("pid:[").removesuffix("]")


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""


def _process_start_ticks(pid: str) -> str:
    """The process's start time in clock ticks, or "" when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""
    state, start_ticks = fields[0], fields[19]
    return "" if state in ("Z", "X") else start_ticks
