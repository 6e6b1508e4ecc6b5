"""Wire the stages for one run: config -> snapshot -> claims -> evidence -> findings.

No argparse, no printing, no exit: the CLI does that. `now` is passed in.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden import sightings
from lockwarden.bounded import BoundedRun, Unanswered
from lockwarden.checkpoints import Checkpoint, skip
from lockwarden.classify import Policy, classify
from lockwarden.config import Config, LockConfig
from lockwarden.formats import read_claim
from lockwarden.host import Snapshot
from lockwarden.identify import gather, keys_to_scan
from lockwarden.journal import (
    Journal,
    Record,
    RunBusy,
    RunLock,
    StateError,
    default_state_path,
    probe_state_dir,
    state_directory_of,
)
from lockwarden.model import Claim, Finding, Severity, State, worst
from lockwarden.sightings import LastSeen, Memory

if TYPE_CHECKING:
    from lockwarden.alerting import AlertOutcome
    from lockwarden.alertmanager import ManagerOutcome
    from lockwarden.decide import Outgoing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """Every finding of one run, and the host it ran on."""

    hostname: str
    boot_id: str
    checked_at: datetime
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default=())

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


def inspect_locks(
    locks: Sequence[LockConfig],
    snapshot: Snapshot,
    now: datetime,
    remembered: Memory | None = None,
) -> tuple[Finding, ...]:
    """Read every lock's claim first, so one descriptor scan serves them all, then judge.
    `remembered`: the sighting memory of kernel locks (sightings.py). A lock inside a database
    has no claim to read: its server is asked when it is judged."""
    on_files = [lock for lock in locks if not lock.database]
    read = iter(read_claims(on_files, snapshot.pid_max))
    claims = [None if lock.database else next(read) for lock in locks]
    readable = (claim for claim in claims if isinstance(claim, Claim))
    snapshot.scan_descriptors(keys_to_scan(readable, snapshot))
    memory = remembered or {}
    return tuple(
        _judge(lock, claim, snapshot, now, memory.get(lock.name))
        if claim is not None
        else _judge_database(lock, snapshot, now)
        for lock, claim in zip(locks, claims, strict=True)
    )


def read_claims(locks: Sequence[LockConfig], pid_max: int) -> list[Claim | Exception]:
    """Each lock's claim, read within its fs_timeout (see bounded.py): a lock whose file
    system does not answer is Unanswered, and so is every later lock on that mount; a lock
    that could not be read is the exception that said why (it becomes unknown: one
    unreadable lock must not hide the others)."""

    def read(lock: LockConfig) -> tuple[Claim, tuple[LockConfig, ...]]:
        return read_claim(lock.path, lock.format, pid_max), ()

    reading = BoundedRun(read, lambda lock: lock.path, lambda lock: lock.fs_timeout)
    return [_claim_or_error(lock, outcome) for lock, outcome in reading.run(locks)]


def _judge_database(lock: LockConfig, snapshot: Snapshot, now: datetime) -> Finding:
    """A lock inside a database server (databases/): its driver loads only when one is set."""
    try:
        from lockwarden.databases.check import inspect_database

        return inspect_database(lock, policy_for(lock), snapshot, now)
    except Exception as error:
        log.debug("checking %s failed", lock.name, exc_info=True)
        return _unknown(
            lock, f"internal error while inspecting it: {error} (run with -v for details)"
        )


def _claim_or_error(lock: LockConfig, outcome: object) -> Claim | Exception:
    if isinstance(outcome, Claim):
        return outcome
    log.debug("reading %s failed: %r", lock.path, outcome)
    if isinstance(outcome, Exception):
        return outcome
    return RuntimeError(f"reading it ended with {outcome!r}")


def _judge(
    lock: LockConfig,
    claim: Claim | Exception,
    snapshot: Snapshot,
    now: datetime,
    seen_since: dict[str, datetime] | None = None,
) -> Finding:
    if isinstance(claim, Unanswered):
        return _unknown(lock, str(claim))
    try:
        if isinstance(claim, PermissionError):
            return _unknown(lock, permission_problem(lock.path))
        if isinstance(claim, Exception):
            raise RuntimeError(f"could not read {lock.path}: {claim}")
        evidence = gather(claim, snapshot)
        return classify(lock.name, claim, evidence, policy_for(lock), now, seen_since)
    except Exception as error:
        log.debug("judging %s failed", lock.name, exc_info=True)
        return _unknown(
            lock, f"internal error while inspecting it: {error} (run with -v for details)"
        )


def _unknown(lock: LockConfig, reason: str) -> Finding:
    return Finding(
        name=lock.name,
        path=lock.path,
        format=lock.format,
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=reason,
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
) -> RunResult:
    snapshot = Snapshot.capture(proc, read_timeout=config.fs_timeout)
    findings = inspect_locks(config.locks, snapshot, now, remembered)
    notes: list[str] = []
    if config.builtin:
        notes.append(
            "no config file: checked the well-known system locks present on this host; "
            "list your own locks as [[lock]] tables in /etc/lockwarden/config.toml "
            "(see config.example.toml), or pass --config PATH"
        )
    return RunResult(snapshot.hostname, snapshot.boot_id, now, findings, tuple(notes))


def inspect_path(
    path: str,
    now: datetime,
    lock_format: str = "auto",
    warn_after: float = 900.0,
    critical_after: float = 3600.0,
    proc: str = "/proc",
    name: str | None = None,
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
    snapshot = Snapshot.capture(proc)
    findings = inspect_locks([lock], snapshot, now)
    return RunResult(snapshot.hostname, snapshot.boot_id, now, findings)


@dataclass(frozen=True)
class AlertedRun:
    """A run's result with what its alert stage did (None when it did not run)."""

    result: RunResult
    outcome: AlertOutcome | None  # None: a quiet run with alerting off, nothing to decide
    alertmanager: ManagerOutcome | None = None  # None: no [alertmanager] configured

    @property
    def undelivered(self) -> int:
        """Messages this run could not hand to a service or an Alertmanager (each retried)."""
        count = self.outcome.undelivered if self.outcome is not None else 0
        if self.alertmanager is not None:
            count += len(self.alertmanager.failures)
        return count


def run_and_alert(
    config: Config,
    now: datetime,
    dry_run: bool = False,
    on_start: Callable[[], None] | None = None,
    checkpoint: Checkpoint = skip,
) -> AlertedRun:
    """`--once`: inspect, then decide, notify and journal, holding the run lock throughout
    (raises RunBusy when another run holds it). A dry run decides only: no lock, no writes.
    A state directory whose file system does not answer is not touched at all: the run
    inspects, alerts and reports without it, and says so. `checkpoint`: checkpoints.py."""
    removing = any(lock.remove_stale for lock in config.locks)
    # Every run reads the sighting memory, so every run first makes sure the state
    # directory's file system answers.
    unusable = _state_unusable(config)
    # Alertmanager is told every run (a firing alert must be renewed, a cleared one ended).
    stateful = config.notify.configured or removing or config.alertmanager.configured
    if not (stateful or dry_run):
        if on_start is not None:
            on_start()
        sighting = SightingMemory(config, now, unusable)
        result = run_once(config, now, remembered=sighting.memory)
        result = sighting.remember(result, lock_first=True)
        if all(finding.severity is Severity.OK for finding in result.findings):
            # Alerting is off and nothing is wrong: nothing to decide, count or send, so the
            # alert stage (and its imports) is not paid for on the every-minute quiet path.
            return AlertedRun(result, None)
        return _alert(config, now, dry_run, result, None, unusable, checkpoint)
    writes = stateful and not dry_run
    run_lock = _take_run_lock(config) if writes and unusable is None else None
    try:
        if on_start is not None:
            on_start()
        sighting = SightingMemory(config, now, unusable)
        result = run_once(config, now, remembered=sighting.memory)
        if not dry_run:
            result = sighting.remember(result, lock_first=run_lock is None)
        return _alert(config, now, dry_run, result, run_lock, unusable, checkpoint)
    finally:
        if run_lock is not None:
            run_lock.release()


def _alert(
    config: Config,
    now: datetime,
    dry_run: bool,
    result: RunResult,
    run_lock: RunLock | None,
    state_unusable: str | None,
    checkpoint: Checkpoint = skip,
) -> AlertedRun:
    from lockwarden.alerting import alert_stage, with_outcome

    checkpoint("after-snapshot")
    checked: tuple[Finding, ...] = result.findings
    removed: tuple[Outgoing, ...] = ()  # what removal wants said, before any "resolved"
    if any(lock.remove_stale for lock in config.locks):
        from lockwarden.removal import removal_stage

        removal = removal_stage(
            config, checked, result.hostname, now, dry_run, run_lock is not None, state_unusable
        )
        checked, removed = removal.findings, tuple(removal.outgoing)
    outcome = alert_stage(
        config, checked, result.hostname, now, dry_run, removed, state_unusable, checkpoint
    )
    manager = None
    if config.alertmanager.configured:
        from lockwarden.alertmanager import alertmanager_stage

        manager = alertmanager_stage(
            config.alertmanager,
            checked,
            state_directory_of(config.state.path),
            result.hostname,
            now,
            dry_run,
            state_unusable,
        )
        if not config.notify.configured:
            outcome.unsent = 0  # alerts do go out, to Alertmanager: "alerting is off" is wrong
    findings, notes = with_outcome(checked, result.notes, outcome)
    if manager is not None:
        notes = (*notes, *manager.notes())
    return AlertedRun(replace(result, findings=findings, notes=notes), outcome, manager)


class SightingMemory:
    """Reads the sighting memory before a run judges, and writes this run's sightings after
    (sightings.py). Only a run that sees an undated kernel-lock hold, or must end a series,
    writes; a state problem becomes a note (the run's findings stand, without memory)."""

    def __init__(self, config: Config, now: datetime, unusable: str | None) -> None:
        """`unusable`: why the state directory is not to be touched this run (a hung mount)."""
        self.config = config
        self.now = now
        path = config.state.path or default_state_path()
        self.journal = Journal(path, config.state.max_bytes, unusable)
        self.latest: LastSeen | None = None
        self.problem: str | None = unusable
        try:
            if unusable is None and os.path.exists(self.journal.path):
                self.latest = sightings.last_seen(self.journal.load().records)
        except StateError as error:
            self.problem = str(error)
        gaps = {lock.name: lock.warn_after for lock in config.locks}
        self.memory: Memory = sightings.memory(self.latest, now, gaps)

    def remember(self, result: RunResult, lock_first: bool) -> RunResult:
        """Append this run's `seen` record. `lock_first`: take the run lock for the write
        (a run with alerting off holds none); a busy one means another run records it."""
        record = sightings.sightings_of(result.findings, self.memory, self.now)
        if self.problem is None and sightings.worth_writing(record, self.latest):
            self.problem = self._append(record, lock_first)
        if self.problem is None:
            return result
        note = (
            f"sighting memory not saved ({self.problem}): a kernel lock held continuously "
            "is reported by its holder's running time only, which never escalates"
        )
        log.warning("%s", note)
        return replace(result, notes=(*result.notes, note))

    def _append(self, record: Record, lock_first: bool) -> str | None:
        run_lock = None
        try:
            if lock_first:
                run_lock = RunLock.acquire(self.journal.directory)
            self.journal.append(record)
            if lock_first and self.journal.needs_compaction():
                self.journal.compact(sightings.keep_latest_seen)
        except RunBusy:
            return None  # the run that holds it records the sightings
        except StateError as error:
            return str(error)
        finally:
            self.journal.close()
            if run_lock is not None:
                run_lock.release()
        return None


def _state_unusable(config: Config) -> str | None:
    """Why the state directory must not be touched this run (its file system hangs), or None."""
    return probe_state_dir(state_directory_of(config.state.path), config.fs_timeout)


def _take_run_lock(config: Config) -> RunLock | None:
    """The run lock; None when the state directory is unusable (the alert stage reports it)."""
    try:
        return RunLock.acquire(state_directory_of(config.state.path))
    except StateError:
        return None
