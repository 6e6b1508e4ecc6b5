"""alerts/outcome.py: each problem of a run's alerting is one typed Problem, said in one
sentence by the notes, the log (at warning when the next run retries, error when no retry
fixes it) and the run's own findings (`lockwarden:notify`, `lockwarden:state`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from factories import make_finding
from lockwarden.alerts.decide import Plan, Retry
from lockwarden.alerts.outcome import (
    NOTICE_ID,
    NOTIFY_FINDING,
    STATE_FINDING,
    AlertOutcome,
    Cause,
    Sending,
    problems,
    report_failures,
    with_outcome,
)
from lockwarden.model import Severity
from lockwarden.state.history import Sent

DUE = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def sending(ok: bool, message_id: str = "i1/alert", kind: str = "alert") -> Sending:
    return Sending(message_id, kind, "wa-store", "CRITICAL wa-store", "json://127.0.0.1/…", ok,
                   "success" if ok else "HTTP 503")  # fmt: skip


def given_up() -> Retry:
    sent = Sent("i0/alert", "i0", "alert", DUE, "CRITICAL old", "", "", (), ("s1", "s2"))
    return Retry(sent, ("s1", "s2"), "old")


def everything_wrong() -> AlertOutcome:
    plan = Plan(given_up=[given_up()])
    return AlertOutcome(
        plan,
        "/var/lib/lockwarden/state.jsonl",
        deliveries=[
            sending(True),
            sending(False),
            sending(False, NOTICE_ID, "state degraded notice"),
        ],
        state_problems=["cannot write /var/lib/lockwarden/state.jsonl: No space left on device"]
        * 2,
        notify_problem=None,
        invalid_services=["notify.urls[2]: nosuch://…: unknown scheme"],
        unrouted=["lock db: notify_tags ops match no notify service: its alerts reach nobody"],
        dropped=["alert for gone: not retried to 1 service(s) no longer configured"],
    )


def test_every_problem_is_one_typed_sentence_in_the_order_it_is_told() -> None:
    told = problems(everything_wrong())
    assert [problem.cause for problem in told] == [
        Cause.INVALID_SERVICE,
        Cause.UNROUTED,
        Cause.UNDELIVERED,
        Cause.NOTICE_UNDELIVERED,
        Cause.GAVE_UP,
        Cause.DROPPED,
        Cause.STATE,
    ]
    texts = {problem.cause: problem.text for problem in told}
    assert texts[Cause.UNDELIVERED] == (
        "alert NOT delivered to json://127.0.0.1/… (HTTP 503); will retry next run: "
        "CRITICAL wa-store"
    )
    assert texts[Cause.NOTICE_UNDELIVERED] == (  # the notice is said again, never retried
        "state degraded notice NOT delivered to json://127.0.0.1/… (HTTP 503): CRITICAL wa-store"
    )
    assert texts[Cause.GAVE_UP] == (
        "gave up delivering alert 'CRITICAL old' to 2 service(s) after give_up_after"
    )
    assert texts[Cause.STATE] == (  # the same problem twice is said once
        "state degraded: cannot write /var/lib/lockwarden/state.jsonl: No space left on "
        "device; alerts are still sent but may repeat"
    )


def test_the_notes_the_findings_and_the_log_say_the_same_sentences(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcome = everything_wrong()
    told = problems(outcome)
    lock = make_finding()
    findings, notes = with_outcome((lock,), ("earlier note",), outcome)
    assert findings[0] is lock  # the lock's finding is never hidden or changed
    by_name = {finding.name: finding for finding in findings[1:]}
    assert set(by_name) == {NOTIFY_FINDING, STATE_FINDING}
    assert all(finding.severity is Severity.UNKNOWN for finding in by_name.values())
    assert notes[:2] == ("earlier note", "alert delivered to json://127.0.0.1/…: CRITICAL wa-store")
    assert list(notes[2:]) == [p.text for p in told if p.cause is not Cause.STATE]
    not_told = [
        p.text
        for p in told
        if p.cause in (Cause.INVALID_SERVICE, Cause.UNROUTED, Cause.UNDELIVERED, Cause.GAVE_UP)
    ]
    assert by_name[NOTIFY_FINDING].reason == "alerts may not reach a person: " + "; ".join(not_told)
    assert by_name[STATE_FINDING].reason == told[-1].text
    with caplog.at_level(logging.WARNING, logger="lockwarden.alerts.outcome"):
        report_failures(outcome)
    logged = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert logged == [(problem.priority, problem.text) for problem in told]
    retried = {Cause.UNDELIVERED, Cause.NOTICE_UNDELIVERED, Cause.DROPPED, Cause.STATE}
    assert {p.cause for p in told if p.priority == logging.WARNING} == retried


def test_a_run_that_told_everyone_has_no_problem_and_no_finding_of_its_own() -> None:
    outcome = AlertOutcome(Plan(), "/state.jsonl", deliveries=[sending(True)])
    assert problems(outcome) == [] and not outcome.failed
    findings, notes = with_outcome((), (), outcome)
    assert findings == () and notes == ("alert delivered to json://127.0.0.1/…: CRITICAL wa-store",)


def test_only_a_dropped_retry_leaves_the_heartbeat_at_success() -> None:
    dropped = AlertOutcome(Plan(), "/s", dropped=["alert for x: not retried to 1 service(s)"])
    assert [problem.cause for problem in problems(dropped)] == [Cause.DROPPED]
    assert not dropped.failed
    assert AlertOutcome(Plan(), "/s", deliveries=[sending(False, NOTICE_ID)]).failed


def test_alerting_off_is_a_note_and_no_problem_while_a_broken_notify_is_both() -> None:
    off = AlertOutcome(Plan(), "/s", unsent=2)
    assert problems(off) == []
    assert with_outcome((), (), off)[1] == (
        "alerting is off: 2 alert(s) not sent, as no [notify] service is configured (see the "
        "README's Alerts section)",
    )
    broken = AlertOutcome(Plan(), "/s", unsent=2, notify_problem="cannot read urls_file /x")
    [problem] = problems(broken)
    assert (problem.cause, problem.text) == (
        Cause.NOTIFY,
        "notify: cannot read urls_file /x; 2 message(s) unsent",
    )
    assert with_outcome((), (), broken)[1] == (problem.text,)
