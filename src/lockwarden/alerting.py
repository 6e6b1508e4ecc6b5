"""The alert stage of a run: journal -> decide -> notify -> journal append.

Order matters for "never lose an alert, never storm": the decision records and each message's
`due` record (with its target services) are appended *before* sending, and each service's
result after. A crash mid-send is then retried next run (at most one duplicate), never lost.
A broken journal never stops an alert: the messages still go out, and the run reports the
state problem (severity unknown) and sends one "state degraded" notice.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden import lazylog
from lockwarden.config import Config
from lockwarden.crashpoints import crash_point
from lockwarden.decide import LockPolicy, Outgoing, Plan, Retry, decide
from lockwarden.history import (
    KEEP_RUNS,
    UNRESOLVED,
    History,
    fold,
    keep_for_dedupe,
    keep_for_removal,
    timestamp,
)
from lockwarden.journal import Journal, Record, StateError, default_state_path
from lockwarden.messages import Message, render_state_degraded
from lockwarden.model import Finding, Severity, State
from lockwarden.structs import field, struct

if TYPE_CHECKING:
    from lockwarden.notify import Delivery, Notifier

log = lazylog.getLogger(__name__)

STATE_FINDING = "lockwarden:state"
NOTICE_ID = "state-degraded"  # the per-run notice: never journaled, so never retried


@struct
class Sending:
    """One message sent (or not) to one service this run."""

    message_id: str
    kind: str
    lock: str
    title: str
    service_url: str
    ok: bool
    status: str


@struct(frozen=False)
class AlertOutcome:
    """What the alert stage decided, sent and could not do."""

    plan: Plan
    state_path: str
    deliveries: list[Sending] = field(default_factory=list)
    state_problems: list[str] = field(default_factory=list)
    notify_problem: str | None = None
    unsent: int = 0

    @property
    def failed(self) -> bool:
        """The run could not do its whole job (for the heartbeat's /fail)."""
        return bool(
            self.state_problems or self.notify_problem or any(not d.ok for d in self.deliveries)
        )


def state_path(config: Config) -> str:
    return config.state.path or default_state_path()


def policies(config: Config) -> dict[str, LockPolicy]:
    return {lock.name: LockPolicy(lock.alerts, lock.notify_tags) for lock in config.locks}


class JournalWriter:
    """Appends records; after the first failure it stops trying and remembers why."""

    def __init__(self, journal: Journal, problems: list[str]) -> None:
        self.journal = journal
        self.problems = problems
        self.broken = False

    def append(self, record: Record) -> None:
        if self.broken:
            return
        try:
            self.journal.append(record)
        except StateError as error:
            self.broken = True
            self.problems.append(str(error))


def load_history(journal: Journal, problems: list[str], read_only: bool) -> History:
    """The journal's history; a state problem is noted and the run goes on with none."""
    try:
        if not read_only:  # only a run that will write may create the state directory
            journal.check_directory()
        return fold(journal.load().records)
    except StateError as error:
        problems.append(str(error))
        return History()


def alert_stage(
    config: Config,
    findings: tuple[Finding, ...],
    hostname: str,
    now: datetime,
    dry_run: bool = False,
    extra: tuple[Outgoing, ...] = (),
    state_unusable: str | None = None,
) -> AlertOutcome:
    """Decide, send, journal. With no [notify] service configured, alerting is off: the
    journal is only read (never created), and the report says how many alerts were due.
    `extra` are messages an earlier stage of the run wants sent (a stale lock removed).
    `state_unusable`: why the state directory is not touched this run (a hung mount)."""
    journal = Journal(state_path(config), config.state.max_bytes, state_unusable)
    problems: list[str] = []
    read_only = dry_run or not config.notify.configured
    history = load_history(journal, problems, read_only)
    plan = decide(findings, history, now, policies(config), hostname)
    plan.outgoing[:0] = extra  # what this run did to a lock comes before its "resolved"
    crash_point("after-decide")  # test-only (crashpoints.py); a no-op unless asked
    outcome = AlertOutcome(plan, journal.path, state_problems=problems)
    if read_only:
        outcome.state_problems = [] if not dry_run else problems
        outcome.unsent = 0 if dry_run else len(plan.outgoing)
        return outcome
    writer = JournalWriter(journal, problems)
    for record in plan.records:
        writer.append(record)
    _deliver(config, plan, writer, outcome, hostname, now)
    _compact(journal, writer, config)
    journal.close()
    return outcome


def _deliver(
    config: Config,
    plan: Plan,
    writer: JournalWriter,
    outcome: AlertOutcome,
    hostname: str,
    now: datetime,
) -> None:
    wants_notice = bool(outcome.state_problems)
    if not (plan.sends_anything or wants_notice):
        return
    from lockwarden.notify import Notifier, NotifyConfigError  # only a run that sends

    try:
        notifier = Notifier(config.notify)
    except NotifyConfigError as error:
        outcome.notify_problem = str(error)
        outcome.unsent = len(plan.outgoing) + len(plan.retries)
        for item in plan.outgoing:  # targets unresolved: sent once notify works again
            writer.append(_due_record(item, None, now))
        return
    for retry in plan.retries:
        _retry(notifier, retry, writer, outcome, now)
    for item in plan.outgoing:
        targets = notifier.targets(item.tags)
        writer.append(_due_record(item, targets, now))
        sent = notifier.send(item.message, targets)
        _record(writer, outcome, item.message_id, item.kind, item.lock, item.message, sent, now)
    if outcome.state_problems:
        problems = "; ".join(dict.fromkeys(outcome.state_problems))
        notice = render_state_degraded(problems, hostname, now)
        sent = notifier.send(notice, notifier.targets(()))
        _record(writer, outcome, NOTICE_ID, "state degraded notice", "", notice, sent, now)


def _retry(
    notifier: Notifier, retry: Retry, writer: JournalWriter, outcome: AlertOutcome, now: datetime
) -> None:
    if UNRESOLVED in retry.services:  # due while notify was broken: resolve its services now
        targets = notifier.targets(retry.sent.tags)
        writer.append(_resolved_due(retry, targets))
        retry = Retry(retry.sent, targets)
    gone = [service for service in retry.services if not notifier.known(service)]
    if gone:  # a service removed from the config can never confirm: stop waiting for it
        writer.append(
            {
                "type": "giveup",
                "at": timestamp(now),
                "message": retry.sent.message_id,
                "services": gone,
                "why": "service no longer configured",
            }
        )
    live = [service for service in retry.services if notifier.known(service)]
    message = Message(retry.sent.title, retry.sent.markdown, retry.sent.text)
    sent = notifier.send(message, live)
    _record(writer, outcome, retry.sent.message_id, retry.sent.kind, "", message, sent, now)


def _resolved_due(retry: Retry, targets: tuple[str, ...]) -> Record:
    sent = retry.sent
    return {
        "type": "due",
        "at": timestamp(sent.due_at),
        "incident": sent.incident,
        "message": sent.message_id,
        "kind": sent.kind,
        "title": sent.title,
        "markdown": sent.markdown,
        "text": sent.text,
        "tags": list(sent.tags),
        "targets": list(targets),
    }


def _due_record(item: Outgoing, targets: tuple[str, ...] | None, now: datetime) -> Record:
    return {
        "type": "due",
        "at": timestamp(now),
        "incident": item.incident,
        "message": item.message_id,
        "kind": item.kind,
        "lock": item.lock,
        "title": item.message.title,
        "markdown": item.message.markdown,
        "text": item.message.text,
        "tags": list(item.tags),
        "targets": None if targets is None else list(targets),
    }


def _record(
    writer: JournalWriter,
    outcome: AlertOutcome,
    message_id: str,
    kind: str,
    lock: str,
    message: Message,
    deliveries: list[Delivery],
    now: datetime,
) -> None:
    if deliveries and message_id != NOTICE_ID:
        crash_point("after-send")  # test-only: delivered, not yet journaled
    for delivery in deliveries:
        outcome.deliveries.append(
            Sending(
                message_id, kind, lock, message.title, delivery.url, delivery.ok, delivery.status
            )
        )
        if message_id == NOTICE_ID:
            continue
        writer.append(
            {
                "type": "sent",
                "at": timestamp(now),
                "message": message_id,
                "service": delivery.service,
                "url": delivery.url,
                "ok": delivery.ok,
                "status": delivery.status,
            }
        )


def _compact(journal: Journal, writer: JournalWriter, config: Config) -> None:
    if writer.broken or not journal.needs_compaction():
        return
    longest = max(
        (max(lock.alerts.resolve_after, lock.alerts.unknown_after) for lock in config.locks),
        default=0,
    )
    keep_runs = max(KEEP_RUNS, longest + 1)
    try:
        dropped = journal.compact(
            lambda records: keep_for_removal(
                # closed incidents may fill half the threshold, so that what is kept stays
                # well below it and quiet runs do not compact again and again
                keep_for_dedupe(records, keep_runs, closed_budget=config.state.max_bytes // 2)
            )
        )
        log.debug("compacted %s: %d records dropped", journal.path, dropped)
    except StateError as error:
        writer.problems.append(str(error))


def with_outcome(
    findings: tuple[Finding, ...], notes: tuple[str, ...], outcome: AlertOutcome
) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """The report's findings and notes after alerting: a state problem is an unknown finding,
    each delivery and failure a note. The lock findings are never hidden or changed."""
    extra_notes = list(notes)
    for sending in outcome.deliveries:
        retried = "" if sending.message_id == NOTICE_ID else "; will retry"
        verdict = "delivered" if sending.ok else f"NOT delivered ({sending.status}){retried}"
        extra_notes.append(f"{sending.kind} {verdict} to {sending.service_url}: {sending.title}")
    for retry in outcome.plan.given_up:
        extra_notes.append(
            f"undeliverable: {retry.sent.kind} {retry.sent.title!r} to {len(retry.services)} "
            "service(s) gave up after give_up_after"
        )
    if outcome.notify_problem:
        extra_notes.append(f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent")
    elif outcome.unsent:
        extra_notes.append(
            f"alerting is off: {outcome.unsent} alert(s) not sent, as no [notify] service is "
            "configured (see the README's Alerts section)"
        )
    if not outcome.state_problems:
        return findings, tuple(extra_notes)
    problem = "; ".join(dict.fromkeys(outcome.state_problems))  # each problem once
    state = Finding(
        name=STATE_FINDING,
        path=outcome.state_path,
        format="journal",
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=f"state degraded: {problem}; alerts are still sent but may repeat",
    )
    return (*findings, state), tuple(extra_notes)


def state_directory(config: Config) -> str:
    return os.path.dirname(state_path(config)) or "."
