"""Blocked writers anywhere on the host: a process waiting on a kernel lock nobody configured.

The lock a process waits on is judged as any kernel lock (its holders from their descriptors;
an SQLite database as SQLite, formats.LOCKED_FILE);
what is graded is the *wait*, not the hold: a daemon may hold its lock for days, and only a
process blocked behind it makes it a finding. A kernel wait records no start, so its length is
known the way an undated hold's is, from the sighting memory: the first run that sees a writer
blocked behind a holder starts a series (the wait is then at most that waiter's running time),
and each later run that sees the same writer still blocked behind the same holder knows it has
waited at least since then. Only a floor past `blocked_after` pages.

Only a writer's wait is a blocked writer (`writers`): an exclusive request, by a process that
may write the file. A reader's shared wait behind a daemon's lifetime lock, or an exclusive
flock(2) by a user who can only read the file (flock takes one through a read-only
descriptor), blocks no write, and nobody is paged to stop the holder on its behalf.

Pure: the pipeline finds the waiters and judges their locks; this makes the finding.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from lockwarden.check.advice import call_to_act
from lockwarden.config import HostSettings
from lockwarden.model import (
    NOT_HELD,
    Bound,
    Finding,
    Held,
    Severity,
    State,
    Waiter,
    command_text,
)
from lockwarden.procfs.snapshot import NotCaptured, Snapshot, may_write
from lockwarden.support.durations import format_duration

PREFIX = "blocked:"
"""The name of a blocked-writer finding is this and the lock's path."""


def is_blocked_name(name: str) -> bool:
    return name.startswith(PREFIX)


def writers(lock: Finding, snapshot: Snapshot) -> tuple[Waiter, ...]:
    """The waiters of `lock` that are blocked writers: each asks for an exclusive lock (WRITE)
    and may write the file, through a descriptor of it open for writing or by its
    credentials against the file's owner, group and mode (procfs.snapshot.may_write). A
    POSIX or OFD write lock needs a descriptor open for writing; a flock(2) does not, so
    for flock the credentials decide."""
    try:
        descriptors = snapshot.descriptors(lock.key) if lock.key is not None else []
    except NotCaptured:
        descriptors = []
    file = next((d.file for d in descriptors if d.file is not None), None)
    found = []
    for waiter in lock.waiters:
        if waiter.pid is None or not (waiter.lock_kind or "").endswith(" WRITE"):
            continue
        try:
            process = snapshot.process(waiter.pid)
        except NotCaptured:
            process = None
        opened = any(d.write for d in descriptors if d.pid == waiter.pid)
        credentials = process.credentials if process is not None else None
        if may_write(credentials, file, opened):
            found.append(waiter)
    return tuple(found)


def wait_of(lock: Finding, first_seen: datetime | None, now: datetime) -> Held:
    """How long the writers of one lock have been blocked, and how sure that is: a floor from
    the sighting memory, else a ceiling from the oldest waiter's age."""
    if first_seen is not None:
        return Held.began(first_seen, Bound.AT_LEAST, now)
    ages = [
        (now - waiter.started_at).total_seconds()
        for waiter in lock.waiters
        if waiter.started_at is not None
    ]
    return Held.of(max(ages), Bound.AT_MOST, now) if ages else NOT_HELD


def grade(wait: Held, settings: HostSettings) -> tuple[State, Severity]:
    """Past a budget only on a floor (an at-most wait says nothing of how long it was)."""
    if wait.bound is not Bound.AT_LEAST or wait.seconds is None:
        return State.HELD, Severity.OK
    if wait.seconds >= settings.blocked_critical_after:
        return State.HELD_TOO_LONG, Severity.CRITICAL
    if wait.seconds >= settings.blocked_after:
        return State.HELD_TOO_LONG, Severity.WARNING
    return State.HELD, Severity.OK


def identity_of(lock: Finding) -> str:
    """The series a blocked lock belongs to: its holder and its longest-waiting writer (the
    oldest process among the waiters). A run that sees the same writer blocked behind the same
    holder knows that writer has waited at least since the first such run; a holder that keeps
    blocking short-lived clients for a moment each starts a new series with each client, and
    a new holder is a new wait."""
    key = lock.key
    holder = lock.identity or (f"inode:{key[0]}:{key[1]}" if key is not None else lock.path)
    waiter = oldest_waiter(lock)
    return f"{PREFIX}{holder}|waiter:{waiter}" if waiter else PREFIX + holder


def oldest_waiter(lock: Finding) -> str | None:
    """`PID:START_TICKS` of the waiter that started first (a PID alone can be reused)."""
    known = [w for w in lock.waiters if w.started_at is not None and w.start_ticks is not None]
    if not known:
        return None
    first = min(known, key=lambda waiter: (waiter.started_at, waiter.pid))
    return f"{first.pid}:{first.start_ticks}"


def blocked_finding(
    lock: Finding, settings: HostSettings, now: datetime, first_seen: datetime | None
) -> Finding:
    """The finding of one lock some process waits on: named for its path, graded by how long
    the writers have been blocked, naming the waiters, the holder and the action."""
    wait = wait_of(lock, first_seen, now)
    state, severity = grade(wait, settings)
    waiters = ", ".join(
        f"PID {waiter.pid} ({command_text(waiter.cmdline, 60) or waiter.name or '?'})"
        for waiter in lock.waiters[:3]
    )
    more = f" and {len(lock.waiters) - 3} more" if len(lock.waiters) > 3 else ""
    holder = lock.holder.describe() if lock.holder is not None else None
    waited = (
        f"{wait.bound.words}{format_duration(wait.seconds)}" if wait.seconds is not None else ""
    )
    if holder is None:
        behind = f"behind a holder lockwarden cannot name ({lock.reason})"
    else:
        behind = f"behind {holder}"
    stop = call_to_act(lock.holder, lock.format) if lock.holder is not None and lock.action else ""
    reason = (
        f"writes to {lock.path} blocked: {waiters}{more} "
        f"{'has' if len(lock.waiters) == 1 else 'have'} waited {waited or 'for an unknown time'} "
        f"{behind}{stop}"
    )
    if state is State.HELD:
        reason += f" (within the {format_duration(settings.blocked_after)} budget for waits)"
    return replace(
        lock,
        name=PREFIX + lock.path,
        state=state,
        severity=severity,
        reason=reason,
        held=wait,
        identity=identity_of(lock),
        store="writers blocked on a lock nobody configured",
        unknown_cause=None,
    )
