"""The sighting memory of kernel locks: which runs saw a lock held by which holder.

A kernel lock records no acquisition time, and a holder's running time is only an upper bound
(a service started hours ago may have taken a flock a second ago). So every run that sees a lock
held without a dated record writes one `seen` record to the state journal:

    {"type": "seen", "at": T, "locks": {NAME: [IDENTITY, FIRST_SEEN]}}

FIRST_SEEN is the first of an unbroken series of runs that saw NAME held by IDENTITY (PID +
start ticks + boot id, or the inode for a holder no one could name). The next run that sees the
same identity reports the lock held *at least* since FIRST_SEEN; a run that sees it free, or held
by another holder, starts over, and so does a gap between runs longer than the lock's
`warn_after`, or than RUN_INTERVAL_ALLOWANCE when that is longer (too long to call the lock
continuously held: a budget shorter than the runs' own interval must not make every series
start over, or a lock held for hours would never escalate). A run that sees no such lock
writes an empty record once, to break the series, and then nothing.

This memory is written whether or not alerting is on: a timer-driven agent with no [notify]
service must still escalate a lock held continuously (its exit code, its report, the
Prometheus textfile). Pure functions here; cli/once.py reads and appends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from lockwarden.model import Bound, Finding, State
from lockwarden.state.journal import Record
from lockwarden.support.durations import parse_time, timestamp

SEEN = "seen"
_UNDATED = (Bound.AT_MOST, Bound.AT_LEAST, Bound.UNKNOWN)
_HELD = (State.HELD, State.HELD_TOO_LONG, State.UNKNOWN)
# A database session's identity (databases/): its lock lives on a server, maybe another host's.
_SESSION_IDENTITIES = ("pg-backend:", "mysql-connection:")

# The shipped timer runs every minute with up to 10 s of random delay; a run takes seconds.
RUN_INTERVAL_ALLOWANCE = 90.0

Memory = dict[str, dict[str, datetime]]
"""lock name -> holder identity -> first sighting of an unbroken series."""


class LastSeen(NamedTuple):
    """The latest `seen` record in the journal."""

    at: datetime
    locks: dict[str, tuple[str, datetime]]


def last_seen(records: Iterable[Record]) -> LastSeen | None:
    latest: LastSeen | None = None
    for record in records:
        if record.get("type") != SEEN:
            continue
        at = parse_time(record.get("at"))
        locks = record.get("locks")
        if at is None or not isinstance(locks, dict):
            continue
        latest = LastSeen(at, _entries(locks))
    return latest


def _entries(locks: dict[object, object]) -> dict[str, tuple[str, datetime]]:
    entries = {}
    for name, value in locks.items():
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
            continue
        since = parse_time(value[1])
        if since is not None:
            entries[str(name)] = (value[0], since)
    return entries


def longest_gap(warn_after: float) -> float:
    """The longest break between two runs that still counts a series as continuous."""
    return max(warn_after, RUN_INTERVAL_ALLOWANCE)


def memory(latest: LastSeen | None, now: datetime, gaps: Mapping[str, float]) -> Memory:
    """What this run may count on: each lock's series, unless the run before was too long
    ago (`gaps`: the longest break, per lock, that still counts as continuous) or later."""
    if latest is None:
        return {}
    elapsed = (now - latest.at).total_seconds()
    kept: Memory = {}
    for name, (identity, since) in latest.locks.items():
        if 0 <= elapsed <= gaps.get(name, 0.0):
            kept[name] = {identity: since}
    return kept


def sightings_of(findings: Iterable[Finding], remembered: Memory, now: datetime) -> Record:
    """This run's `seen` record: every lock held with no dated record, with its series start."""
    locks: dict[str, list[str]] = {}
    for finding in findings:
        if not _undated_hold(finding) or finding.identity is None:
            continue
        since = remembered.get(finding.name, {}).get(finding.identity, now)
        locks[finding.name] = [finding.identity, timestamp(since)]
    return {"type": SEEN, "at": timestamp(now), "locks": locks}


def worth_writing(record: Record, latest: LastSeen | None) -> bool:
    """Write a record that sees something, or an empty one that ends a series; else nothing."""
    return bool(record["locks"]) or bool(latest is not None and latest.locks)


def outlives_the_boot(record: Record) -> bool:
    """Whether a `seen` record names a database session: its server may be another host, where
    the session outlives a crash of this one, so the record is written as durably as any
    other. One naming only this boot's kernel locks is not fsynced (Journal.append)."""
    locks = record.get("locks")
    entries = locks.values() if isinstance(locks, dict) else ()
    return any(str(entry[0]).startswith(_SESSION_IDENTITIES) for entry in entries)


def _undated_hold(finding: Finding) -> bool:
    """Held with no recorded start: a kernel lock (its inode known), or a database session's
    lock (its identity names the session)."""
    database_session = finding.identity is not None and finding.identity.startswith(
        _SESSION_IDENTITIES
    )
    held = finding.state in _HELD and finding.held_bound in _UNDATED
    return held and (finding.key is not None or database_session)


def keep_latest_seen(records: list[Record]) -> list[Record]:
    """Compaction: only the latest `seen` record matters."""
    indexes = [index for index, record in enumerate(records) if record.get("type") == SEEN]
    drop = set(indexes[:-1])
    return [record for index, record in enumerate(records) if index not in drop]
