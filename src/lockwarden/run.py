"""One `lockwarden --once`, top to bottom: open the state, inspect, remember, remove, decide
and deliver, tell Alertmanager, publish. It returns the run's result; the command line only
parses the arguments, prints the result and exits with its code.

The run's state (the run lock, the journal loaded once, the fallback journal, the one list of
state problems) is opened once, as a `RunState`, and handed to each stage that needs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden.check import blocked, sightings
from lockwarden.check.sightings import LastSeen, Memory, keep_latest_seen
from lockwarden.config import Config
from lockwarden.model import Finding, Severity
from lockwarden.pipeline import FileReads, RunResult, run_once
from lockwarden.procfs.reader import HostReader, wall_clock
from lockwarden.state.records import JournalRecord
from lockwarden.state.run_state import RunState
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

    def with_finding(self, finding: Finding) -> AlertedRun:
        findings = (*self.result.findings, finding)
        return replace(self, result=replace(self.result, findings=findings))


def once(
    config: Config, now: datetime, dry_run: bool = False, checkpoint: Checkpoint = skip
) -> AlertedRun:
    """`--once`: every stage, a run that writes holding the run lock from opening its state to
    its last append (raises RunBusy when another run holds it); it publishes (textfile,
    heartbeat) after letting go. A dry run decides only: no lock, no writes, no textfile, no
    heartbeat. A state directory whose file system does not answer is not touched
    at all: the run inspects, alerts and reports without it, and says so."""
    started = time.monotonic()
    host = HostReader(wall_clock, read_timeout=config.fs_timeout)
    # Every run reads the sighting memory, so every run first makes sure the state
    # directory's file system answers: in the child that then reads the locks' claims.
    reads = FileReads(
        [lock for lock in config.locks if not lock.database],
        host.pid_max,
        config.state.directory,
        config.fs_timeout,
    )
    try:
        unusable = reads.state_problem()
        state = RunState.open(
            config.state.journal_path,
            config.state.max_bytes,
            unusable,
            writes=_stateful(config) and not dry_run,
            checkpoint=checkpoint,
            fallback=config.notify.configured,
        )
        try:
            alerted = _stages(config, now, dry_run, checkpoint, host, reads, state)
        finally:
            state.close()  # the run lock too: publishing needs none
    finally:
        reads.close()
    if dry_run:
        return alerted
    beat = config.heartbeat.url is not None
    return _publish(config, alerted, time.monotonic() - started, beat)


def _stateful(config: Config) -> bool:
    """A run that writes the journal: alerting, removal, or Alertmanager (told every run: a
    firing alert must be renewed, a cleared one ended)."""
    removing = any(lock.remove_stale for lock in config.locks)
    return config.notify.configured or removing or config.alertmanager.configured


def _stages(
    config: Config,
    now: datetime,
    dry_run: bool,
    checkpoint: Checkpoint,
    host: HostReader,
    reads: FileReads,
    state: RunState,
) -> AlertedRun:
    if config.heartbeat.url is not None and config.heartbeat.send_start and not dry_run:
        from lockwarden.alerts import heartbeat

        heartbeat.ping(config.heartbeat, heartbeat.START)
    memory = SightingMemory(config, now, state)
    result = run_once(
        config, now, remembered=memory.memory, host=host, reads=reads, what_if=dry_run
    )
    if not dry_run:
        memory.remember(result)
    quiet = not (_stateful(config) or dry_run) and all(
        finding.severity is Severity.OK for finding in result.findings
    )
    # Alerting is off and nothing is wrong: nothing to decide, count or send, so the alert
    # stage (and its imports) is not paid for on the every-minute quiet path.
    alerted = (
        AlertedRun(result, None)
        if quiet
        else _alert(config, now, dry_run, result, state, checkpoint)
    )
    if state.writes:  # what the run wrote is bounded, whichever stage wrote it
        state.compact(compaction_keep(config))
    return memory.said(alerted)


def compaction_keep(config: Config) -> Callable[[list[JournalRecord]], list[JournalRecord]]:
    """What compaction keeps of the journal: what dedupe, removal and the sighting memory
    need (state/history.py, check/sightings.py)."""
    from lockwarden.state.history import KEEP_RUNS, keep_for_dedupe, keep_for_removal

    longest = max(
        (max(lock.alerts.resolve_after, lock.alerts.unknown_after) for lock in config.locks),
        default=0,
    )
    keep_runs = max(KEEP_RUNS, longest + 1)
    # closed incidents may fill half the threshold, so that what is kept stays well below it
    # and quiet runs do not compact again and again
    budget = config.state.max_bytes // 2
    return lambda records: keep_latest_seen(
        keep_for_removal(keep_for_dedupe(records, keep_runs, closed_budget=budget))
    )


def _alert(
    config: Config,
    now: datetime,
    dry_run: bool,
    result: RunResult,
    state: RunState,
    checkpoint: Checkpoint,
) -> AlertedRun:
    from lockwarden.alerts.delivery import alert_stage
    from lockwarden.alerts.outcome import with_outcome

    checkpoint("after-snapshot")
    checked: tuple[Finding, ...] = result.findings
    removed: tuple[Outgoing, ...] = ()  # what removal wants said, before any "resolved"
    if any(lock.remove_stale for lock in config.locks):
        from lockwarden.remove.removal import removal_stage

        removal = removal_stage(config, checked, result.hostname, now, dry_run, state)
        checked, removed = removal.findings, tuple(removal.outgoing)
    still_blocked = frozenset(finding.name for finding in result.watching)
    outcome = alert_stage(
        config, state, checked, result.hostname, now, dry_run, removed, still_blocked
    )
    manager = None
    if config.alertmanager.configured:
        from lockwarden.alerts.alertmanager import alertmanager_stage

        manager = alertmanager_stage(
            config.alertmanager,
            checked,
            config.state.directory,
            result.hostname,
            now,
            dry_run,
            state.state_journal.unusable,
        )
        if not config.notify.configured:
            outcome.unsent = 0  # alerts do go out, to Alertmanager: "alerting is off" is wrong
    findings, notes = with_outcome(checked, result.notes, outcome)
    if manager is not None:
        notes = (*notes, *manager.notes())
    return AlertedRun(replace(result, findings=findings, notes=notes), outcome, manager)


def _publish(config: Config, alerted: AlertedRun, duration: float, beat: bool) -> AlertedRun:
    """What the run tells beyond its report: the log lines of what did not reach a person,
    the Prometheus textfile (before the heartbeat: a failure to write it is said in both), and
    the heartbeat, /fail when lockwarden's own job failed (its state, its notify services,
    its textfile), whatever the locks' states."""
    if alerted.outcome is not None:
        from lockwarden.alerts.outcome import report_failures

        report_failures(alerted.outcome)
    if config.prometheus_textfile:
        unwritten = write_metrics(config.prometheus_textfile, alerted, duration)
        if unwritten is not None:
            alerted = alerted.with_finding(unwritten)
    if beat:
        from lockwarden.alerts import heartbeat

        failed = (
            (alerted.outcome is not None and alerted.outcome.failed)
            or (alerted.alertmanager is not None and alerted.alertmanager.failed)
            or _own_job_failed(alerted)
        )
        heartbeat.ping(config.heartbeat, heartbeat.FAIL if failed else None)
    return alerted


def _own_job_failed(alerted: AlertedRun) -> bool:
    """lockwarden's own findings: its state could not be used, or its textfile written."""
    from lockwarden.alerts.outcome import STATE_FINDING
    from lockwarden.output.prometheus import TEXTFILE_FINDING

    own = (STATE_FINDING, TEXTFILE_FINDING)
    return any(finding.name in own for finding in alerted.result.findings)


def write_metrics(path: str, alerted: AlertedRun, duration: float) -> Finding | None:
    """A file that cannot be written is logged and becomes the `lockwarden:prometheus`
    finding (unknown; a critical lock still outranks it)."""
    from lockwarden.output.prometheus import RunFacts, unwritten, write_textfile

    outcome = alerted.outcome
    run = RunFacts(
        alerted.result.checked_at,
        duration,
        alerted.undelivered,
        len(outcome.invalid_services) if outcome is not None else 0,
        outcome.last_delivered_at if outcome is not None else None,
    )
    try:
        write_textfile(path, alerted.result.findings, run)
    except OSError as error:
        log.error("could not write the Prometheus textfile %s: %s", path, error)
        return unwritten(path, error)
    return None


class SightingMemory:
    """Reads the sighting memory before a run judges, and writes this run's sightings after
    (check/sightings.py). Only a run that sees an undated kernel-lock hold, or must end a
    series, writes; a state problem becomes the `lockwarden:state` finding (unknown: a lock
    held too long could otherwise read OK run after run), and the locks' findings stand,
    without memory."""

    def __init__(self, config: Config, now: datetime, state: RunState) -> None:
        self.now = now
        self.state = state
        # the file's record, or a later one an earlier version appended to the journal
        in_file = None if state.seen is None else sightings.last_seen([state.seen])
        self.latest: LastSeen | None = sightings.newest(in_file, sightings.last_seen(state.records))
        self.problem: str | None = state.problems[0] if state.problems else None
        self.unsaved: str | None = None  # why this run's sightings were not saved
        gaps = {lock.name: sightings.longest_gap(lock.warn_after) for lock in config.locks}
        blocked_gap = sightings.longest_gap(config.host.blocked_after)
        for name in self.latest.locks if self.latest is not None else ():
            if blocked.is_blocked_name(name):
                gaps[name] = blocked_gap
        self.memory: Memory = sightings.memory(self.latest, now, gaps)

    def remember(self, result: RunResult) -> None:
        """Write this run's `seen` record in place of the last (a run holding no run lock takes
        it for this write; a busy one means another run records it)."""
        seen = (*result.findings, *result.watching)  # blocked writers within budget too
        record = sightings.sightings_of(seen, self.memory, self.now, self.latest, result.boot_id)
        if self.problem is None and sightings.worth_writing(record, self.latest):
            # not fsynced unless it, or the one it replaces, names a database session
            durable = sightings.outlives_the_boot(record, self.latest)
            self.problem = self.state.replace_seen(record, durable)
        if self.problem is None:
            return
        self.unsaved = (
            f"sighting memory not saved ({self.problem}): a kernel lock held continuously "
            "is reported by its holder's running time only, which never escalates"
        )
        log.warning("%s", self.unsaved)

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
        merged = state_finding(self.state.state_journal.path, "; ".join([*reasons, self.unsaved]))
        return replace(alerted, result=replace(alerted.result, findings=(*others, merged)))
