"""`lockwarden --once`: inspect, remember sightings, remove what may be removed, alert, tell
Alertmanager, all under the run lock. The orchestration of the stages below; no stage of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden.check import blocked, sightings
from lockwarden.check.sightings import LastSeen, Memory
from lockwarden.config import Config
from lockwarden.model import Finding, Severity
from lockwarden.pipeline import FileReads, RunResult, run_once
from lockwarden.procfs.reader import HostReader, wall_clock
from lockwarden.state.journal import (
    Journal,
    RunBusy,
    RunLock,
    StateError,
    default_state_path,
    state_directory_of,
)
from lockwarden.state.records import SeenRecord
from lockwarden.support.checkpoints import Checkpoint, skip

if TYPE_CHECKING:
    from lockwarden.alerts.alertmanager import ManagerOutcome
    from lockwarden.alerts.decide import Outgoing
    from lockwarden.alerts.outcome import AlertOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
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
    host = HostReader(wall_clock, read_timeout=config.fs_timeout)
    # Every run reads the sighting memory, so every run first makes sure the state
    # directory's file system answers: in the child that then reads the locks' claims, which
    # it does while this process reads the memory.
    reads = FileReads(
        [lock for lock in config.locks if not lock.database],
        host.pid_max,
        state_directory_of(config.state.path),
        config.fs_timeout,
    )
    try:
        unusable = reads.state_problem()
        return _run(config, now, dry_run, on_start, checkpoint, host, reads, unusable)
    finally:
        reads.close()


def _run(
    config: Config,
    now: datetime,
    dry_run: bool,
    on_start: Callable[[], None] | None,
    checkpoint: Checkpoint,
    host: HostReader,
    reads: FileReads,
    unusable: str | None,
) -> AlertedRun:
    removing = any(lock.remove_stale for lock in config.locks)
    # Alertmanager is told every run (a firing alert must be renewed, a cleared one ended).
    stateful = config.notify.configured or removing or config.alertmanager.configured
    if not (stateful or dry_run):
        if on_start is not None:
            on_start()
        sighting = SightingMemory(config, now, unusable)
        result = run_once(config, now, remembered=sighting.memory, host=host, reads=reads)
        result = sighting.remember(result, lock_first=True)
        if all(finding.severity is Severity.OK for finding in result.findings):
            # Alerting is off and nothing is wrong: nothing to decide, count or send, so the
            # alert stage (and its imports) is not paid for on the every-minute quiet path.
            return sighting.said(AlertedRun(result, None))
        return sighting.said(_alert(config, now, dry_run, result, None, unusable, checkpoint))
    writes = stateful and not dry_run
    run_lock = _take_run_lock(config) if writes and unusable is None else None
    try:
        if on_start is not None:
            on_start()
        sighting = SightingMemory(config, now, unusable)
        result = run_once(
            config, now, remembered=sighting.memory, host=host, reads=reads, what_if=dry_run
        )
        if not dry_run:
            result = sighting.remember(result, lock_first=run_lock is None)
        return sighting.said(_alert(config, now, dry_run, result, run_lock, unusable, checkpoint))
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
    from lockwarden.alerts.delivery import alert_stage
    from lockwarden.alerts.outcome import with_outcome

    checkpoint("after-snapshot")
    checked: tuple[Finding, ...] = result.findings
    removed: tuple[Outgoing, ...] = ()  # what removal wants said, before any "resolved"
    if any(lock.remove_stale for lock in config.locks):
        from lockwarden.remove.removal import removal_stage

        removal = removal_stage(
            config, checked, result.hostname, now, dry_run, run_lock is not None, state_unusable
        )
        checked, removed = removal.findings, tuple(removal.outgoing)
    still_blocked = frozenset(finding.name for finding in result.watching)
    outcome = alert_stage(
        config,
        checked,
        result.hostname,
        now,
        dry_run,
        removed,
        state_unusable,
        checkpoint,
        still_blocked,
    )
    manager = None
    if config.alertmanager.configured:
        from lockwarden.alerts.alertmanager import alertmanager_stage

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
    writes; a state problem becomes the `lockwarden:state` finding (unknown: a lock held too
    long could otherwise read OK run after run), and the locks' findings stand, without
    memory."""

    def __init__(self, config: Config, now: datetime, unusable: str | None) -> None:
        """`unusable`: why the state directory is not to be touched this run (a hung mount)."""
        self.config = config
        self.now = now
        path = config.state.path or default_state_path()
        self.journal = Journal(path, config.state.max_bytes, unusable)
        self.latest: LastSeen | None = None
        self.problem: str | None = unusable
        self.unsaved: str | None = None  # why this run's sightings were not saved
        try:
            if unusable is None and os.path.exists(self.journal.path):
                self.latest = sightings.last_seen(self.journal.load().records)
        except StateError as error:
            self.problem = str(error)
        gaps = {lock.name: sightings.longest_gap(lock.warn_after) for lock in config.locks}
        blocked_gap = sightings.longest_gap(config.host.blocked_after)
        for name in self.latest.locks if self.latest is not None else ():
            if blocked.is_blocked_name(name):
                gaps[name] = blocked_gap
        self.memory: Memory = sightings.memory(self.latest, now, gaps)

    def remember(self, result: RunResult, lock_first: bool) -> RunResult:
        """Append this run's `seen` record. `lock_first`: take the run lock for the write
        (a run with alerting off holds none); a busy one means another run records it."""
        seen = (*result.findings, *result.watching)  # blocked writers within budget too
        record = sightings.sightings_of(seen, self.memory, self.now, self.latest)
        if self.problem is None and sightings.worth_writing(record, self.latest):
            self.problem = self._append(record, lock_first)
        if self.problem is None:
            return result
        self.unsaved = (
            f"sighting memory not saved ({self.problem}): a kernel lock held continuously "
            "is reported by its holder's running time only, which never escalates"
        )
        log.warning("%s", self.unsaved)
        return result

    def said(self, alerted: AlertedRun) -> AlertedRun:
        """The run's report with `lockwarden:state` saying the memory was not saved (after the
        alert stage: lockwarden's own finding is not a lock to decide on), one finding with
        the alert stage's own, if it made one."""
        if self.unsaved is None:
            return alerted
        from lockwarden.alerts.outcome import STATE_FINDING, state_finding

        findings = alerted.result.findings
        reasons = [finding.reason for finding in findings if finding.name == STATE_FINDING]
        others = tuple(finding for finding in findings if finding.name != STATE_FINDING)
        merged = state_finding(self.journal.path, "; ".join([*reasons, self.unsaved]))
        return replace(alerted, result=replace(alerted.result, findings=(*others, merged)))

    def _append(self, record: SeenRecord, lock_first: bool) -> str | None:
        run_lock = None
        try:
            if lock_first:
                run_lock = RunLock.acquire(self.journal.directory)
            # not fsynced unless it names a database session (Journal.append says why)
            self.journal.append(record, durable=sightings.outlives_the_boot(record))
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


def _take_run_lock(config: Config) -> RunLock | None:
    """The run lock; None when the state directory is unusable (the alert stage reports it)."""
    try:
        return RunLock.acquire(state_directory_of(config.state.path))
    except StateError:
        return None
