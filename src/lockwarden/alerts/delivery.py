"""The alert stage of a run: journal -> decide -> notify -> journal append.

Order matters for "never lose an alert, never storm": the decision records and each message's
`due` record (with its target services) are appended *before* sending, and each service's
result after. A crash mid-send is then retried next run (at most one duplicate), never lost.
A broken journal never stops an alert: the messages still go out, and the run reports the
state problem (severity unknown) and sends one "state degraded" notice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden.alerts.decide import (
    LockPolicy,
    Outgoing,
    Plan,
    Retry,
    decide,
    readdress,
    state_cause,
    state_notice,
)
from lockwarden.alerts.notify_check import (
    NotifyCheck,
    check_now,
    checked,
    remember_check,
    remembered_check,
)
from lockwarden.alerts.outcome import NOTICE_ID, AlertOutcome, Sending, said
from lockwarden.check.blocked import is_blocked_name
from lockwarden.config import Config
from lockwarden.model import Finding
from lockwarden.state.history import (
    UNRESOLVED,
    History,
)
from lockwarden.state.records import DueRecord, JournalRecord, SentRecord
from lockwarden.state.run_state import RunState
from lockwarden.state.runtime import (
    degraded_marker,
    private_directory,
    read_marker,
    write_marker,
)
from lockwarden.support.durations import format_duration, format_time

if TYPE_CHECKING:
    from lockwarden.alerts.messages import Message
    from lockwarden.alerts.notify import Delivery, Notifier

log = logging.getLogger(__name__)


def policies(
    config: Config, findings: Sequence[Finding] = (), history: History | None = None
) -> dict[str, LockPolicy]:
    """Each configured lock's; a blocked writer's finding, or its open incident (no
    [[lock]] of its own), gets the [alerts] section's settings."""
    names = [finding.name for finding in findings]
    names += [incident.lock for incident in history.open_incidents()] if history else []
    blocked_writers = {name: LockPolicy(config.alerts) for name in names if is_blocked_name(name)}
    return blocked_writers | {
        lock.name: LockPolicy(lock.alerts, lock.notify_tags, lock.role) for lock in config.locks
    }


def _last_delivery(records: list[JournalRecord]) -> datetime | None:
    """The journal's latest confirmed delivery."""
    times = (record.at for record in records if isinstance(record, SentRecord) and record.ok)
    return max(times, default=None)


def alert_stage(
    config: Config,
    state: RunState,
    findings: tuple[Finding, ...],
    hostname: str,
    now: datetime,
    dry_run: bool = False,
    extra: tuple[Outgoing, ...] = (),
    still_blocked: frozenset[str] = frozenset(),
) -> AlertOutcome:
    """Decide, send, journal. With no [notify] service configured, alerting is off: the
    journal is only read (never created), and the report says how many alerts were due.
    `extra` are messages an earlier stage of the run wants sent (a stale lock removed).
    `still_blocked`: blocked-writer findings this run saw within their budget (their count
    started over): their incidents are not over."""
    read_only = dry_run or not config.notify.configured
    delivered_before = _last_delivery(state.records)
    history = state.history()
    plan = decide(
        findings, history, now, policies(config, findings, history), hostname, still_blocked
    )
    plan.outgoing[:0] = extra  # what this run did to a lock comes before its "resolved"
    state.state_journal.checkpoint("after-decide")
    outcome = AlertOutcome(plan, state.journal.path, state_problems=state.problems)
    outcome.last_delivered_at = delivered_before
    if read_only:
        outcome.state_problems = [] if not dry_run else state.problems
        outcome.unsent = 0 if dry_run else len(plan.outgoing)
        if dry_run and config.notify.configured:  # what a real run would say of the services
            said(outcome, check_now(config))
        return outcome
    for record in plan.records:
        state.append(record)
    _deliver(config, plan, state, outcome, hostname, now)
    return outcome  # run.py compacts the journal once every stage has written


def _deliver(
    config: Config,
    plan: Plan,
    state: RunState,
    outcome: AlertOutcome,
    hostname: str,
    now: datetime,
) -> None:
    wants_notice = (
        bool(outcome.state_problems)
        or read_marker(degraded_marker(config.state.journal_path)) is not None
    )
    if not (plan.sends_anything or wants_notice):
        if config.notify.configured:
            said(outcome, remembered_check(config))
        return
    from lockwarden.alerts.notify import Notifier, NotifyConfigError  # only a run that sends

    try:
        notifier = Notifier(config.notify, checkpoint=state.journal.checkpoint)
    except NotifyConfigError as error:
        said(outcome, remember_check(config, NotifyCheck(problem=str(error))))
        outcome.unsent = len(plan.outgoing) + len(plan.retries)
        for item in plan.outgoing:  # targets unresolved: sent once notify works again
            state.append(_due_record(item, None, now))
        return
    said(outcome, remember_check(config, checked(notifier, config)))
    if not notifier.services:  # every URL unusable (said above): kept for when one works
        outcome.unsent = len(plan.outgoing) + len(plan.retries)
        for item in plan.outgoing:
            state.append(_due_record(item, None, now))
        return
    for retry in plan.retries:  # one due while notify was broken is routed only now
        if UNRESOLVED in retry.services and not notifier.targets(retry.sent.tags):
            outcome.unrouted_messages += 1
    jobs = [_retry(notifier, retry, state, now, outcome) for retry in plan.retries]
    for item in plan.outgoing:  # each one's due record is journaled before anything is sent
        targets = notifier.targets(item.tags)
        if not targets and notifier.services:  # sent to nobody: counted as undelivered
            outcome.unrouted_messages += 1
        state.append(_due_record(item, targets, now))
        jobs.append(Job(item.message_id, item.kind, item.lock, item.message, targets))
    notice = _degraded_notice(notifier, outcome, config.state.journal_path, hostname, now)
    if notice is not None:
        jobs.append(notice)
    # One batch: each service sends its messages in its own thread, so a hanging service
    # holds back neither another service nor this run past its budget.
    results = notifier.send_batch([(job.message, job.targets) for job in jobs])
    for job, sent in zip(jobs, results, strict=True):
        _record(state, outcome, job.message_id, job.kind, job.lock, job.message, sent, now)
        if job.message_id == NOTICE_ID:
            _remember_notice(outcome, config.state.journal_path, sent)
    for sending in outcome.deliveries:
        if sending.ok:
            outcome.last_delivered_at = now


@dataclass(frozen=True, eq=False)
class Job:
    """One message to send this run, and the services to send it to."""

    message_id: str
    kind: str
    lock: str
    message: Message
    targets: tuple[str, ...]


def _degraded_notice(
    notifier: Notifier, outcome: AlertOutcome, path: str, hostname: str, now: datetime
) -> Job | None:
    """The state notice this run sends (decide.state_notice), given what the runtime
    directory's marker says was said (the state directory is the thing that is broken)."""
    from lockwarden.alerts.messages import render_state_degraded, render_state_healthy

    due = state_notice(outcome.state_problems, read_marker(degraded_marker(path)))
    if due is None:
        return None
    if due.degraded:
        notice, kind = render_state_degraded(due.cause, hostname, now), "state degraded notice"
    else:
        notice, kind = render_state_healthy(due.cause, hostname, now), "state healthy notice"
    return Job(NOTICE_ID, kind, "", notice, notifier.targets(()))


def _remember_notice(outcome: AlertOutcome, path: str, sent: list[Delivery]) -> None:
    marker = degraded_marker(path)
    if marker is None or not any(delivery.ok for delivery in sent):
        return  # not told: the notice is due again next run
    if outcome.state_problems and not private_directory(os.path.dirname(marker)):
        return
    write_marker(marker, state_cause(outcome.state_problems) or None)


def _retry(
    notifier: Notifier, retry: Retry, state: RunState, now: datetime, outcome: AlertOutcome
) -> Job:
    """A pending message sent again, to the services configured now (decide.readdress), said
    to be late: its figures ("held at least 6s") are those of when it was due."""
    readdressed = readdress(retry, notifier.services, now)
    for record in readdressed.records:
        state.append(record)
    if readdressed.dropped is not None:
        outcome.dropped.append(readdressed.dropped)  # said by outcome.report_failures
    retry = readdressed.retry
    from lockwarden.alerts.messages import Message

    ago = format_duration(max(0.0, (now - retry.sent.due_at).total_seconds()))
    late = (
        f"Due at {format_time(retry.sent.due_at)} ({ago} ago) and sent late, as no earlier "
        "attempt reached this service: the figures above are from then."
    )
    message = Message(
        retry.sent.title,
        f"{retry.sent.markdown}\n\n_{late}_",
        f"{retry.sent.text}\n\n{late}",
        retry.sent.notify_type,
    )
    return Job(retry.sent.message_id, retry.sent.kind, retry.lock, message, retry.services)


def _due_record(item: Outgoing, targets: tuple[str, ...] | None, now: datetime) -> DueRecord:
    return DueRecord(
        at=now,
        incident=item.incident,
        message=item.message_id,
        kind=item.kind,
        lock=item.lock,
        title=item.message.title,
        markdown=item.message.markdown,
        text=item.message.text,
        notify_type=item.message.notify_type,
        tags=item.tags,
        targets=None if targets is None else tuple(targets),
    )


def _record(
    state: RunState,
    outcome: AlertOutcome,
    message_id: str,
    kind: str,
    lock: str,
    message: Message,
    deliveries: list[Delivery],
    now: datetime,
) -> None:
    if deliveries and message_id != NOTICE_ID:
        state.journal.checkpoint("after-send")  # delivered, not yet journaled
    for delivery in deliveries:
        outcome.deliveries.append(
            Sending(
                message_id,
                kind,
                lock,
                message.title,
                delivery.url,
                delivery.ok,
                delivery.status,
                delivery.origin,
            )
        )
        if message_id == NOTICE_ID:
            continue
        state.append(
            SentRecord(
                now, message_id, delivery.service, delivery.ok, delivery.status, delivery.url
            )
        )
