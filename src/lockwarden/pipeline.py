"""Wire the stages for one run: config -> claims (files and servers) -> snapshot -> findings.

No argparse, no printing, no exit: the CLI does that. `now` and the clock the host snapshot
is dated by are passed in.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden.check import blocked
from lockwarden.check.classify import Policy
from lockwarden.check.sightings import Memory
from lockwarden.check.source import Claimed, FileClaim, Judged, asking_after, combined
from lockwarden.config import (
    DEFAULT_CRITICAL_AFTER,
    DEFAULT_FS_TIMEOUT,
    DEFAULT_WARN_AFTER,
    Config,
    LockConfig,
)
from lockwarden.formats import LOCKED_FILE, read_claim
from lockwarden.model import Claim, Finding, InodeKey, Severity, State, UnknownCause, worst
from lockwarden.procfs.reader import Clock, HostReader, waits_in, wall_clock
from lockwarden.procfs.snapshot import (
    Snapshot,
    descriptor_path,
    reachable_path,
)
from lockwarden.support.bounded import BoundedRun, Unanswered

if TYPE_CHECKING:  # the database checks load only when a database lock is configured
    from lockwarden.databases.check import Unanswered as SilentServers

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class RunResult:
    """Every finding of one run, and the host it ran on."""

    hostname: str
    boot_id: str
    checked_at: datetime
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default=())
    watching: tuple[Finding, ...] = field(default=())
    """Writers blocked within their budget: not reported, but remembered (the sighting memory
    counts their wait from the first run that saw it)."""

    @property
    def status(self) -> Severity:
        return worst(finding.severity for finding in self.findings)


def policy_for(lock: LockConfig) -> Policy:
    return Policy(
        warn_after=lock.warn_after,
        critical_after=lock.critical_after,
        host_aliases=lock.host_aliases,
        stale_after=lock.stale_after,
    )


@dataclass(frozen=True, eq=False)
class Inspection:
    """The findings of some locks, and the host snapshot they were judged by."""

    snapshot: Snapshot
    findings: tuple[Finding, ...]
    keys: frozenset[InodeKey] = frozenset()
    """Every file of the locks judged (a lock directory's record too, SQLite's -shm...)."""


STALE_LOOKS = 3
"""Looks a run takes at most at a lock whose verdict must be confirmed (judged stale, or held
on inodes that changed hands): the first, and up to two that confirm it."""

_FROM_THE_CAPTURE = frozenset({State.HELD, State.HELD_TOO_LONG, State.UNKNOWN})
"""Verdicts a capture's facts about a lock's inodes can make: a lock held, held too long, or
held by what cannot be named."""


def inspect(
    locks: Sequence[LockConfig],
    host: HostReader,
    now: datetime,
    remembered: Memory | None = None,
    reads: FileReads | None = None,
    what_if: bool = False,
    waits: bool = False,
) -> Inspection:
    """Three steps: each lock's claim (check/source.py), a file lock's read from its files
    while a database lock's server is asked (databases/check.py); capture the host once for
    all their questions (one descriptor scan, every follow-up read their judging needs, and
    what the servers' answers name: their sessions' clients); then judge each lock from its
    claim and that frozen snapshot, the same way whatever it is.
    `remembered`: the sighting memory of kernel locks (sightings.py). `reads`: the claims of
    these locks already being read (FileReads), else they are read here. `what_if`: the run
    journals nothing (`inspect`, `--dry-run`), so a `now` past the capture asks what a later
    run would say if the locks stayed as they are (classify.projected). `waits`: the capture
    also finds the files processes wait on (blocked_writers), in the same walk.

    A look reads the claims before it captures the host, and what happens in between can
    make its verdict wrong both ways:

    * stale: a holder that let go and exited in between leaves a record naming a dead
      process, of a lock that is no more; a lock taken again at once may even read the same
      (a file with the freed inode and the same timestamp tick). A stale verdict stands only
      once a second look, claim then capture, finds the same claim (Claimed.unchanged) stale
      again: it reads that lock after the capture that found it unheld, then captures again,
      and a new holder has it by then;
    * held: a file let go in between frees its inode, which the file system may give at once
      to another file that another process locks: the capture meets that process on the
      lock's inode. Unless the capture shows the inode still under the lock's own name
      (Claimed.in_place), the claim is read again; a lock whose inodes changed gets another
      look.

    What a later look says stands as any look's verdict, unless it must be confirmed in its
    turn; a lock whose claim never settles is unknown."""
    if reads is None:
        reads = FileReads([lock for lock in locks if not lock.database], host.pid_max)
    # What stopped answering in this run is not asked again by a later look: a hung mount
    # (reads.hung, shared by every later FileReads) and a silent database server.
    silent: SilentServers = {}
    claimed, snapshot, judged = _look(locks, host, now, remembered, reads, silent, what_if, waits)
    findings = list(judged)
    keys = {key for each in claimed for key in each.keys}
    everyone = list(range(len(locks)))
    stale = {index for index in everyone if findings[index].state is State.STALE}
    out_of_place = _out_of_place(everyone, claimed, snapshot, findings)
    moved = _moved(locks, host, claimed, out_of_place, reads.hung, silent)
    pending = sorted(stale.union(moved))
    for _look_again in range(STALE_LOOKS - 1):
        if not pending:
            break
        subset = [locks[index] for index in pending]
        files = FileReads(
            [lock for lock in subset if not lock.database], host.pid_max, hung=reads.hung
        )
        again, seen, verdicts = _look(subset, host, now, remembered, files, silent, what_if, False)
        keys.update(key for each in again for key in each.keys)
        # stale stands once the look before found it stale too, with the same claim: that
        # claim was read after the capture that found it unheld
        confirmed = {
            index
            for index, claim in zip(pending, again, strict=True)
            if index in stale and claimed[index].unchanged(claim)
        }
        for index, claim, finding in zip(pending, again, verdicts, strict=True):
            findings[index], claimed[index] = finding, claim
        stale = {index for index in pending if findings[index].state is State.STALE}
        out_of_place = _out_of_place(pending, claimed, seen, findings)
        moved = _moved(locks, host, claimed, out_of_place, reads.hung, silent)
        keys.update(key for index in moved for key in claimed[index].keys)
        pending = sorted((stale - confirmed).union(moved))
    for index in pending:
        findings[index] = _with_store(locks[index], _kept_changing(locks[index]))
    return Inspection(snapshot, tuple(findings), frozenset(keys))


def _out_of_place(
    indexes: Sequence[int],
    claimed: Sequence[Claimed],
    snapshot: Snapshot,
    findings: Sequence[Finding],
) -> list[int]:
    """Of these locks, those judged from their inodes' facts by a capture that cannot tell
    the inodes are still theirs (Claimed.in_place)."""
    return [
        index
        for index in indexes
        if _from_the_capture(findings[index]) and not claimed[index].in_place(snapshot)
    ]


def _from_the_capture(finding: Finding) -> bool:
    """A verdict the capture's facts about a lock's inodes can make: held, held too long,
    unknown, or one that names a process (a free lock's readers)."""
    named = finding.holder or finding.sharers or finding.readers or finding.waiters
    return finding.state in _FROM_THE_CAPTURE or bool(named)


def _moved(
    locks: Sequence[LockConfig],
    host: HostReader,
    claimed: list[Claimed],
    indexes: list[int],
    hung: dict[str, Unanswered],
    silent: SilentServers,
) -> list[int]:
    """Of these locks, those whose claim, read again now (after the capture), names other
    inodes than the one judged: that capture may have met another file on a freed inode.
    Their claims become the ones read now. The inodes read before and after the capture are
    the lock's throughout, unless one was freed and given back to a new file of the lock's
    own name within the capture: no more than that is claimed."""
    if not indexes:
        return []
    subset = [locks[index] for index in indexes]
    files = FileReads([lock for lock in subset if not lock.database], host.pid_max, hung=hung)
    moved = []
    fresh_claims = _claims(subset, files, host.hostname, silent)
    for index, fresh in zip(indexes, fresh_claims, strict=True):
        if fresh.keys != claimed[index].keys:
            claimed[index] = fresh
            moved.append(index)
    return moved


def _look(
    locks: Sequence[LockConfig],
    host: HostReader,
    now: datetime,
    remembered: Memory | None,
    reads: FileReads,
    silent: SilentServers,
    what_if: bool,
    waits: bool,
) -> tuple[list[Claimed], Snapshot, list[Finding]]:
    """One look at `locks`: their claims, one capture for all their questions, the verdicts."""
    claimed = _claims(locks, reads, host.hostname, silent)
    memory = remembered or Memory()
    questions = (
        asking_after(each.question, memory.below.get(lock.name))
        for lock, each in zip(locks, claimed, strict=True)
    )
    snapshot = host.capture(replace(combined(questions), waits=waits))
    findings = [
        _with_store(lock, _judge(lock, each, snapshot, now, memory.series.get(lock.name), what_if))
        for lock, each in zip(locks, claimed, strict=True)
    ]
    return claimed, snapshot, findings


def _kept_changing(lock: LockConfig) -> Finding:
    reason = (
        f"its record or files changed each time it was judged in this run ({STALE_LOOKS} "
        "looks: a holder letting go as others take it?); the next run looks again"
    )
    return _unknown(lock, reason, UnknownCause.UNPROVEN)


def inspect_locks(
    locks: Sequence[LockConfig],
    host: HostReader,
    now: datetime,
    remembered: Memory | None = None,
    reads: FileReads | None = None,
) -> tuple[Finding, ...]:
    """The findings of `inspect`."""
    return inspect(locks, host, now, remembered, reads).findings


class FileReads:
    """What a run reads on the file systems it watches, in one disposable child (bounded.py):
    first, when asked, a probe of the state directory, then each file lock's claim, each
    within its fs_timeout. One child where a probe and the claims took two, and the claims
    are read while the run loads its sighting memory.

    A path whose file system does not answer is Unanswered, and so is every later one on that
    mount (a state directory on a hung mount costs the locks beside it no further wait); a
    lock that could not be read is the exception that said why (it becomes unknown: one
    unreadable lock must not hide the others)."""

    def __init__(
        self,
        locks: Sequence[LockConfig],
        pid_max: int,
        state_directory: str | None = None,
        fs_timeout: float = DEFAULT_FS_TIMEOUT,
        hung: dict[str, Unanswered] | None = None,
    ) -> None:
        """`locks`: file locks (no database lock). `state_directory`: probe it first (an
        lstat) within `fs_timeout`; state_problem() says what it found. `hung`: the mounts an
        earlier read of this run saw hung (its `hung`), not asked again."""
        self.locks = tuple(locks)
        self.state_directory = state_directory
        self._probed: str | None = None  # what the probe found, once taken

        def read(item: LockConfig | str) -> tuple[Claim | bool, tuple[()]]:
            if isinstance(item, str):  # the state directory: does its file system answer?
                return os.path.lexists(item), ()
            return read_claim(item.path, item.format, pid_max), ()

        def deadline(item: LockConfig | str) -> float:
            return fs_timeout if isinstance(item, str) else item.fs_timeout

        items: list[LockConfig | str] = list(self.locks)
        if state_directory is not None:
            items.insert(0, state_directory)
        reading = BoundedRun(read, _path_of, deadline, hung=hung)
        self.hung = reading.hung  # this run's hung mounts: later reads skip them too
        self._outcomes = reading.run(items)

    def state_problem(self) -> str | None:
        """Why the state directory must not be touched this run (its file system did not
        answer: a hung mount would otherwise stall the run's own process, where no deadline
        can reach it), or None. Waits for the probe only, never for a claim."""
        if self.state_directory is None:
            return None
        if self._probed is None:
            _directory, outcome = next(self._outcomes)
            hung = isinstance(outcome, Unanswered)
            self._probed = f"state directory {self.state_directory}: {outcome}" if hung else ""
        return self._probed or None

    def claims(self) -> list[Claim | Exception]:
        """Each lock's claim, in the order of `locks`."""
        self.state_problem()  # the probe's answer comes first
        try:
            return [_claim_or_error(lock, outcome) for lock, outcome in self._pairs()]
        finally:
            self.close()

    def _pairs(self) -> Iterator[tuple[LockConfig, object]]:
        for lock in self.locks:
            _item, outcome = next(self._outcomes)
            yield lock, outcome

    def close(self) -> None:
        """Stop reading (the child is left to end by itself; see bounded.py)."""
        self._outcomes.close()


def _path_of(item: LockConfig | str) -> str:
    return item if isinstance(item, str) else item.path


def _claims(
    locks: Sequence[LockConfig], reads: FileReads, hostname: str, silent: SilentServers
) -> list[Claimed]:
    """Each lock's claim, in the order of `locks`: a database lock's server asked while the
    file locks' claims are read (`reads`, in its child), then theirs. `silent`: the servers
    that did not answer in this run, not asked again (what this look finds silent is added)."""
    try:
        claimed = _ask_servers(locks, hostname, silent)
    except BaseException:
        reads.close()  # the child reading the files is not waited for
        raise
    on_files = [index for index in range(len(locks)) if index not in claimed]
    for index, claim in zip(on_files, reads.claims(), strict=True):
        claimed[index] = _file_claim(locks[index], claim)
    return [claimed[index] for index in range(len(locks))]


MAX_SERVERS_AT_ONCE = 8
"""Database servers asked at the same time; more wait for a free thread."""


def _ask_servers(
    locks: Sequence[LockConfig], hostname: str, silent: SilentServers
) -> dict[int, Claimed]:
    """Each database lock's claim, by the lock's index: every server asked at once, each in a
    thread of its own and within its deadline (databases/check.py), so N silent servers cost
    one deadline, not N. One server's locks are asked in turn, and a server that did not
    answer is not asked again this run. Its driver loads only when a database lock is
    configured."""
    by_server: dict[tuple[str, str], list[int]] = {}
    for index, lock in enumerate(locks):
        if lock.database is not None:
            by_server.setdefault(lock.database.server, []).append(index)
    if not by_server:
        return {}

    def ask(indexes: list[int]) -> dict[int, Claimed]:
        claimed: dict[int, Claimed] = {}
        for index in indexes:
            try:
                from lockwarden.databases.check import ask_server

                claimed[index] = ask_server(locks[index], hostname, silent)
            except Exception as error:
                claimed[index] = Judged(_internal_error(locks[index], error))
        return claimed

    groups = list(by_server.values())
    if len(groups) == 1:
        return ask(groups[0])
    from concurrent.futures import ThreadPoolExecutor

    claimed: dict[int, Claimed] = {}
    with ThreadPoolExecutor(min(len(groups), MAX_SERVERS_AT_ONCE), "lockwarden-db") as pool:
        for answers in pool.map(ask, groups):
            claimed.update(answers)
    return claimed


def _claim_or_error(lock: LockConfig, outcome: object) -> Claim | Exception:
    if isinstance(outcome, Claim):
        return outcome
    log.debug("reading %s failed: %r", lock.path, outcome)
    if isinstance(outcome, Exception):
        return outcome
    return RuntimeError(f"reading it ended with {outcome!r}")


def _file_claim(lock: LockConfig, claim: Claim | Exception) -> Claimed:
    if isinstance(claim, Unanswered):
        return Judged(_unknown(lock, str(claim), UnknownCause.NO_ANSWER))
    if isinstance(claim, PermissionError):
        return Judged(_unknown(lock, permission_problem(lock.path), UnknownCause.MISSING_RIGHT))
    if isinstance(claim, Exception):
        error = RuntimeError(f"could not read {lock.path}: {claim}")
        return Judged(_internal_error(lock, error))
    return FileClaim(lock.name, claim)


def _judge(
    lock: LockConfig,
    claimed: Claimed,
    snapshot: Snapshot,
    now: datetime,
    seen_since: Mapping[str, datetime] | None = None,
    what_if: bool = False,
) -> Finding:
    """Any lock, file or database, judged the one way: from its claim and the snapshot."""
    try:
        return claimed.judge(snapshot, policy_for(lock), now, seen_since, what_if)
    except Exception as error:
        return _internal_error(lock, error)


def _with_store(lock: LockConfig, finding: Finding) -> Finding:
    """The configured role of the lock's store, which every output shows beside the holder."""
    return finding if lock.role is None else replace(finding, store=lock.role)


def _internal_error(lock: LockConfig, error: Exception) -> Finding:
    log.debug("inspecting %s failed", lock.name, exc_info=error)
    reason = f"internal error while inspecting it: {error} (run with -v for details)"
    return _unknown(lock, reason, UnknownCause.INTERNAL_ERROR)


def _unknown(lock: LockConfig, reason: str, cause: UnknownCause) -> Finding:
    return Finding(
        name=lock.name,
        path=lock.path,
        format=lock.format,
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=reason,
        unknown_cause=cause,
    )


def permission_problem(path: str) -> str:
    """`permission denied: cannot search /srv/private (needs execute on it) as uid 998`: the
    first directory on the way that this process may not enter, else the lock itself."""
    who = f"uid {os.geteuid()}"
    parts = os.path.abspath(path).split("/")[1:]
    for depth in range(1, len(parts)):
        directory = "/" + "/".join(parts[:depth])
        if not os.access(directory, os.X_OK):
            return (
                f"permission denied: cannot search directory {directory} (needs execute (search) "
                f"permission on it) as {who}: grant it, or run lockwarden with a user or "
                "capability (CAP_DAC_READ_SEARCH) that may"
            )
    return (
        f"permission denied: cannot read {path} (needs read permission on it) as {who}: grant "
        "it, or run lockwarden with a user or capability (CAP_DAC_READ_SEARCH) that may"
    )


def run_once(
    config: Config,
    now: datetime,
    proc: str = "/proc",
    remembered: Memory | None = None,
    host: HostReader | None = None,
    reads: FileReads | None = None,
    clock: Clock = wall_clock,
    what_if: bool = False,
) -> RunResult:
    """`host` and `reads`: the run's host reader and its file reads, when the caller started
    them (run.py probes the state directory in the same child as the claims). `clock`:
    the wall clock the host snapshot is dated by (its boot time derives from it); `now` may
    differ (`--now` asks what a run would say at another time)."""
    if host is None:
        host = HostReader(clock, proc, read_timeout=config.fs_timeout)
    waits = config.host.blocked_writers
    inspection = inspect(config.locks, host, now, remembered, reads, what_if, waits)
    snapshot, findings = inspection.snapshot, inspection.findings
    past, within = blocked_writers(config, inspection, host, now, remembered)
    findings = (*findings, *past)
    notes: list[str] = []
    if config.builtin:
        notes.append(
            "no config file: checked the well-known system locks present on this host; "
            "`lockwarden init` writes /etc/lockwarden/config.toml listing the locks it finds "
            "here, to add your own [[lock]] tables to (every key: config.example.toml, in the "
            "source and in /usr/share/doc/lockwarden/ with the .deb), or pass --config PATH"
        )
    return RunResult(snapshot.hostname, snapshot.boot_id, now, findings, tuple(notes), within)


def blocked_writers(
    config: Config,
    inspection: Inspection,
    host: HostReader,
    now: datetime,
    remembered: Memory | None,
) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """Processes waiting on a kernel lock nobody configured (check/blocked.py): those past
    `[host] blocked_after`, and those within it (remembered only). Costs nothing more when no
    process waits: /proc/locks was read with the run's snapshot."""
    if not config.host.blocked_writers:
        return (), ()
    configured = {finding.key for finding in inspection.findings if finding.key is not None}
    waited = waited_paths(inspection.snapshot, host.proc, configured | inspection.keys)
    if not waited:
        return (), ()
    # The hold itself is graded at once (a zero budget), so the lock's action is worked out;
    # what is graded for the finding is the wait.
    locks = [
        LockConfig(
            name=blocked.PREFIX + path,
            path=path,
            format=LOCKED_FILE,
            warn_after=0.0,
            critical_after=0.0,
            fs_timeout=config.fs_timeout,
        )
        for path in sorted(set(waited.values()))
    ]
    past: list[Finding] = []
    within: list[Finding] = []
    judged = inspect(locks, host, now)
    for lock in judged.findings:
        writing = blocked.writers(lock, judged.snapshot)
        if lock.key not in waited or not writing:
            continue  # the file was made anew, the wait ended since, or no writer waits
        lock = replace(lock, waiters=writing)
        series = (remembered or Memory()).of(blocked.PREFIX + lock.path)
        found = blocked.blocked_finding(
            lock, config.host, now, series.get(blocked.identity_of(lock))
        )
        (past if found.state is State.HELD_TOO_LONG else within).append(found)
    return tuple(past), tuple(within)


def waited_paths(snapshot: Snapshot, proc: str, configured: set[InodeKey]) -> dict[InodeKey, str]:
    """Each inode a process waits on in /proc/locks that no configured lock is, with its path:
    from the waiter's own descriptor (the one its blocked lock call is on), else from any
    descriptor open on that inode (an OFD wait shows no PID; a waiter's own table may be a
    thread's). The capture walked these inodes' descriptors with the locks' and read the
    waiters' blocked calls (Request.waits): nothing is walked again here."""
    paths: dict[InodeKey, str] = {}
    for key, pids in waits_in(snapshot.lock_lines).items():
        if key in configured:
            continue
        descriptors = snapshot.descriptors(key)
        waiting = {(pid, call.fd) for pid in pids for call in snapshot.blocked_calls(pid)}
        theirs = [d for d in descriptors if (d.pid, d.fd) in waiting] or descriptors
        opened = [
            reachable_path(proc, d.pid, path, d.fd)
            for d in theirs
            if (path := descriptor_path(proc, d.pid, d.fd)) is not None
        ]
        if opened:
            paths[key] = _host_name_first(opened, proc)
    return paths


def _host_name_first(paths: Sequence[str], proc: str) -> str:
    """A name this process reaches the file by, when any has one: a `/proc/PID/root/...` one
    changes with the process it goes through."""
    return next((path for path in paths if not path.startswith(f"{proc}/")), paths[0])


def inspect_path(
    path: str,
    now: datetime,
    lock_format: str = "auto",
    warn_after: float = DEFAULT_WARN_AFTER,
    critical_after: float = DEFAULT_CRITICAL_AFTER,
    proc: str = "/proc",
    name: str | None = None,
    clock: Clock = wall_clock,
    what_if: bool = False,
) -> RunResult:
    """One lock, no config: what `lockwarden inspect PATH` and the demo report. `name`: the
    finding's name (the CLI passes the whole path, so two inspected locks never share one)."""
    lock = LockConfig(
        name=name or path.rstrip("/").rsplit("/", 1)[-1] or path,
        path=path,
        format=lock_format,
        warn_after=warn_after,
        critical_after=critical_after,
    )
    return inspect_lock(lock, now, proc, clock, what_if)


def inspect_lock(
    lock: LockConfig,
    now: datetime,
    proc: str = "/proc",
    clock: Clock = wall_clock,
    what_if: bool = False,
    notes: tuple[str, ...] = (),
    remembered: Memory | None = None,
) -> RunResult:
    """One lock as configured (its format, budgets, host aliases): `inspect` of a lock the
    config lists judges it as the timer's runs do, with what they remember (`remembered`)."""
    inspection = inspect([lock], HostReader(clock, proc), now, remembered, what_if=what_if)
    snapshot = inspection.snapshot
    return RunResult(snapshot.hostname, snapshot.boot_id, now, inspection.findings, notes)
