"""What the alert stage decided, sent and could not do, and how each problem is told: as the
run's own findings (`lockwarden:state`, `lockwarden:notify`), as the report's notes, and in the
log at its journald priority."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

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
        return any(problem.fails for problem in problems(self))

    @property
    def undelivered(self) -> int:
        """Messages that some service did not confirm this run (retried next run), plus those
        given up on: what the textfile counts as undelivered."""
        failed = {d.message_id for d in self.deliveries if not d.ok and d.message_id != NOTICE_ID}
        unsent = self.unsent if self.notify_problem else 0
        return len(failed) + len(self.plan.given_up) + unsent + self.unrouted_messages


class Cause(Enum):
    """Why a person may not have been told this run, or may be told twice."""

    INVALID_SERVICE = "invalid service"  # a configured URL apprise cannot use: never sent to
    UNROUTED = "unrouted"  # a lock's notify_tags match no service
    NOTIFY = "notify"  # no service could be set up at all
    UNDELIVERED = "undelivered"  # a service did not confirm a message: retried next run
    NOTICE_UNDELIVERED = "notice undelivered"  # the state notice: said again next run
    GAVE_UP = "gave up"  # undeliverable after give_up_after
    DROPPED = "dropped"  # a retry to services since removed from the config
    STATE = "state"  # the state journal cannot be used: alerts may repeat


RETRIED = frozenset({Cause.UNDELIVERED, Cause.NOTICE_UNDELIVERED, Cause.DROPPED, Cause.STATE})
"""Logged at warning: the next run tries again (or nothing is lost); the rest at error."""
NOT_TOLD = frozenset(
    {Cause.INVALID_SERVICE, Cause.UNROUTED, Cause.NOTIFY, Cause.UNDELIVERED, Cause.GAVE_UP}
)
"""What makes the `lockwarden:notify` finding: an alert may not have reached a person."""


@dataclass(frozen=True)
class Problem:
    """One problem of the run's alerting, in the one sentence the notes, the log and the
    run's own findings all say it in."""

    cause: Cause
    text: str

    @property
    def priority(self) -> int:
        return logging.WARNING if self.cause in RETRIED else logging.ERROR

    @property
    def fails(self) -> bool:
        """Whether the heartbeat says /fail for it (a dropped retry is the config's choice)."""
        return self.cause is not Cause.DROPPED


def problems(outcome: AlertOutcome) -> list[Problem]:
    """Every problem of the run's alerting, once each, in the order they are told."""
    found = [
        Problem(Cause.INVALID_SERVICE, f"notify service unusable, never sent to: {bad}")
        for bad in outcome.invalid_services
    ]
    found += [Problem(Cause.UNROUTED, unrouted) for unrouted in outcome.unrouted]
    if outcome.notify_problem:
        text = f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent"
        found.append(Problem(Cause.NOTIFY, text))
    for sending in outcome.deliveries:
        if sending.ok:
            continue
        failed = f"{sending.kind} NOT delivered to {sending.service_url} ({sending.status})"
        if sending.message_id == NOTICE_ID:
            found.append(Problem(Cause.NOTICE_UNDELIVERED, f"{failed}: {sending.title}"))
        else:
            text = f"{failed}; will retry next run: {sending.title}"
            found.append(Problem(Cause.UNDELIVERED, text))
    found += [
        Problem(
            Cause.GAVE_UP,
            f"gave up delivering {retry.sent.kind} {retry.sent.title!r} to "
            f"{len(retry.services)} service(s) after give_up_after",
        )
        for retry in outcome.plan.given_up
    ]
    found += [Problem(Cause.DROPPED, dropped) for dropped in outcome.dropped]
    if outcome.state_problems:
        problem = "; ".join(dict.fromkeys(outcome.state_problems))  # each problem once
        text = f"state degraded: {problem}; alerts are still sent but may repeat"
        found.append(Problem(Cause.STATE, text))
    return found


def with_outcome(
    findings: tuple[Finding, ...], notes: tuple[str, ...], outcome: AlertOutcome
) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """The report's findings and notes after alerting: a state problem is the unknown
    `lockwarden:state` finding, what may not have reached a person the `lockwarden:notify`
    one, each delivery and problem a note. The lock findings are never hidden or changed."""
    told = problems(outcome)
    extra_notes = list(notes)
    extra_notes += [
        f"{sending.kind} delivered to {sending.service_url}: {sending.title}"
        for sending in outcome.deliveries
        if sending.ok
    ]
    extra_notes += [problem.text for problem in told if problem.cause is not Cause.STATE]
    if outcome.unsent and not outcome.notify_problem:
        extra_notes.append(
            f"alerting is off: {outcome.unsent} alert(s) not sent, as no [notify] service is "
            "configured (see the README's Alerts section)"
        )
    not_told = [problem.text for problem in told if problem.cause in NOT_TOLD]
    if not_told:
        reason = "alerts may not reach a person: " + "; ".join(not_told)
        findings = (*findings, own_finding(NOTIFY_FINDING, "[notify]", "notify", reason))
    degraded = [problem.text for problem in told if problem.cause is Cause.STATE]
    if degraded:
        findings = (*findings, state_finding(outcome.state_path, "; ".join(degraded)))
    return findings, tuple(extra_notes)


def state_finding(path: str, reason: str) -> Finding:
    """lockwarden's own `lockwarden:state` finding: its state journal cannot be used, so what it
    remembers between runs (alerts sent, locks seen held) is lost; unknown, so the run's exit
    code and the unit's result show it."""
    return own_finding(STATE_FINDING, path, "journal", reason)


def report_failures(outcome: AlertOutcome) -> None:
    """What means a person may not be told goes to stderr at its journald priority: warning
    (<4>) for what the next run retries, error (<3>) for what no retry will fix."""
    for problem in problems(outcome):
        log.log(problem.priority, "%s", problem.text)


def said(outcome: AlertOutcome, check: NotifyCheck | None) -> None:
    if check is not None:
        outcome.invalid_services = list(check.invalid)
        outcome.notify_problem = check.problem
        outcome.unrouted = list(check.unrouted)
