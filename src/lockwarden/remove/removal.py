"""Guarded stale-lock removal (`remove_stale = true` on a lock), off by default.

A stale lock is removed only when all of these hold, and the finding says which one did not:

* its format leaves a file, directory or symlink behind (never a kernel lock: the kernel frees
  those, and deleting the file of a live POSIX/flock lock splits its users in two);
* two runs at least `stale_confirm` apart saw the same stale lock: the same finding identity,
  the same inode, and the same record (a digest of its bytes, its mtime); the first sighting is
  a `sighting` record in the journal;
* right before acting, a fresh host snapshot re-reads and re-classifies it: still stale, same
  key, same proof, and no process has a kernel lock on it or a descriptor open on it;
* it is moved aside atomically (rename within its directory to
  `.NAME.lockwarden-removed-TIME-PID`), the moved inode is checked to be the one judged (if not,
  it is moved back), and only then deleted (a directory with rmtree confined to that one
  directory descriptor, never following a symlink).

Every removal is journaled (`removed`) and notified with its proof.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from lockwarden.alerts.decide import Outgoing
from lockwarden.alerts.messages import Message, Row, compose
from lockwarden.check.classify import classify
from lockwarden.check.identify import gather, request_for
from lockwarden.config import Config, LockConfig
from lockwarden.formats import FORMATS, never_removed, read_claim
from lockwarden.formats.base import KERNEL_ONLY
from lockwarden.formats.trust import (
    TREE_MAX_DEPTH,
    TREE_OPEN,
    PathRefused,
    Reached,
    TreeTooLarge,
    control_problem,
    reach,
    tree,
)
from lockwarden.model import Claim, Finding, InodeKey, Removal, RemovalStep, StaleProof, State
from lockwarden.procfs.reader import Clock, HostReader, wall_clock
from lockwarden.procfs.snapshot import Snapshot
from lockwarden.state.records import RemovedRecord, SightingRecord
from lockwarden.state.run_state import RunState
from lockwarden.support.bounded import BoundedRun, Unanswered
from lockwarden.support.durations import format_duration, format_time
from lockwarden.support.safe_read import (
    NotAnArtefact,
    UnsafeRecord,
    artefact_kind,
    read_artefact,
)

log = logging.getLogger(__name__)

REMOVED = "removed"
QUARANTINE_MARK = "lockwarden-removed"


class Refused(Exception):
    """Why a stale lock is not removed now; the finding says it."""


@dataclass(frozen=True)
class Fingerprint:
    """The judged artefact: its inode, kind, mtime and a digest of what it records."""

    device: int
    inode: int
    kind: str
    mtime_ns: int
    digest: str

    @property
    def key(self) -> InodeKey:
        return (self.device, self.inode)

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.device}:{self.inode}:{self.mtime_ns}:{self.digest}"


@dataclass(frozen=True)
class Candidate:
    """A lock judged stale just now from a fresh snapshot, with what removing it needs."""

    claim: Claim
    finding: Finding
    fingerprint: Fingerprint

    @property
    def target(self) -> str:
        assert self.claim.remove_path is not None
        return self.claim.remove_path

    @property
    def key(self) -> str:
        return f"{self.finding.identity}|{self.fingerprint.text}"


@dataclass
class RemovalOutcome:
    """What the removal stage did this run: findings updated, notices to send."""

    findings: tuple[Finding, ...]
    outgoing: list[Outgoing] = field(default_factory=list)


def refusal(claim: Claim) -> str | None:
    """Why this lock's format can never be removed by lockwarden, or None."""
    if claim.never_remove:
        return claim.never_remove
    never = never_removed(claim.format)
    if never is not None:
        return never
    if not claim.existence_is_lock or claim.stale.proof is StaleProof.NEVER:
        return KERNEL_ONLY
    if claim.format not in FORMATS or not claim.remove_path:
        return f"format {claim.format} names no file left behind that is safe to remove"
    return None


def fingerprint(path: str, record_path: str | None) -> Fingerprint:
    """What the lock at `path` is now; raise Refused when it is not something to remove."""
    try:
        kind, content, status = read_artefact(path, record_path)
    except FileNotFoundError:
        raise Refused(f"{path} is gone") from None
    except NotAnArtefact:
        raise Refused("it is neither a file, a directory nor a symlink") from None
    except (OSError, UnsafeRecord) as error:
        raise Refused(f"cannot read {path}: {error}") from None
    digest = hashlib.sha256(content).hexdigest()[:16]
    return Fingerprint(status.st_dev, status.st_ino, kind, status.st_mtime_ns, digest)


def judge_now(
    lock: LockConfig,
    now: datetime,
    clock: Clock = wall_clock,
    host: HostReader | None = None,
    files: BoundedFiles | None = None,
) -> Candidate:
    """Read and classify the lock again from a fresh host snapshot (one capture, after the
    lock was read); raise Refused unless it is stale, removable, and nobody has it locked or
    open, and unless the lock read once more after the capture is still the one judged (its
    holder may have let go, or handed it over, between the read and the capture). `clock`:
    the wall clock the snapshot is dated by; `host`: the reader that captures it; `files`:
    where the lock's files are read, each read under the lock's fs_timeout."""
    from lockwarden.pipeline import policy_for

    host = host or HostReader(clock)
    files = files or BoundedFiles()
    pid_max = host.pid_max
    claim, judged, record_keys = files.run(lock, "reading it", lambda: _read(lock, pid_max))
    assert claim.remove_path is not None
    watched = {*claim.keys, judged.key, *record_keys}
    snapshot = host.capture(request_for([claim], scan_keys=watched, name_hidden=True))
    finding = classify(lock.name, claim, gather(claim, snapshot), policy_for(lock), now)
    if finding.state is not State.STALE:
        raise Refused(f"a fresh look finds it {finding.state.value}: {finding.reason}")
    remove_path, record_path = claim.remove_path, claim.record_path
    again = files.run(lock, "reading it again", lambda: fingerprint(remove_path, record_path))
    if again != judged:
        raise Refused("it changed while it was judged (let go, or taken again)")
    busy = _in_use(snapshot, watched, judged)
    if busy is not None:
        raise Refused(busy)
    return Candidate(claim, finding, judged)


def _read(lock: LockConfig, pid_max: int) -> tuple[Claim, Fingerprint, list[InodeKey]]:
    """The lock's claim, what its artefact is, and its record's inode (in a BoundedFiles
    child); raise Refused when it is not something to remove."""
    claim = read_claim(lock.path, lock.format, pid_max)
    why_not = refusal(claim)
    if why_not is not None:
        raise Refused(why_not)
    assert claim.remove_path is not None
    if claim.path_control.refused is not None:  # someone else controls the way to it
        raise Refused(claim.path_control.refused)
    return claim, fingerprint(claim.remove_path, claim.record_path), _record_key(claim)


Done = TypeVar("Done")


class BoundedFiles:
    """The removal stage's reads and acts on a lock's file system, each in a disposable child
    within the lock's fs_timeout (support/bounded.py, as every other read of a run): a mount
    that stops answering costs that lock's removal, never the run. A mount seen hung is not
    touched again by the stage (`hung`)."""

    def __init__(self) -> None:
        self.hung: dict[str, Unanswered] = {}

    def run(self, lock: LockConfig, doing: str, work: Callable[[], Done]) -> Done:
        """`work()`'s result, done in a child (forked: `work` needs no pickling, its result
        does); what it raised is raised here; Refused when the file system did not answer."""
        bounded = BoundedRun(
            lambda _path: (work(), ()),
            lambda path: path,
            lambda _path: lock.fs_timeout,
            hung=self.hung,
        )
        outcomes = bounded.run([lock.path])
        try:
            _path, outcome = next(outcomes)
        finally:
            outcomes.close()
        if isinstance(outcome, Unanswered):
            raise Refused(f"{doing}: {outcome}")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def _record_key(claim: Claim) -> list[InodeKey]:
    if not claim.record_path or claim.record_path == claim.remove_path:
        return []
    try:
        status = os.lstat(claim.record_path)
    except OSError:
        return []
    return [(status.st_dev, status.st_ino)]


def _in_use(snapshot: Snapshot, keys: set[InodeKey], judged: Fingerprint) -> str | None:
    for key in sorted(keys):
        if snapshot.kernel_locks(key):
            pids = sorted({lock.pid for lock in snapshot.kernel_locks(key)})
            return f"a kernel lock is still on it (/proc/locks names PID {pids[0]})"
        openers = sorted({descriptor.pid for descriptor in snapshot.descriptors(key)})
        if openers:
            return f"PID {openers[0]} still has it open"
    return _hidden_since(snapshot, judged)


def _hidden_since(snapshot: Snapshot, judged: Fingerprint) -> str | None:
    """A process whose open files cannot be read blocks removal, unless it was already running
    when the lock was last written: then it is not the holder nor a child that inherited the
    lock (a container's init hides its files even from root)."""
    written = datetime.fromtimestamp(judged.mtime_ns / 1e9, UTC)
    for pid in snapshot.hidden_pids:
        process = snapshot.process(pid)
        if process is not None and process.started_at >= written:
            return (
                f"PID {pid} started after the lock was written and its open files cannot be "
                "read (run lockwarden as root), so nobody can say it does not hold it"
            )
    return None


def quarantine_name(name: str, now: datetime) -> str:
    return f".{name}.{QUARANTINE_MARK}-{now.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"


def move_aside_and_delete(candidate: Candidate, now: datetime) -> tuple[str, str | None]:
    """Rename the lock to its quarantine name in the same directory (atomic: writers are
    unblocked at once), check the moved inode is the one judged, then delete it. The directory
    is reached one component at a time from `/`, never through a symlink a user made, and
    only when nobody but root and the lock's owner can change the way (formats/trust.py):
    everything after goes through that one descriptor, so a directory on the way swapped
    for a symlink cannot redirect us. Returns the quarantine path and, if deleting it
    failed, why."""
    try:
        reached = reach(candidate.target)
    except FileNotFoundError:
        raise Refused(f"{candidate.target} is gone") from None
    except (OSError, PathRefused) as error:
        raise Refused(str(error)) from None
    with reached:
        problem = control_problem(reached)
        if problem is not None:
            raise Refused(problem)
        return _move_aside_and_delete(candidate, reached, now)


def _move_aside_and_delete(
    candidate: Candidate, reached: Reached, now: datetime
) -> tuple[str, str | None]:
    parent, name, directory = reached.parent, reached.name, reached.directory
    quarantine = quarantine_name(name, now)
    _same_inode(parent, name, candidate.fingerprint, "just before the move", moved=False)
    if candidate.fingerprint.kind == "directory":
        try:  # the whole tree is within bounds, or nothing of it is touched
            tree(parent, name, reached.path)
        except TreeTooLarge as error:
            raise Refused(str(error)) from None
        except OSError as error:
            raise Refused(f"cannot list {reached.path}: {error.strerror}") from None
    if _exists(parent, quarantine):
        raise Refused(f"{quarantine} already exists in {directory}")
    try:
        os.rename(name, quarantine, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as error:
        raise Refused(f"cannot move it aside: {error.strerror}{_sandboxed(error)}") from None
    try:
        _same_inode(parent, quarantine, candidate.fingerprint, "after the move", moved=True)
    except Refused as error:
        raise Refused(f"{error}; {_put_back(parent, quarantine, name)}") from None
    delete_error = _delete(parent, quarantine, candidate.fingerprint.kind)
    return os.path.join(directory, quarantine), delete_error


def _same_inode(parent: int, name: str, judged: Fingerprint, when: str, moved: bool) -> None:
    try:
        status = os.lstat(name, dir_fd=parent)
    except OSError as error:
        raise Refused(f"{name} cannot be looked at {when}: {error.strerror}") from None
    same = (status.st_dev, status.st_ino, _kind_or_other(status)) == (
        judged.device,
        judged.inode,
        judged.kind,
    )
    # A rename may touch a directory's times; a file's or a link's mtime never moves with it.
    if not (moved and judged.kind == "directory"):
        same = same and status.st_mtime_ns == judged.mtime_ns
    if not same:
        raise Refused(f"it is not the lock that was judged {when} (another inode or record)")


def _kind_or_other(status: os.stat_result) -> str:
    return artefact_kind(status) or "other"


def _exists(parent: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return False
    return True


def _put_back(parent: int, quarantine: str, name: str) -> str:
    if _exists(parent, name):
        return f"left it as {quarantine}, as something new is at {name}"
    try:
        os.rename(quarantine, name, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as error:
        return f"could not move it back from {quarantine}: {error.strerror}"
    return "moved it back"


def _delete(parent: int, quarantine: str, kind: str) -> str | None:
    """The lock is already out of the way; a failure here leaves only the quarantined copy."""
    try:
        if kind == "directory":
            _delete_tree(parent, quarantine, 1)
        else:
            os.unlink(quarantine, dir_fd=parent)
    except OSError as error:  # logged by the stage: this runs in a BoundedFiles child
        return error.strerror or str(error)
    return None


def _delete_tree(parent: int, name: str, depth: int) -> None:
    """Delete the directory `name` in `parent` and what it holds, each directory opened
    relative to the one above it and never through a symlink, no deeper than a lock
    directory may be (its size was measured before the move: trust.tree)."""
    descriptor = os.open(name, TREE_OPEN, dir_fd=parent)
    try:
        with os.scandir(descriptor) as entries:
            listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for entry, is_directory in listed:
            if not is_directory:
                os.unlink(entry, dir_fd=descriptor)
            elif depth < TREE_MAX_DEPTH:
                _delete_tree(descriptor, entry, depth + 1)
            else:  # as deep as a lock directory goes: only an empty one may be here
                os.rmdir(entry, dir_fd=descriptor)
    finally:
        os.close(descriptor)
    os.rmdir(name, dir_fd=parent)


def removal_stage(
    config: Config,
    findings: tuple[Finding, ...],
    hostname: str,
    now: datetime,
    dry_run: bool,
    state: RunState,
) -> RemovalOutcome:
    """For each stale lock with remove_stale: record a sighting, or remove it once confirmed.
    A run that holds no run lock, or whose state has a problem, only says why not."""
    wanted = {lock.name: lock for lock in config.locks if lock.remove_stale}
    if not wanted:
        return RemovalOutcome(findings)
    problems = list(state.problems)  # why nothing may be removed or recorded now
    no_lock = None if dry_run else state.why_no_run_lock()
    if no_lock is not None:
        problems.append(no_lock)
    stage = _Stage(state, hostname, now, dry_run)
    result = []
    for finding in findings:
        lock = wanted.get(finding.name)
        if lock is None or finding.state is not State.STALE:
            result.append(finding)
        else:
            result.append(stage.consider(lock, finding, problems))
    return RemovalOutcome(tuple(result), stage.outgoing)


class _Stage:
    def __init__(self, state: RunState, hostname: str, now: datetime, dry_run: bool) -> None:
        self.state = state
        self.history = state.history()
        self.hostname = hostname
        self.now = now
        self.dry_run = dry_run
        self.outgoing: list[Outgoing] = []
        self.files = BoundedFiles()

    def consider(self, lock: LockConfig, finding: Finding, problems: list[str]) -> Finding:
        try:
            return self._consider(lock, finding, problems)
        except Refused as error:
            return replace(finding, removal=_refused(str(error)))
        except Exception as error:  # a health check must not die here: say it, remove nothing
            log.debug("considering %s for removal failed", lock.name, exc_info=True)
            return replace(finding, removal=_refused(f"internal error: {error}"))

    def _consider(self, lock: LockConfig, finding: Finding, problems: list[str]) -> Finding:
        candidate = judge_now(lock, self.now, files=self.files)
        if candidate.finding.identity != finding.identity:
            raise Refused("it changed while being checked (another holder identity)")
        sighting = self.history.sightings.get(lock.name)
        if sighting is None or sighting.key != candidate.key:
            return replace(finding, removal=self._first_sighting(lock, candidate, problems))
        first_at = sighting.first_at
        due_at = first_at + timedelta(seconds=lock.stale_confirm)
        since = format_time(first_at)
        if self.now < due_at:
            text = f"seen stale since {since}; will remove at {format_time(due_at)} if still stale"
            return replace(finding, removal=Removal(RemovalStep.CONFIRMING, text, first_at, due_at))
        if self.dry_run:
            text = f"would remove {candidate.target} (stale since {since}; proof: "
            text += f"{candidate.finding.proof})"
            return replace(finding, removal=Removal(RemovalStep.WOULD_REMOVE, text, first_at))
        unusable = self._unusable(problems)
        if unusable:
            raise Refused(f"the state journal is unusable ({unusable})")
        return self._remove(lock, candidate, sighting.first_at)

    def _unusable(self, problems: list[str]) -> str:
        """Why the state journal may not be relied on now ("" when it may): the problems when
        the stage began, and any of this run's writes since that did not reach it (one that
        failed, or went to the fallback journal instead)."""
        state = self.state
        written_elsewhere = state.broken or state.journal is not state.state_journal
        if not (problems or state.problems or written_elsewhere):
            return ""
        return "; ".join(dict.fromkeys([*problems, *state.problems])) or "a write failed"

    def _first_sighting(
        self, lock: LockConfig, candidate: Candidate, problems: list[str]
    ) -> Removal:
        """Record the first sighting (a dry run only says it would)."""
        unusable = self._unusable(problems)
        if unusable:
            raise Refused(f"the state journal is unusable ({unusable})")
        if not self.dry_run:
            self.state.append(self._sighting_record(lock, candidate))
            unusable = self._unusable(problems)
            if unusable:
                raise Refused(f"cannot record the sighting ({unusable})")
        due_at = self.now + timedelta(seconds=lock.stale_confirm)
        text = (
            f"seen once; will remove after {format_duration(lock.stale_confirm)} if still stale "
            f"(at {format_time(due_at)} or later)"
        )
        if self.dry_run:  # nothing recorded: no run may remove it at due_at
            text += "; a dry run records nothing: a real run must see it first"
            return Removal(RemovalStep.SEEN_ONCE, text)
        return Removal(RemovalStep.SEEN_ONCE, text, self.now, due_at)

    def _remove(self, lock: LockConfig, seen: Candidate, first_at: datetime) -> Finding:
        final = judge_now(lock, self.now, files=self.files)  # the last look, before acting
        if final.key != seen.key or final.finding.proof != seen.finding.proof:
            raise Refused("it changed between the check and the removal")
        now = self.now
        quarantine, delete_error = self.files.run(
            lock,
            "moving it aside (it may be moved aside or not: look at its directory)",
            lambda: move_aside_and_delete(final, now),
        )
        if delete_error is not None:
            log.warning(
                "moved a stale lock aside as %s but cannot delete it: %s", quarantine, delete_error
            )
        self.state.append(self._removed_record(lock, final, quarantine))
        self.outgoing.append(self._message(lock, final, quarantine, first_at))
        deleted = (
            "and deleted"
            if delete_error is None
            else f"but could not delete it ({delete_error}); delete {quarantine} by hand"
        )
        aside = os.path.basename(quarantine)
        text = (
            f"removed ({final.target} was stale since {format_time(first_at)}: "
            f"{final.finding.proof}; moved aside as {aside} {deleted})"
        )
        removal = Removal(RemovalStep.REMOVED, text, first_at, moved_aside_as=quarantine)
        return replace(_inspect(lock, self.now), removal=removal)

    def _sighting_record(self, lock: LockConfig, candidate: Candidate) -> SightingRecord:
        return SightingRecord(
            self.now, lock.name, candidate.key, candidate.target, candidate.finding.proof
        )

    def _removed_record(
        self, lock: LockConfig, candidate: Candidate, quarantine: str
    ) -> RemovedRecord:
        return RemovedRecord(
            self.now,
            lock.name,
            candidate.key,
            candidate.target,
            quarantine,
            candidate.finding.proof,
        )

    def _message(
        self, lock: LockConfig, candidate: Candidate, quarantine: str, first_at: datetime
    ) -> Outgoing:
        message = render_removed(
            lock.name, candidate, quarantine, first_at, self.hostname, self.now
        )
        incident = self.history.open_incident(lock.name)
        if incident is not None:  # the stale incident this removal ends
            incident_id = incident.incident_id
            message_id = f"{incident_id}/{REMOVED}"
        else:
            digest = hashlib.sha256(f"{candidate.key}|{format_time(self.now)}".encode())
            incident_id = message_id = f"{REMOVED}-{digest.hexdigest()[:12]}"
        return Outgoing(message_id, incident_id, lock.name, REMOVED, message, lock.notify_tags)


def _refused(why: str) -> Removal:
    return Removal(RemovalStep.NOT_REMOVED, f"not removed: {why}")


def _inspect(lock: LockConfig, now: datetime) -> Finding:
    """The lock as it is after the removal (free, or a new holder that was quick)."""
    from lockwarden.pipeline import inspect_locks

    return inspect_locks([lock], HostReader(wall_clock), now)[0]


def render_removed(
    name: str,
    candidate: Candidate,
    quarantine: str,
    first_at: datetime,
    host: str,
    now: datetime,
) -> Message:
    title = f"removed stale lock: {name} ({candidate.target})"
    rows = [
        Row("Host", host),
        Row("Lock", f"{name} at {candidate.finding.path} ({candidate.finding.format})"),
        Row("Removed", candidate.target, code=True),
        Row("Moved aside as", quarantine, code=True),
        Row("Stale since", f"{format_time(first_at)} (seen again at {format_time(now)})"),
        Row("Proof", candidate.finding.proof or candidate.finding.reason),
        Row("Identity", candidate.key),
    ]
    return compose(title, rows)


def _sandboxed(error: OSError) -> str:
    """Why a rename of a stale lock fails under the shipped unit, and what a drop-in needs:
    ProtectSystem=strict and ProtectHome=read-only leave every lock's directory read-only
    (EROFS), so removal needs that directory in ReadWritePaths= (docs/removal.md)."""
    if error.errno != errno.EROFS:
        return ""
    return (
        " (lockwarden.service mounts it read-only: add its directory to ReadWritePaths= in a "
        "drop-in, `systemctl edit lockwarden.service`, docs/removal.md)"
    )
