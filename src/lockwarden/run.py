"""Wire the stages for one run: config -> snapshot -> claims -> evidence -> findings.

No argparse, no printing, no exit: the CLI does that. `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden import lazylog
from lockwarden.classify import Policy, classify
from lockwarden.config import Config, LockConfig
from lockwarden.crashpoints import crash_point
from lockwarden.formats import read_claim
from lockwarden.host import Snapshot
from lockwarden.identify import gather, keys_to_scan
from lockwarden.journal import RunLock, StateError
from lockwarden.model import Claim, Finding, Severity, State, worst
from lockwarden.structs import field, replace, struct

if TYPE_CHECKING:
    from lockwarden.alerting import AlertOutcome
    from lockwarden.alertmanager import ManagerOutcome
    from lockwarden.decide import Outgoing

log = lazylog.getLogger(__name__)


@struct
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
    locks: Sequence[LockConfig], snapshot: Snapshot, now: datetime
) -> tuple[Finding, ...]:
    """Read every lock's claim first, so one descriptor scan serves them all, then judge."""
    claims = [_read(lock, snapshot) for lock in locks]
    snapshot.scan_descriptors(keys_to_scan((c for c in claims if c is not None), snapshot))
    return tuple(
        _judge(lock, claim, snapshot, now) for lock, claim in zip(locks, claims, strict=True)
    )


def _read(lock: LockConfig, snapshot: Snapshot) -> Claim | None:
    try:
        return read_claim(lock.path, lock.format, snapshot.pid_max)
    except Exception:  # one unreadable lock must not hide the others: it becomes unknown
        log.debug("reading %s failed", lock.path, exc_info=True)
        return None


def _judge(lock: LockConfig, claim: Claim | None, snapshot: Snapshot, now: datetime) -> Finding:
    try:
        if claim is None:
            raise RuntimeError(f"could not read {lock.path}")
        return classify(lock.name, claim, gather(claim, snapshot), policy_for(lock), now)
    except Exception as error:
        log.debug("judging %s failed", lock.name, exc_info=True)
        return Finding(
            name=lock.name,
            path=lock.path,
            format=lock.format,
            state=State.UNKNOWN,
            severity=Severity.UNKNOWN,
            reason=f"internal error while inspecting it: {error} (run with -v for details)",
        )


def run_once(
    config: Config, now: datetime, proc: str = "/proc", locks_text: str | None = None
) -> RunResult:
    """`locks_text`: the content of /proc/locks when the caller already read it."""
    snapshot = Snapshot.capture(proc, locks_text=locks_text)
    findings = inspect_locks(config.locks, snapshot, now)
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
) -> RunResult:
    """One lock, no config: what `lockwarden inspect PATH` and the demo report."""
    lock = LockConfig(
        name=path.rstrip("/").rsplit("/", 1)[-1] or path,
        path=path,
        format=lock_format,
        warn_after=warn_after,
        critical_after=critical_after,
    )
    snapshot = Snapshot.capture(proc)
    findings = inspect_locks([lock], snapshot, now)
    return RunResult(snapshot.hostname, snapshot.boot_id, now, findings)


@struct
class AlertedRun:
    """A run's result with what its alert stage did (None when it did not run)."""

    result: RunResult
    outcome: AlertOutcome | None  # None: a quiet run with alerting off, nothing to decide
    alertmanager: ManagerOutcome | None = None  # None: no [alertmanager] configured

    @property
    def undelivered(self) -> int:
        """Messages this run could not hand to a service or an Alertmanager (each retried)."""
        count = 0
        if self.outcome is not None:
            count += sum(not delivery.ok for delivery in self.outcome.deliveries)
            count += self.outcome.unsent if self.outcome.notify_problem else 0
        if self.alertmanager is not None:
            count += len(self.alertmanager.failures)
        return count


def run_and_alert(
    config: Config,
    now: datetime,
    dry_run: bool = False,
    on_start: Callable[[], None] | None = None,
    locks_text: str | None = None,
) -> AlertedRun:
    """`--once`: inspect, then decide, notify and journal, holding the run lock throughout
    (raises RunBusy when another run holds it). A dry run decides only: no lock, no writes."""
    removing = any(lock.remove_stale for lock in config.locks)
    # Alertmanager is told every run (a firing alert must be renewed, a cleared one ended).
    stateful = config.notify.configured or removing or config.alertmanager.configured
    if not (stateful or dry_run):
        if on_start is not None:
            on_start()
        result = run_once(config, now, locks_text=locks_text)
        if all(finding.severity is Severity.OK for finding in result.findings):
            # Alerting is off and nothing is wrong: nothing to decide, count or send, so the
            # alert stage (and its imports) is not paid for on the every-minute quiet path.
            return AlertedRun(result, None)
        return _alert(config, now, dry_run, result, None)
    from lockwarden.alerting import state_directory

    writes = stateful and not dry_run
    run_lock = _take_run_lock(state_directory(config)) if writes else None
    try:
        if on_start is not None:
            on_start()
        result = run_once(config, now, locks_text=locks_text)
        return _alert(config, now, dry_run, result, run_lock)
    finally:
        if run_lock is not None:
            run_lock.release()


def _alert(
    config: Config, now: datetime, dry_run: bool, result: RunResult, run_lock: RunLock | None
) -> AlertedRun:
    from lockwarden.alerting import alert_stage, with_outcome

    crash_point("after-snapshot")  # test-only (crashpoints.py); a no-op unless asked
    checked: tuple[Finding, ...] = result.findings
    removed: tuple[Outgoing, ...] = ()  # what removal wants said, before any "resolved"
    if any(lock.remove_stale for lock in config.locks):
        from lockwarden.removal import removal_stage

        removal = removal_stage(
            config, checked, result.hostname, now, dry_run, run_lock is not None
        )
        checked, removed = removal.findings, tuple(removal.outgoing)
    outcome = alert_stage(config, checked, result.hostname, now, dry_run, removed)
    manager = None
    if config.alertmanager.configured:
        from lockwarden.alerting import state_directory
        from lockwarden.alertmanager import alertmanager_stage

        manager = alertmanager_stage(
            config.alertmanager, checked, state_directory(config), result.hostname, now, dry_run
        )
        if not config.notify.configured:
            outcome.unsent = 0  # alerts do go out, to Alertmanager: "alerting is off" is wrong
    findings, notes = with_outcome(checked, result.notes, outcome)
    if manager is not None:
        notes = (*notes, *manager.notes())
    return AlertedRun(replace(result, findings=findings, notes=notes), outcome, manager)


def _take_run_lock(directory: str) -> RunLock | None:
    """The run lock; None when the state directory is unusable (the alert stage reports it)."""
    try:
        return RunLock.acquire(directory)
    except StateError:
        return None
