"""decide() after a run that died between its decision records and its messages (kill -9,
power loss), and with a wall clock stepped between runs. Pure tables, no clock."""

from __future__ import annotations

from datetime import timedelta

from test_decide import FREE, HOST, T0, Journal, finding, kinds, stored, typed

from lockwarden.alerts.decide import decide
from lockwarden.state.history import fold


def die_after_records(journal: Journal, minutes: float, *findings: object) -> list[str]:
    """A run that appended its run/open/close records and died before any 'due'."""
    now = T0 + timedelta(minutes=minutes)
    policies = {"wa-store": journal.policy}
    plan = decide(findings, fold(typed(journal.records)), now, policies, HOST)  # type: ignore[arg-type]
    journal.records.extend(stored(plan))
    return kinds(plan)


def test_an_alert_never_due_because_the_run_died_after_open_is_sent_next_run() -> None:
    journal = Journal()
    assert die_after_records(journal, 0, finding()) == ["alert"]
    retried = journal.run(5, finding())
    assert kinds(retried) == ["alert"]
    assert retried.outgoing[0].message_id.endswith("/alert")
    assert kinds(journal.run(10, finding())) == []  # and only once


def test_a_resolved_never_due_because_the_run_died_after_close_is_sent_next_run() -> None:
    journal = Journal()
    assert kinds(journal.run(0, finding())) == ["alert"]
    assert die_after_records(journal, 5, FREE) == ["resolved"]
    assert kinds(journal.run(10, FREE)) == ["resolved"]
    assert kinds(journal.run(15, FREE)) == []


def test_a_close_older_than_the_last_recorded_run_is_not_resent() -> None:
    """Only a close by the last recorded run can be a run that died before its resolved: an
    older one whose messages are gone (a hand-edited journal) is history, not a retry."""
    journal = Journal()
    journal.run(0, finding(pid=100))
    assert kinds(journal.run(5, FREE)) == ["resolved"]
    assert kinds(journal.run(10, finding(pid=200))) == ["alert"]  # a newer recorded run
    journal.records = [r for r in journal.records if r.get("kind") != "resolved"]
    assert kinds(journal.run(15, finding(pid=200))) == []


def test_a_clock_stepped_back_an_hour_delays_a_reminder_by_at_most_one_run() -> None:
    journal = Journal()
    assert kinds(journal.run(0, finding())) == ["alert"]
    wall = [5, 10, -45, -40, -35, -30, -25, -20, -15, -10, -5, 0, 5]  # real 5 .. 65
    sent = [kinds(journal.run(minutes, finding())) for minutes in wall]
    assert sent.index(["reminder"]) <= len(wall) - 1  # real 60 or 65, not real 125
    assert sum(1 for k in sent if k == ["reminder"]) == 1


def test_a_clock_stepped_forward_brings_a_reminder_early_never_loses_one() -> None:
    journal = Journal()
    journal.run(0, finding())
    assert kinds(journal.run(5, finding())) == []
    assert kinds(journal.run(70, finding())) == ["reminder"]  # real 10, early: not lost
    assert kinds(journal.run(75, finding())) == []
