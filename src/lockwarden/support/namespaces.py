"""Which PID namespace this process runs in: the host's, or another (a container's).

In any PID namespace but the host's, the kernel's locks_show() leaves out of /proc/locks a lock
whose owner's PID does not translate into the namespace the /proc was mounted for: its taker
exited while a child holds the lock, or its owner lives outside (on the host, in another
container).
"""

from __future__ import annotations

import functools
import os

COMPLETE_VARIABLE = "LOCKWARDEN_PID_NAMESPACE"
"""Set to `complete` where lockwarden runs in a PID namespace of its own that holds every
process that may take the locks it watches (inside the only container that writes its stores):
a PID a record names is then this namespace's, and its absence here is proof."""

PF_KTHREAD = 0x00200000
"""The flag a kernel thread carries in /proc/PID/stat (include/linux/sched.h)."""

KTHREADD_PID = 2
"""kthreadd, the kernel thread every other one is forked from: PID 2 of the host's namespace."""

PROC_PID_INIT_INO = 0xEFFFFFFC
"""The inode number of the host's (initial) PID namespace, fixed by the kernel
(include/linux/proc_ns.h)."""


def namespace_id(link: str) -> int | None:
    """The inode number a namespace link (`/proc/PID/ns/pid`) names, None if unreadable."""
    try:
        target = os.readlink(link)
    except OSError:
        return None
    digits = target.partition("[")[2].rstrip("]")
    return int(digits) if digits.isdigit() else None


def proc_locks_may_omit(proc: str = "/proc") -> bool:
    """True in any PID namespace but the host's, where /proc/locks may leave a lock out.
    Unlike `NSpid:`, the namespace link tells this also in a container that mounts a /proc of
    its own. (A process that entered a PID namespace without mounting a /proc still reads the
    host's, which leaves nothing out; this errs on the side of looking further.)"""
    return namespace_id(f"{proc}/self/ns/pid") != PROC_PID_INIT_INO


def proc_is_hosts(proc: str = "/proc") -> bool:
    """Whether the /proc read was mounted for the host's PID namespace, whichever namespace
    this process runs in (one entered without a /proc of its own: `unshare --pid --fork`,
    `nsenter --pid`). Such a /proc shows kthreadd, a kernel thread, which no other namespace
    holds; its /proc/locks lists every namespace's locks, flock(2)s taken outside this one too.
    Where it cannot be told (a /proc that hides root's processes, hidepid) this says no."""
    if not proc_locks_may_omit(proc):
        return True
    try:
        with open(f"{proc}/{KTHREADD_PID}/stat", encoding="utf-8", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return False
    flags = text[text.rfind(")") + 2 :].split()[6:7]
    return bool(flags) and flags[0].isdigit() and bool(int(flags[0]) & PF_KTHREAD)


def numbered_namespace(proc: str = "/proc") -> int | None:
    """The PID namespace whose numbers the /proc read shows: the one a record's PID must be in
    to be looked up there. This process's own where that /proc was mounted for it (the host, a
    container); the host's where a namespace was entered without a /proc of its own (`unshare
    --pid --fork`, `nsenter --pid`), whose PIDs that /proc does not show; None when neither
    can be told. `NSpid:` lists one PID per level from the /proc's namespace down to ours."""
    own = namespace_id(f"{proc}/self/ns/pid")
    if own == PROC_PID_INIT_INO:
        return own
    levels = _own_levels(proc)
    if levels is None:
        return None
    if len(levels) == 1:
        return own
    return PROC_PID_INIT_INO if proc_is_hosts(proc) else None


def nspid_levels(status_text: str) -> tuple[int, ...]:
    """A process's PIDs from its status's `NSpid:` line, one per PID namespace level from the
    /proc's namespace down to the process's own (its last); () where the kernel shows none."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            return tuple(int(field) for field in fields) if all(map(str.isdigit, fields)) else ()
    return ()


def _own_levels(proc: str) -> tuple[int, ...] | None:
    """This process's `NSpid:` levels as the /proc read shows them; None if it cannot be read."""
    try:
        with open(f"{proc}/self/status", encoding="utf-8", errors="replace") as status:
            return nspid_levels(status.read())
    except OSError:
        return None


def boottime_offset(proc: str = "/proc") -> float:
    """The seconds this process's time namespace adds to the boot clock (`unshare --time
    --boottime`, a container a checkpoint was restored into), 0 outside one. The kernel shows
    every process's start ticks and the uptime shifted by it, to this reader only: a record's
    start ticks, written from another time namespace, are not comparable with them."""
    try:
        with open(f"{proc}/self/timens_offsets", encoding="utf-8", errors="replace") as offsets:
            lines = [line.split() for line in offsets]
    except OSError:
        return 0.0  # a kernel without time namespaces
    for fields in lines:
        if fields[:1] == ["boottime"] and len(fields) == 3 and _is_integer(fields[1:]):
            return int(fields[1]) + int(fields[2]) / 1e9
    return 0.0


def _is_integer(texts: list[str]) -> bool:
    return all(text.lstrip("-").isdigit() for text in texts)


def sees_every_holder(proc: str = "/proc") -> bool:
    """Whether every process that may hold a watched lock is visible here, so that a PID's
    absence proves its holder gone: in the host's PID namespace, or where the operator says so
    (`LOCKWARDEN_PID_NAMESPACE=complete`). In any other namespace (a container, which mounts a
    /proc of its own, or one entered without it) a record may name another namespace's PID."""
    if os.environ.get(COMPLETE_VARIABLE) == "complete":
        return True
    return not proc_locks_may_omit(proc)


@functools.cache  # a process never leaves its PID namespace; a run asks once per lock
def proc_is_own_nested_namespace(proc: str = "/proc") -> bool:
    """True when this process runs in a PID namespace other than the host's and the /proc it
    reads was mounted for that namespace, as a container's is: `NSpid:` then lists one PID,
    this namespace's (it lists one per level from the /proc's namespace down). Then a lock
    /proc/locks leaves out and the PID the kernel gives a caller for a lock's owner
    (F_OFD_GETLK) are seen from the same namespace: 0 for an owner outside it."""
    if not proc_locks_may_omit(proc):
        return False
    levels = _own_levels(proc)
    return levels is not None and len(levels) == 1
