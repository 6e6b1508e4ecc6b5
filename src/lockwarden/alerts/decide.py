"""findings + journal history + now -> what to send. Pure: no clock, no files, no network.

An incident is one bad episode of one lock: its key is the lock name, the state class
(held_too_long, stale, unknown) and the holder's identity (pid + start ticks + boot id, or the
lock's inode and record). A new key for a lock is a new incident; the old one is resolved.

* open:     notify once (`alert`); unknown only after `unknown_after` unknown runs in a row;
* ongoing:  remind every `repeat_interval` ("0" = never);
* over:     after `resolve_after` good runs in a row, send `resolved` (how long, who held it);
* pending:  a message some service has not confirmed is retried every run until
            `give_up_after` after it was due, then recorded undeliverable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

from lockwarden.check.blocked import is_blocked_name
from lockwarden.config import AlertSettings
from lockwarden.model import Finding, Severity, State
from lockwarden.state.history import (
    ALERT,
    GOOD,
    REMINDER,
    RESOLVED,
    UNRESOLVED,
    History,
    Incident,
    Sent,
)
from lockwarden.state.records import (
    CloseRecord,
    DueRecord,
    GiveUpRecord,
    JournalRecord,
    OpenRecord,
    RunRecord,
)
from lockwarden.support.durations import format_time

if TYPE_CHECKING:
    from lockwarden.alerts.messages import Message

# A message is composed only when one is due: a quiet run never loads the renderer
# (alerts/messages.py, imported where a message is made).


@dataclass(frozen=True)
class LockPolicy:
    """A lock's alert settings and the notify tags that route its messages."""

    alerts: AlertSettings = field(default_factory=AlertSettings)
    tags: tuple[str, ...] = ()
    role: str | None = None  # what the store is (the lock's `role`), shown in its alerts


@dataclass(frozen=True)
class Outgoing:
    """A new message to send; its targets are resolved by the notifier at send time."""

    message_id: str
    incident: str
    lock: str
    kind: str
    message: Message
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Retry:
    """A message due earlier that some services have not confirmed yet."""

    sent: Sent
    services: tuple[str, ...]
    lock: str = ""  # the lock of its incident ("" when the journal no longer has that)


@dataclass
class Plan:
    """What one run should send, retry or give up on, and what to journal."""

    records: list[JournalRecord] = field(default_factory=list)
    outgoing: list[Outgoing] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)
    given_up: list[Retry] = field(default_factory=list)

    @property
    def sends_anything(self) -> bool:
        return bool(self.outgoing or self.retries)


def state_class(finding: Finding, alerts: AlertSettings) -> str:
    """The class an incident is about, or GOOD when this finding pages nobody."""
    if finding.state is State.STALE:
        return State.STALE.value
    if finding.state is State.UNKNOWN:
        return State.UNKNOWN.value
    threshold = Severity.WARNING if alerts.min_severity == "warning" else Severity.CRITICAL
    if finding.state is State.HELD_TOO_LONG and finding.severity >= threshold:
        return State.HELD_TOO_LONG.value
    return GOOD


def incident_key(finding: Finding, klass: str) -> str:
    """Unknown findings share one key per lock: a flapping reason is not a new incident."""
    identity = "-" if klass == State.UNKNOWN.value else (finding.identity or "-")
    return f"{finding.name}|{klass}|{identity}"


def incident_id(key: str, opened_at: datetime) -> str:
    import hashlib  # only a run that opens an incident needs it (~4 ms with OpenSSL)

    # A key holds the lock's path, which need not be UTF-8 (a surrogate escape per byte that
    # is not): surrogateescape hashes the file's own bytes, where a strict encode crashed the run.
    said = f"{key}|{format_time(opened_at)}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(said).hexdigest()[:12]


def decide(
    findings: Sequence[Finding],
    history: History,
    now: datetime,
    policies: Mapping[str, LockPolicy],
    host: str,
    still_blocked: frozenset[str] = frozenset(),
) -> Plan:
    """`still_blocked`: blocked-writer locks this run saw blocked within their budget."""
    plan = Plan()
    run = _run_record(findings, policies, now)
    if _worth_recording(run, history):
        plan.records.append(run)
    for finding in findings:
        _decide_lock(plan, finding, history, now, policies.get(finding.name, LockPolicy()), host)
    checked = {finding.name for finding in findings}
    _close_unchecked(plan, history, checked, now, policies, host, still_blocked)
    _resolve_interrupted(plan, history, findings, policies, host)
    _retry_pending(plan, history, now, policies)
    return plan


def _run_record(
    findings: Sequence[Finding], policies: Mapping[str, LockPolicy], now: datetime
) -> RunRecord:
    locks: dict[str, tuple[str, str | None]] = {}
    for finding in findings:
        klass = state_class(finding, policies.get(finding.name, LockPolicy()).alerts)
        if klass != GOOD:
            locks[finding.name] = (klass, incident_key(finding, klass))
    return RunRecord(now, locks)


def _worth_recording(run: RunRecord, history: History) -> bool:
    """A run changes what the streaks count unless it is all good, nothing is open, and the
    last recorded run was all good too: skipping those keeps quiet runs free of writes."""
    last_was_bad = bool(history.runs and history.runs[-1].locks)
    return bool(run.locks) or bool(history.open_incidents()) or last_was_bad


def _decide_lock(
    plan: Plan,
    finding: Finding,
    history: History,
    now: datetime,
    policy: LockPolicy,
    host: str,
) -> None:
    klass = state_class(finding, policy.alerts)
    current = history.open_incident(finding.name)
    if klass == GOOD:
        if current is not None and history.streak(finding.name, GOOD) + 1 >= (
            policy.alerts.resolve_after
        ):
            _resolve(plan, current, finding, now, policy, host, why="resolved")
        return
    key = incident_key(finding, klass)
    if current is not None and current.key == key and not _has(current, ALERT):
        _alert_interrupted(plan, current, finding, policy, host)
        return
    if current is not None and current.key == key:
        _maybe_remind(plan, current, finding, history, now, policy, host)
        return
    if klass == State.UNKNOWN.value and (
        history.streak(finding.name, klass) + 1 < policy.alerts.unknown_after
    ):
        return  # a transient permission error pages nobody
    if current is not None and _holder_died(current, klass, finding):
        # Not a recovery: the holder's death left the lock, writes are still blocked. No
        # RESOLVED (shown green) between the page and the stale alert, which says who it was.
        plan.records.append(CloseRecord(now, current.incident_id, DIED))
        _open(plan, finding, klass, key, now, policy, host, died=current.holder or "its holder")
        return
    if current is not None:
        _resolve(plan, current, finding, now, policy, host, why="superseded")
    _open(plan, finding, klass, key, now, policy, host)


DIED = "holder died"
"""Why an incident held too long ended: its holder died and left the lock (now stale)."""


def _holder_died(incident: Incident, klass: str, finding: Finding) -> bool:
    """Held too long, now stale, and the stale lock's proof names the PID that was paged
    about (another process's leftover is another incident)."""
    if incident.state_class != State.HELD_TOO_LONG.value or klass != State.STALE.value:
        return False
    paged = re.match(r"PID (\d+)\b", incident.holder or "")
    said = f"{finding.reason} {finding.proof or ''}"
    return paged is not None and re.search(rf"\bPID {paged.group(1)}\b", said) is not None


def _alert_interrupted(
    plan: Plan, incident: Incident, finding: Finding, policy: LockPolicy, host: str
) -> None:
    """The run that opened it died before its alert was due (kill -9, power loss): the "open"
    record is there, the alert is not. Send it now, or it is lost until the first reminder."""
    from lockwarden.alerts.messages import render_alert

    message = render_alert(finding, host, ALERT, policy.role)
    identifier = incident.incident_id
    plan.outgoing.append(
        Outgoing(f"{identifier}/{ALERT}", identifier, finding.name, ALERT, message, policy.tags)
    )


def _open(
    plan: Plan,
    finding: Finding,
    klass: str,
    key: str,
    now: datetime,
    policy: LockPolicy,
    host: str,
    died: str | None = None,
) -> None:
    """`died`: the holder of the incident held too long that this stale one continues."""
    from lockwarden.alerts.messages import holder_label, render_alert

    identifier = incident_id(key, now)
    held_since = finding.held.since
    plan.records.append(
        OpenRecord(
            at=now,
            incident=identifier,
            lock=finding.name,
            key=key,
            state_class=klass,
            path=finding.path,
            holder=holder_label(finding.holder) or died,
            held_since=held_since,
        )
    )
    message = render_alert(finding, host, ALERT, policy.role, died=died)
    plan.outgoing.append(
        Outgoing(f"{identifier}/{ALERT}", identifier, finding.name, ALERT, message, policy.tags)
    )


def elapsed_since(moment: datetime, history: History, now: datetime) -> float:
    """Seconds from `moment` to `now`, walking the recorded runs in journal order and counting
    only forward steps: a wall clock stepped back an hour then delays a reminder by at most one
    run interval instead of an hour (a step forward can only bring it early, never lose it).
    """
    starts = [index for index, run in enumerate(history.runs) if run.at == moment]
    if not starts:  # that run's record was compacted away: plain wall-clock difference
        return (now - moment).total_seconds()
    # The first run at that moment: after a step back the same wall time can come round again,
    # and starting there would count the hour twice over (erring early, never late, is fine).
    moments = [run.at for run in history.runs[starts[0] :]] + [now]
    return sum(max((b - a).total_seconds(), 0.0) for a, b in pairwise(moments))


def _maybe_remind(
    plan: Plan,
    incident: Incident,
    finding: Finding,
    history: History,
    now: datetime,
    policy: LockPolicy,
    host: str,
) -> None:
    interval = policy.alerts.repeat_interval
    escalated = _escalated(incident, finding)
    due = interval > 0 and elapsed_since(incident.last_notice_at, history, now) >= interval
    if not (due or escalated):
        return
    from lockwarden.alerts.messages import render_alert

    message = render_alert(finding, host, REMINDER, policy.role, escalated=escalated)
    plan.outgoing.append(
        Outgoing(
            f"{incident.incident_id}/{REMINDER}@{format_time(now)}",
            incident.incident_id,
            incident.lock,
            REMINDER,
            message,
            policy.tags,
        )
    )


def _resolve(
    plan: Plan,
    incident: Incident,
    finding: Finding | None,
    now: datetime,
    policy: LockPolicy,
    host: str,
    why: str,
) -> None:
    plan.records.append(CloseRecord(now, incident.incident_id, why))
    if why == "unchecked":
        return
    _resolve_message(plan, incident, finding, now, policy, host, superseded=why == "superseded")


def _resolve_message(
    plan: Plan,
    incident: Incident,
    finding: Finding | None,
    now: datetime,
    policy: LockPolicy,
    host: str,
    superseded: bool,
) -> None:
    from lockwarden.alerts.messages import Ended, render_resolved

    ended = Ended(
        lock=incident.lock,
        path=incident.path,
        holder=incident.holder,
        opened_at=incident.opened_at,
        held_since=incident.held_since,
        state=incident.state_class,
    )
    message = render_resolved(ended, finding, host, now, superseded=superseded)
    plan.outgoing.append(
        Outgoing(
            f"{incident.incident_id}/{RESOLVED}",
            incident.incident_id,
            incident.lock,
            RESOLVED,
            message,
            policy.tags,
        )
    )


def _escalated(incident: Incident, finding: Finding) -> bool:
    """The incident was last told as a warning and is critical now: told at once (as a
    reminder that says so), not at the next reminder, repeat_interval later."""
    notices = [sent for sent in incident.messages if sent.kind in (ALERT, REMINDER)]
    if finding.severity is not Severity.CRITICAL or not notices:
        return False
    from lockwarden.alerts.messages import NOTIFY_TYPES  # only while a critical incident lasts

    last = max(notices, key=lambda sent: sent.due_at)
    return last.notify_type == NOTIFY_TYPES[Severity.WARNING]


def _has(incident: Incident, kind: str) -> bool:
    return any(message.kind == kind for message in incident.messages)


def _resolve_interrupted(
    plan: Plan,
    history: History,
    findings: Sequence[Finding],
    policies: Mapping[str, LockPolicy],
    host: str,
) -> None:
    """An incident closed by the last recorded run, which died before its "resolved" was due:
    send that message now. (Only the last run: compaction may drop older closed incidents'
    messages, and their "resolved" went out long ago.)"""
    if not history.runs:
        return
    last_run = history.runs[-1].at
    now_of = {finding.name: finding for finding in findings}
    for incident in list(history.incidents.values()):
        interrupted = (
            incident.closed_at == last_run
            and incident.why_closed in ("resolved", "superseded")
            and not _has(incident, RESOLVED)
        )
        if interrupted:
            _resolve_message(
                plan,
                incident,
                now_of.get(incident.lock),
                last_run,
                policies.get(incident.lock, LockPolicy()),
                host,
                superseded=incident.why_closed == "superseded",
            )


def _close_unchecked(
    plan: Plan,
    history: History,
    checked: set[str],
    now: datetime,
    policies: Mapping[str, LockPolicy],
    host: str,
    still_blocked: frozenset[str] = frozenset(),
) -> None:
    """An incident of a lock no longer in the config ends without a message. One of writers
    blocked on a lock nobody configured ends with "resolved" once no run has seen anyone
    blocked on that lock for `resolve_after` runs in a row; a run that sees them blocked
    within the budget (a gap between runs started the count over) neither ends nor reminds."""
    for incident in history.open_incidents():
        if incident.lock in checked or incident.lock in still_blocked:
            continue
        if is_blocked_name(incident.lock):
            policy = policies.get(incident.lock, LockPolicy())
            free_for = history.streak(incident.lock, GOOD) + 1
            if free_for >= policy.alerts.resolve_after:
                _resolve(plan, incident, None, now, policy, host, why=WAIT_OVER)
        else:
            _resolve(plan, incident, None, now, LockPolicy(), "", why="unchecked")


WAIT_OVER = "wait over"
"""Why a blocked writers' incident ended: no run sees them blocked past the budget now."""


def _retry_pending(
    plan: Plan, history: History, now: datetime, policies: Mapping[str, LockPolicy]
) -> None:
    for sent in history.pending_messages():
        lock = history.incidents[sent.incident].lock if sent.incident in history.incidents else ""
        give_up_after = policies.get(lock, LockPolicy()).alerts.give_up_after
        retry = Retry(sent, sent.pending, lock)
        if (now - sent.due_at).total_seconds() >= give_up_after:
            plan.given_up.append(retry)
            plan.records.append(GiveUpRecord(now, sent.message_id, sent.pending))
        else:
            plan.retries.append(retry)


@dataclass(frozen=True)
class StateNotice:
    """A notice about lockwarden's own state: degraded (its cause), or healthy again (the
    cause that was said)."""

    degraded: bool
    cause: str


def state_cause(problems: Sequence[str]) -> str:
    """The state problems as one cause, each once ("" when there are none)."""
    return "; ".join(dict.fromkeys(problems))


def state_notice(problems: Sequence[str], said: str | None) -> StateNotice | None:
    """One notice per cause of degradation, and one when it is over. `said`: the cause the
    last notice told (None when none is remembered). A cause already said is not sent again:
    stderr, the report and the textfile say it each run."""
    cause = state_cause(problems)
    if cause:
        return None if cause == said else StateNotice(True, cause)
    return None if said is None else StateNotice(False, said)


ALWAYS_TAG = "always"
"""A service tagged `always` gets every lock's messages, whatever their tags (as apprise)."""


class Addressable(Protocol):
    """What addressing needs of a configured notify service (alerts/notify.py's Service)."""

    @property
    def service_id(self) -> str: ...
    @property
    def legacy_id(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def tags(self) -> frozenset[str]: ...


def targets_of(services: Sequence[Addressable], tags: tuple[str, ...]) -> tuple[str, ...]:
    """The services a lock routes to: all of them, or those sharing one of its tags (and
    those tagged `always`, as apprise does)."""
    wanted = set(tags)
    return tuple(
        service.service_id
        for service in services
        if not wanted or service.tags & wanted or ALWAYS_TAG in service.tags
    )


def match_of(
    services: Sequence[Addressable], service_id: str, shown_urls: Iterable[str] = ()
) -> str | None:
    """The service a journaled id means now: the same id; else an id an older lockwarden
    wrote (`legacy_id`); else the one service with the URL shown in its earlier attempts
    (an apprise upgrade changes `plugin.url()`, not what the operator configured)."""
    if any(service.service_id == service_id for service in services):
        return service_id
    for service in services:
        if service.legacy_id == service_id:
            return service.service_id
    shown = set(shown_urls)
    by_url = [service.service_id for service in services if service.url in shown]
    return by_url[0] if len(by_url) == 1 else None


@dataclass(frozen=True)
class Readdressed:
    """A retry addressed to the services configured now: where it goes (`retry.services`,
    live services only), the records that say so, and what was dropped (services gone)."""

    retry: Retry
    records: tuple[JournalRecord, ...] = ()
    dropped: str | None = None


def readdress(retry: Retry, services: Sequence[Addressable], now: datetime) -> Readdressed:
    """Address a pending message to the services configured now. One due while notify was
    broken gets its services now; one journaled under ids an older lockwarden (or apprise)
    used is renamed; one that nobody has and whose services are all gone goes to today's;
    services removed from the config are given up on (they can never confirm)."""
    known = {service.service_id for service in services}
    records: list[JournalRecord] = []
    if UNRESOLVED in retry.services:  # due while notify was broken: resolve its services now
        targets = targets_of(services, retry.sent.tags)
        records.append(resolved_due(retry, targets))
        retry = Retry(retry.sent, targets, retry.lock)
    retry = _renamed(services, retry, records)
    gone = [service for service in retry.services if service not in known]
    today = targets_of(services, retry.sent.tags)
    if gone and len(gone) == len(retry.services) and not retry.sent.delivered and today:
        # Nobody has it and none of its services is left (a bad URL fixed, a service
        # replaced): it goes to the services configured now, as one due while notify was
        # broken does, rather than nobody being told until a reminder.
        records.append(resolved_due(retry, today))
        retry, gone = Retry(retry.sent, today, retry.lock), []
    dropped = None
    if gone:  # a service removed from the config can never confirm: stop waiting for it
        dropped = (
            f"{retry.sent.kind} for {retry.lock or 'a lock no longer configured'}: not retried "
            f"to {len(gone)} service(s) no longer configured"
        )
        why = "service no longer configured"
        records.append(GiveUpRecord(now, retry.sent.message_id, tuple(gone), why))
    live = tuple(service for service in retry.services if service in known)
    return Readdressed(Retry(retry.sent, live, retry.lock), tuple(records), dropped)


def _renamed(services: Sequence[Addressable], retry: Retry, records: list[JournalRecord]) -> Retry:
    """A retry whose services were journaled under other ids (an older lockwarden, or apprise
    naming a config-file service differently) is readdressed to the ids they have now."""
    known = {service.service_id for service in services}
    shown = {attempt.service: attempt.url for attempt in retry.sent.attempts}
    renamed: dict[str, str] = {}
    for service in retry.services:
        if service in known:
            continue
        now_named = match_of(services, service, [shown[service]] if service in shown else [])
        if now_named is not None:
            renamed[service] = now_named
    if not renamed:
        return retry
    addressed = tuple(renamed.get(service, service) for service in retry.services)
    targets = tuple(renamed.get(t, t) for t in (retry.sent.targets or ()))
    records.append(resolved_due(retry, targets))
    return Retry(retry.sent, addressed, retry.lock)


def resolved_due(retry: Retry, targets: tuple[str, ...]) -> DueRecord:
    """The `due` record of a message due earlier, addressed to `targets` now."""
    sent = retry.sent
    return DueRecord(
        at=sent.due_at,
        incident=sent.incident,
        message=sent.message_id,
        kind=sent.kind,
        title=sent.title,
        markdown=sent.markdown,
        text=sent.text,
        notify_type=sent.notify_type,
        tags=sent.tags,
        targets=tuple(targets),
    )
