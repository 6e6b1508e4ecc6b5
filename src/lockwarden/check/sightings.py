"""The sighting memory of kernel locks: which runs saw a lock held by which holder.

A kernel lock records no acquisition time, and a holder's running time is only an upper bound
(a service started hours ago may have taken a flock a second ago). So every run that sees a lock
held without a dated record writes one `seen` record, in place of the last one, to `seen.json`
in the state directory (state/journal.SeenFile; only the latest ever counts):

    {"type": "seen", "at": T, "locks": {NAME: [IDENTITY, FIRST_SEEN]}}   (records.SeenRecord)

FIRST_SEEN is the first of an unbroken series of runs that saw NAME held by IDENTITY (PID +
start ticks + boot id, or the inode for a holder no one could name). The next run that sees the
same identity reports the lock held *at least* since FIRST_SEEN; a run that sees it free, or held
by another holder, starts over, and so does a gap between runs longer than the lock's
`warn_after`, or than RUN_INTERVAL_ALLOWANCE when that is longer (too long to call the lock
continuously held: a budget shorter than the runs' own interval must not make every series
start over, or a lock held for hours would never escalate). A run that sees no such lock
writes an empty record once, to break the series, and then nothing.

A run that could not look (the lock is unknown and names no holder: its database server did
not answer, its mount hung, a right was missing) neither continues nor ends a series: it
carries it on as `[IDENTITY, FIRST_SEEN, LAST_SEEN]`, LAST_SEEN being the last run that did see
the holder, and the gap is counted from LAST_SEEN, allowing for the one run that missed it
(twice RUN_INTERVAL_ALLOWANCE at least, so a budget under two minutes survives it too). One
failed look then neither restarts the count of a lock held for hours (nor resolves its
incident), and a series is never carried much further than a gap would be.

The same record keeps what ran below each lock's record-named holder when a run saw it hold
the lock (`below`: records.LeftWork, each process by PID and start ticks). A worker the holder
started may have left its group and session (`setsid`); once the holder is gone (`kill -9`),
nothing the kernel keeps ties the worker to it, and the record alone would read stale while
the work goes on. While one of them still runs, the lock is unknown, not stale (classify).
It is kept while the lock is held so (what an earlier run kept and still runs, below the holder
now or not: a worker whose parent ended is no longer below it), carried while the lock is
unknown, and dropped once a run sees it free, stale, or held by another holder: a PID and its
start ticks name one process for the whole boot, so no gap ends it.

This memory is written whether or not alerting is on: a timer-driven agent with no [notify]
service must still escalate a lock held continuously (its exit code, its report, the
Prometheus textfile). Pure functions here; run.py reads and appends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from lockwarden.model import Bound, Finding, LeftWork, State, UnknownCause
from lockwarden.state.records import JournalRecord, SeenEntry, SeenRecord

_UNDATED = (Bound.AT_MOST, Bound.AT_LEAST, Bound.UNKNOWN)
_HELD = (State.HELD, State.HELD_TOO_LONG, State.UNKNOWN)
# A database session's identity (databases/): its lock lives on a server, maybe another host's.
_SESSION_IDENTITIES = ("pg-backend:", "mysql-connection:")

# The shipped timer runs every minute with up to 10 s of random delay; a run takes seconds.
RUN_INTERVAL_ALLOWANCE = 90.0


@dataclass(frozen=True)
class Memory:
    """What a run may count on from the runs before it."""

    series: Mapping[str, Mapping[str, datetime]] = field(default_factory=dict)
    """lock name -> holder identity -> first sighting of an unbroken series."""
    below: Mapping[str, LeftWork] = field(default_factory=dict)
    """lock name -> what ran below its record-named holder when last seen holding it."""

    def of(self, name: str) -> Mapping[str, datetime]:
        """One lock's series (holder identity -> first sighting)."""
        return self.series.get(name, {})


class Series(NamedTuple):
    """One lock's series: its holder, the first run that saw it, the last run that saw it."""

    identity: str
    since: datetime
    seen_at: datetime


class LastSeen(NamedTuple):
    """The latest `seen` record in the journal."""

    at: datetime
    locks: dict[str, Series]
    below: Mapping[str, LeftWork] = {}


def last_seen(records: Iterable[JournalRecord]) -> LastSeen | None:
    """The last `seen` record of `records` (the sighting file's, or the journal's of an earlier
    version; one of a shape this version cannot read is none: the fold of the alert stage
    reports it)."""
    latest: LastSeen | None = None
    for record in records:
        if isinstance(record, SeenRecord):
            locks = {
                name: Series(entry.identity, entry.since, entry.seen_at or record.at)
                for name, entry in record.locks.items()
            }
            latest = LastSeen(record.at, locks, record.below)
    return latest


def newest(in_file: LastSeen | None, in_journal: LastSeen | None) -> LastSeen | None:
    """The sighting file's record, unless the journal holds a later one: an earlier version,
    run after this one, appended it there (the file is then older than what that version saw
    last, and its series would start too early)."""
    if in_file is None or (in_journal is not None and in_journal.at > in_file.at):
        return in_journal
    return in_file


def longest_gap(warn_after: float) -> float:
    """The longest break between two runs that still counts a series as continuous."""
    return max(warn_after, RUN_INTERVAL_ALLOWANCE)


def memory(latest: LastSeen | None, now: datetime, gaps: Mapping[str, float]) -> Memory:
    """What this run may count on: each lock's series, unless the last run that saw its
    holder was too long ago (`gaps`: the longest break, per lock, that still counts as
    continuous) or later."""
    if latest is None:
        return Memory()
    kept: dict[str, Mapping[str, datetime]] = {}
    for name, series in latest.locks.items():
        elapsed = (now - series.seen_at).total_seconds()
        allowed = gaps.get(name, 0.0)
        if series.seen_at != latest.at:  # carried by a run that could not look: one more run
            allowed = max(allowed, 2 * RUN_INTERVAL_ALLOWANCE)
        if 0 <= elapsed <= allowed:
            kept[name] = {series.identity: series.since}
    return Memory(kept, dict(latest.below))


def sightings_of(
    findings: Iterable[Finding],
    remembered: Memory,
    now: datetime,
    latest: LastSeen | None = None,
    boot_id: str = "",
) -> SeenRecord:
    """This run's `seen` record: every lock held with no dated record, with its series start;
    and each series of a lock this run could not look at, carried on (`latest`: the record it
    comes from, for when its holder was last seen). With it, what runs below each lock's
    record-named holder (`boot_id`: this boot's), or what was remembered of a lock this run
    could not call free or stale."""
    locks: dict[str, SeenEntry] = {}
    below: dict[str, LeftWork] = {}
    for finding in findings:
        left = _below(finding, remembered, boot_id)
        if left is not None:
            below[finding.name] = left
        carried = _carried(finding, remembered, latest)
        if carried is not None:
            locks[finding.name] = carried
        if not _undated_hold(finding) or finding.identity is None:
            continue
        since = remembered.of(finding.name).get(finding.identity, now)
        locks[finding.name] = SeenEntry(finding.identity, since)
    return SeenRecord(now, locks, below)


def _below(finding: Finding, remembered: Memory, boot_id: str) -> LeftWork | None:
    """What to remember of what runs below a lock's holder: the processes below a holder its
    record names (a kernel lock's holder is not: a worker that goes on holds the lock itself,
    or it is free), with those an earlier run saw below it that still run though no longer
    below it (Finding.work_seen: a worker whose parent ended, which nothing ties to the holder
    now); or, for a lock this run could not judge free or stale (unknown: its recorded holder
    gone while that work runs, say), what was remembered."""
    holder = finding.holder
    if finding.state is State.UNKNOWN:
        return remembered.below.get(finding.name)
    if finding.state not in (State.HELD, State.HELD_TOO_LONG) or holder is None:
        return None
    if holder.pid is None or holder.lock_kind is not None or not boot_id:
        return None
    work = {each.pid: (each.pid, each.start_ticks, each.name) for each in holder.below}
    for each in finding.work_seen:  # no longer below it (its parent ended), still its work
        if each.pid is not None and each.pid not in work:
            work[each.pid] = (each.pid, each.start_ticks or 0, each.name or "")
    # once more ran below it than is kept, what else still runs is never known again
    kept = remembered.below.get(finding.name)
    more = holder.more_below or (kept is not None and kept.more and kept.holder == holder.pid)
    return LeftWork(holder.pid, boot_id, tuple(work.values()), more) if work or more else None


def _carried(finding: Finding, remembered: Memory, latest: LastSeen | None) -> SeenEntry | None:
    """A series this run could neither continue nor end (Finding.unseen). Only one still in
    memory (its gap not yet too long) is carried. An `unproven` unknown ends it: the run
    looked and found no live holder (a record no process has open, or a lock whose files
    changed at every look, holders letting go as others took it). The alerts still treat it
    as unseen (an Alertmanager alert is neither resolved nor renewed by it): only the series
    ends here, so a later hold is counted from when it is seen, shorter and never longer."""
    if not finding.unseen or finding.unknown_cause is UnknownCause.UNPROVEN or latest is None:
        return None
    series = latest.locks.get(finding.name)
    if series is None or series.identity not in remembered.of(finding.name):
        return None
    return SeenEntry(series.identity, series.since, series.seen_at)


def worth_writing(record: SeenRecord, latest: LastSeen | None) -> bool:
    """Write a record that sees something, or an empty one that ends a series; else nothing.
    What runs below a holder is written when it changed."""
    if record.locks or (latest is not None and latest.locks):
        return True
    return dict(record.below) != dict(latest.below if latest is not None else {})


def outlives_the_boot(record: SeenRecord, replaced: LastSeen | None = None) -> bool:
    """Whether a `seen` record, or the one it replaces, names a database session: its server
    may be another host, where the session outlives a crash of this one, so the record is
    written as durably as any other. The one it replaces counts too: a crash that lost an
    unsynced replacement would bring back a session's series the replacement had ended, and
    that session, holding again after the reboot, would be reported held since the old
    series began. One naming only this boot's kernel locks is not fsynced (SeenFile)."""
    identities = [entry.identity for entry in record.locks.values()]
    if replaced is not None:
        identities.extend(series.identity for series in replaced.locks.values())
    return any(identity.startswith(_SESSION_IDENTITIES) for identity in identities)


def _undated_hold(finding: Finding) -> bool:
    """Held with no recorded start: a kernel lock (its inode known), or a database session's
    lock (its identity names the session)."""
    database_session = finding.identity is not None and finding.identity.startswith(
        _SESSION_IDENTITIES
    )
    held = finding.state in _HELD and finding.held_bound in _UNDATED
    return held and (finding.key is not None or database_session)


def keep_latest_seen(records: list[JournalRecord]) -> list[JournalRecord]:
    """Compaction: of the `seen` records an earlier version journaled, only the latest matters
    (the memory of a run whose sighting file could not be written)."""
    indexes = [index for index, record in enumerate(records) if isinstance(record, SeenRecord)]
    drop = set(indexes[:-1])
    return [record for index, record in enumerate(records) if index not in drop]
