"""What the alert stage decided, sent and could not do, and how each problem is told: as the
run's own findings (`lockwarden:state`, `lockwarden:notify`), as the report's notes, and in the
log at its journald priority."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from lockwarden.alerts.decide import Plan
from lockwarden.alerts.notify_check import NotifyCheck
from lockwarden.model import Finding, own_finding

log = logging.getLogger(__name__)

STATE_FINDING = "lockwarden:state"


NOTICE_ID = "state-degraded"  # the per-run notice: never journaled, so never retried


NOTIFY_FINDING = "lockwarden:notify"


@dataclass(frozen=True, eq=False)
class Sending:
    """One message sent (or not) to one service this run."""

    message_id: str
    kind: str
    lock: str
    title: str
    service_url: str
    ok: bool
    status: str
    service_origin: str = ""  # where the service was configured: `notify.urls[1]`, ...


@dataclass
class AlertOutcome:
    """What the alert stage decided, sent and could not do."""

    plan: Plan
    state_path: str
    deliveries: list[Sending] = field(default_factory=list)
    state_problems: list[str] = field(default_factory=list)
    notify_problem: str | None = None
    unsent: int = 0
    invalid_services: list[str] = field(default_factory=list)  # `notify.urls[1]: why`
    unrouted: list[str] = field(default_factory=list)  # `lock db: notify_tags x match no ...`
    unrouted_messages: int = 0  # messages of this run that no service was to get
    dropped: list[str] = field(default_factory=list)  # retries to services since removed
    last_delivered_at: datetime | None = None  # the journal's latest confirmed delivery

    @property
    def failed(self) -> bool:
        """The run could not do its whole job (for the heartbeat's /fail)."""
        return bool(
            self.state_problems
            or self.notify_problem
            or self.invalid_services
            or self.unrouted
            or self.plan.given_up
            or any(not d.ok for d in self.deliveries)
        )

    @property
    def undelivered(self) -> int:
        """Messages that some service did not confirm this run (retried next run), plus those
        given up on: what the textfile counts as undelivered."""
        failed = {d.message_id for d in self.deliveries if not d.ok and d.message_id != NOTICE_ID}
        unsent = self.unsent if self.notify_problem else 0
        return len(failed) + len(self.plan.given_up) + unsent + self.unrouted_messages


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
    extra_notes.extend(f"notify service unusable: {bad}" for bad in outcome.invalid_services)
    extra_notes.extend(outcome.unrouted)
    extra_notes.extend(outcome.dropped)
    if outcome.notify_problem:
        extra_notes.append(f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent")
    elif outcome.unsent:
        extra_notes.append(
            f"alerting is off: {outcome.unsent} alert(s) not sent, as no [notify] service is "
            "configured (see the README's Alerts section)"
        )
    notify = notify_finding(outcome)
    if notify is not None:
        findings = (*findings, notify)
    if not outcome.state_problems:
        return findings, tuple(extra_notes)
    problem = "; ".join(dict.fromkeys(outcome.state_problems))  # each problem once
    reason = f"state degraded: {problem}; alerts are still sent but may repeat"
    return (*findings, state_finding(outcome.state_path, reason)), tuple(extra_notes)


def state_finding(path: str, reason: str) -> Finding:
    """lockwarden's own `lockwarden:state` finding: its state journal cannot be used, so what it
    remembers between runs (alerts sent, locks seen held) is lost; unknown, so the run's exit
    code and the unit's result show it."""
    return own_finding(STATE_FINDING, path, "journal", reason)


def delivery_problems(outcome: AlertOutcome) -> list[str]:
    """Why a person may not have been told this run, one line per cause."""
    problems = [f"notify service unusable: {bad}" for bad in outcome.invalid_services]
    problems.extend(outcome.unrouted)
    if outcome.notify_problem:
        problems.append(f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent")
    failed = [d for d in outcome.deliveries if not d.ok and d.message_id != NOTICE_ID]
    problems.extend(
        f"{d.kind} NOT delivered to {d.service_url} ({d.status}); will retry: {d.title}"
        for d in failed
    )
    return problems


def notify_finding(outcome: AlertOutcome) -> Finding | None:
    """An unknown finding when alerts could not go out: the run's exit code and the unit's
    result then show it (a critical lock still outranks it, so nothing is hidden)."""
    problems = delivery_problems(outcome) + [
        f"gave up on {retry.sent.kind} {retry.sent.title!r} to {len(retry.services)} service(s)"
        for retry in outcome.plan.given_up
    ]
    if not problems:
        return None
    reason = "alerts may not reach a person: " + "; ".join(problems)
    return own_finding(NOTIFY_FINDING, "[notify]", "notify", reason)


def report_failures(outcome: AlertOutcome) -> None:
    """What means a person may not be told goes to stderr at its journald priority: warning
    (<4>) for what the next run retries, error (<3>) for what no retry will fix."""
    for bad in outcome.invalid_services:
        log.error("notify service unusable, never sent to: %s", bad)
    for unrouted in outcome.unrouted:
        log.error("%s", unrouted)
    if outcome.notify_problem:
        log.error("notify: %s; %d message(s) unsent", outcome.notify_problem, outcome.unsent)
    for sending in outcome.deliveries:
        if not sending.ok:
            retried = "" if sending.message_id == NOTICE_ID else "; will retry next run"
            log.warning(
                "%s NOT delivered to %s (%s)%s: %s",
                sending.kind,
                sending.service_url,
                sending.status,
                retried,
                sending.title,
            )
    for retry in outcome.plan.given_up:
        log.error(
            "gave up delivering %s %r to %d service(s) after give_up_after",
            retry.sent.kind,
            retry.sent.title,
            len(retry.services),
        )
    for problem in dict.fromkeys(outcome.state_problems):
        log.warning("state degraded: %s; alerts are still sent but may repeat", problem)


def said(outcome: AlertOutcome, check: NotifyCheck | None) -> None:
    if check is not None:
        outcome.invalid_services = list(check.invalid)
        outcome.notify_problem = check.problem
        outcome.unrouted = list(check.unrouted)
