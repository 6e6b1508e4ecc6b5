"""decide() is pure: tables of findings and journal histories in, messages out. No clock."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from factories import make_finding, make_holder
from lockwarden.alerts.decide import (
    LockPolicy,
    Plan,
    Readdressed,
    Retry,
    StateNotice,
    decide,
    incident_key,
    readdress,
    state_class,
    state_notice,
)
from lockwarden.config import AlertSettings
from lockwarden.model import NOT_HELD, Bound, Finding, Held, Severity, State
from lockwarden.state.history import UNRESOLVED, Attempt, Sent, fold, keep_for_dedupe
from lockwarden.state.journal import encode
from lockwarden.state.records import JournalRecord, from_json, to_json
from lockwarden.support.durations import format_time

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
HOST = "db1"


def finding(
    state: State = State.HELD_TOO_LONG,
    severity: Severity = Severity.CRITICAL,
    pid: int = 64969,
    name: str = "wa-store",
) -> Finding:
    holder = make_holder(pid=pid, role="maintenance-job", unit="wa-resync.service")
    return make_finding(
        name=name,
        path="/srv/wa/store/LOCK",
        format="owner-record",
        state=state,
        severity=severity,
        reason="writes blocked",
        held=Held.of(7260.0, Bound.UNKNOWN, T0) if state is not State.FREE else NOT_HELD,
        holder=holder if state in (State.HELD, State.HELD_TOO_LONG) else None,
        action="systemctl stop wa-resync.service",
        identity=f"pid:{pid}:1234:boot",
    )


FREE = finding(State.FREE, Severity.OK)
UNKNOWN = finding(State.UNKNOWN, Severity.UNKNOWN)


def typed(records: list[dict[str, Any]]) -> list[JournalRecord]:
    """Records as the journal stores them, read back as the fold takes them."""
    return [from_json(record) for record in records]


def stored(plan: Plan) -> list[dict[str, Any]]:
    """A plan's records as the journal stores them."""
    return [to_json(record) for record in plan.records]


def keep_stored(records: list[dict[str, Any]], **limits: Any) -> list[dict[str, Any]]:
    """Compaction's keep_for_dedupe on stored records."""
    return [to_json(record) for record in keep_for_dedupe(typed(records), **limits)]


class Journal:
    """Replays plans as the alert stage would, with every service delivering (or not)."""

    def __init__(self, policy: LockPolicy | None = None, services: tuple[str, ...] = ("s1",)):
        self.records: list[dict[str, Any]] = []
        self.policy = policy or LockPolicy()
        self.services = services

    def run(self, minutes: float, *findings: Finding, delivered: bool = True) -> Plan:
        now = T0 + timedelta(minutes=minutes)
        policies = {f.name: self.policy for f in findings} or {"wa-store": self.policy}
        plan = decide(findings, fold(typed(self.records)), now, policies, HOST)
        self.records.extend(stored(plan))
        for item in plan.outgoing:
            self.records.append(
                {
                    "type": "due",
                    "at": now.isoformat(),
                    "incident": item.incident,
                    "message": item.message_id,
                    "kind": item.kind,
                    "title": item.message.title,
                    "markdown": "",
                    "text": "",
                    "notify_type": item.message.notify_type,
                    "targets": list(self.services),
                }
            )
        pending = [(i.message_id, self.services) for i in plan.outgoing]
        pending += [(r.sent.message_id, r.services) for r in plan.retries]
        for message_id, services in pending:
            for service in services:
                self.records.append(
                    {
                        "type": "sent",
                        "at": now.isoformat(),
                        "message": message_id,
                        "service": service,
                        "ok": delivered,
                        "status": "x",
                    }
                )
        return plan


def kinds(plan: Plan) -> list[str]:
    return [item.kind for item in plan.outgoing]


@pytest.mark.parametrize(
    ("state", "severity", "min_severity", "expected"),
    [
        (State.FREE, Severity.OK, "critical", "good"),
        (State.HELD, Severity.OK, "critical", "good"),
        (State.HELD_TOO_LONG, Severity.WARNING, "critical", "good"),
        (State.HELD_TOO_LONG, Severity.WARNING, "warning", "held_too_long"),
        (State.HELD_TOO_LONG, Severity.CRITICAL, "critical", "held_too_long"),
        (State.STALE, Severity.CRITICAL, "critical", "stale"),
        (State.UNKNOWN, Severity.UNKNOWN, "critical", "unknown"),
    ],
)
def test_state_class_table(
    state: State, severity: Severity, min_severity: str, expected: str
) -> None:
    alerts = AlertSettings(min_severity=min_severity)
    assert state_class(finding(state, severity), alerts) == expected


def test_lifecycle_alert_then_silence_then_reminder_then_resolved() -> None:
    journal = Journal()
    assert kinds(journal.run(0, finding())) == ["alert"]
    assert kinds(journal.run(1, finding())) == []
    assert kinds(journal.run(59, finding())) == []
    assert kinds(journal.run(60, finding())) == ["reminder"]
    assert kinds(journal.run(61, finding())) == []
    assert kinds(journal.run(120, finding())) == ["reminder"]
    resolved = journal.run(125, FREE)
    assert kinds(resolved) == ["resolved"]
    assert "4h06m" in resolved.outgoing[0].message.title  # held 2h01m when it opened, +2h05m
    assert "PID 64969 (maintenance-job, wa-resync.service)" in resolved.outgoing[0].message.title
    assert kinds(journal.run(126, FREE)) == []


def test_the_open_record_keeps_the_hold_start_its_finding_carries() -> None:
    """The start is the judge's (model.Held), not recomputed here: a Liquibase row granted at
    a recorded moment opens its incident with that moment."""
    granted = T0 - timedelta(hours=3)
    held = replace(finding(), held=Held.began(granted, Bound.EXACT, T0 + timedelta(minutes=1)))
    [opened] = [r for r in stored(Journal().run(1, held)) if r["type"] == "open"]
    assert opened["held_since"] == format_time(granted)


def test_a_warning_that_turns_critical_is_told_at_once_then_reminded_on_schedule() -> None:
    """On-call heard "WARNING"; the lock is now past critical_after. That is said in the run
    that sees it (not at the next reminder, up to repeat_interval later), once."""
    journal = Journal(LockPolicy(AlertSettings(min_severity="warning")))
    warned = journal.run(0, finding(severity=Severity.WARNING))
    assert kinds(warned) == ["alert"] and warned.outgoing[0].message.notify_type == "warning"
    assert kinds(journal.run(1, finding(severity=Severity.WARNING))) == []
    escalated = journal.run(2, finding(severity=Severity.CRITICAL))
    assert kinds(escalated) == ["reminder"]
    message = escalated.outgoing[0].message
    assert message.notify_type == "failure"
    assert message.title.startswith(f"CRITICAL {HOST}: now critical: wa-store blocked")
    assert kinds(journal.run(3, finding())) == []  # told as critical: no more until due
    assert kinds(journal.run(61, finding())) == []
    assert kinds(journal.run(62, finding())) == ["reminder"]  # an hour after the escalation


def test_repeat_interval_zero_never_reminds() -> None:
    journal = Journal(LockPolicy(AlertSettings(repeat_interval=0.0)))
    assert kinds(journal.run(0, finding())) == ["alert"]
    assert [kinds(journal.run(m, finding())) for m in (60, 600, 6000)] == [[], [], []]


def test_new_holder_is_a_new_incident() -> None:
    journal = Journal()
    first = journal.run(0, finding(pid=100))
    second = journal.run(5, finding(pid=200))
    assert kinds(first) == ["alert"]
    assert kinds(second) == ["resolved", "alert"]
    assert second.outgoing[0].incident == first.outgoing[0].incident
    assert second.outgoing[1].incident != first.outgoing[0].incident


def test_a_holder_that_dies_while_paged_is_one_incident_never_a_recovery() -> None:
    """Held too long, then the holder is killed and its lock left stale: no RESOLVED (shown
    green) in between; one alert that says the paged holder died and writes are still
    blocked, naming it. Once the lock is gone, that incident resolves."""
    journal = Journal()
    assert kinds(journal.run(0, finding())) == ["alert"]
    proof = "PID 64969 is not running on this host and no process holds a kernel lock on it"
    stale = replace(finding(State.STALE, Severity.CRITICAL), proof=proof)
    died = journal.run(5, stale)
    assert kinds(died) == ["alert"]
    title = died.outgoing[0].message.title
    assert "still blocked" in title and "PID 64969" in title and "died" in title, title
    assert "Was held by" in died.outgoing[0].message.text
    assert "RESOLVED" not in " ".join(item.message.title for item in died.outgoing)
    assert [record["why"] for record in stored(died) if record["type"] == "close"] == [
        "holder died"
    ]
    assert kinds(journal.run(10, FREE)) == ["resolved"]


def test_another_processs_leftover_after_a_page_is_another_incident() -> None:
    """The stale lock's proof names another PID: not the paged holder's death."""
    journal = Journal()
    journal.run(0, finding())
    proof = "PID 777 is not running on this host and no process holds a kernel lock on it"
    other = journal.run(5, replace(finding(State.STALE, Severity.CRITICAL), proof=proof))
    assert kinds(other) == ["resolved", "alert"]


def test_new_holder_after_resolution_alerts_again() -> None:
    journal = Journal()
    journal.run(0, finding(pid=100))
    assert kinds(journal.run(10, FREE)) == ["resolved"]
    assert kinds(journal.run(20, finding(pid=200))) == ["alert"]


def test_resolve_after_needs_that_many_good_runs_in_a_row() -> None:
    journal = Journal(LockPolicy(AlertSettings(resolve_after=3)))
    journal.run(0, finding())
    assert kinds(journal.run(1, FREE)) == []
    assert kinds(journal.run(2, FREE)) == []
    assert kinds(journal.run(3, finding())) == []  # the streak is broken: same incident goes on
    assert kinds(journal.run(4, FREE)) == []
    assert kinds(journal.run(5, FREE)) == []
    assert kinds(journal.run(6, FREE)) == ["resolved"]


@pytest.mark.parametrize(("unknown_after", "first_alert_run"), [(1, 1), (3, 3), (5, 5)])
def test_unknown_alerts_only_after_unknown_after_runs(
    unknown_after: int, first_alert_run: int
) -> None:
    journal = Journal(LockPolicy(AlertSettings(unknown_after=unknown_after)))
    alerted = [run for run in range(1, 7) if kinds(journal.run(run, UNKNOWN)) == ["alert"]]
    assert alerted == [first_alert_run]


def test_a_transient_unknown_pages_nobody_and_resets() -> None:
    journal = Journal()
    sequence = [UNKNOWN, UNKNOWN, FREE, UNKNOWN, UNKNOWN, FREE]
    assert [kinds(journal.run(minute, f)) for minute, f in enumerate(sequence)] == [[]] * 6


def test_a_transient_unknown_does_not_resolve_a_held_incident() -> None:
    journal = Journal(LockPolicy(AlertSettings(repeat_interval=0.0)))
    journal.run(0, finding())
    assert kinds(journal.run(1, UNKNOWN)) == []
    assert kinds(journal.run(2, finding())) == []


def test_undelivered_message_is_retried_until_delivered() -> None:
    journal = Journal(services=("up", "down"))
    plan = journal.run(0, finding(), delivered=False)
    assert kinds(plan) == ["alert"]
    retry = journal.run(1, finding(), delivered=False)
    assert kinds(retry) == [] and [r.services for r in retry.retries] == [("up", "down")]
    journal.run(2, finding(), delivered=True)
    assert journal.run(3, finding()).retries == []


def test_only_the_service_that_failed_is_retried() -> None:
    journal = Journal(services=("up", "down"))
    plan = journal.run(0, finding())
    journal.records.append(
        {
            "type": "sent",
            "at": T0.isoformat(),
            "message": plan.outgoing[0].message_id,
            "service": "up",
            "ok": True,
            "status": "success",
        }
    )
    # Rewrite the outcome: "down" failed.
    journal.records = [
        r for r in journal.records if not (r.get("service") == "down" and r.get("ok"))
    ]
    retry = journal.run(1, finding())
    assert [r.services for r in retry.retries] == [("down",)]


def test_give_up_after_records_the_message_undeliverable() -> None:
    journal = Journal(LockPolicy(AlertSettings(give_up_after=3600.0)))
    journal.run(0, finding(), delivered=False)
    assert journal.run(59, finding(), delivered=False).retries
    late = journal.run(60, finding(), delivered=False)
    assert late.retries == [] and len(late.given_up) == 1
    assert any(r["type"] == "giveup" for r in stored(late))
    assert journal.run(61, finding()).given_up == []


def test_incident_key_names_lock_class_and_holder() -> None:
    assert incident_key(finding(pid=7), "held_too_long") == (
        "wa-store|held_too_long|pid:7:1234:boot"
    )
    assert incident_key(UNKNOWN, "unknown") == "wa-store|unknown|-"


def test_a_lock_dropped_from_the_config_closes_silently() -> None:
    journal = Journal()
    journal.run(0, finding())
    plan = journal.run(1, finding(State.FREE, Severity.OK, name="other"))
    assert kinds(plan) == []
    assert any(r["type"] == "close" and r["why"] == "unchecked" for r in stored(plan))


def test_compaction_keeps_open_and_pending_incidents_and_recent_runs() -> None:
    journal = Journal()
    for hour in range(60):
        journal.run(hour * 60, finding(pid=1000 + hour))
        journal.run(hour * 60 + 30, FREE)
    journal.run(3700, finding(pid=5))
    journal.run(3701, finding(pid=6), delivered=False)
    kept = keep_stored(journal.records, keep_runs=5)
    before, after = fold(typed(journal.records)), fold(typed(kept))
    assert len(kept) < len(journal.records)
    assert sum(1 for r in kept if r["type"] == "run") == 5
    assert [i.key for i in after.open_incidents()] == [i.key for i in before.open_incidents()]
    assert [m.message_id for m in after.pending_messages()] == [
        m.message_id for m in before.pending_messages()
    ]
    plan = decide([finding(pid=6)], after, T0 + timedelta(minutes=3702), {}, HOST)
    assert kinds(plan) == [] and len(plan.retries) == 2  # pid 5 resolved + pid 6 alert


def test_quiet_runs_record_nothing_but_a_return_to_good_is_recorded() -> None:
    journal = Journal(LockPolicy(AlertSettings(unknown_after=3)))
    assert journal.run(0, FREE).records == []
    assert journal.run(1, UNKNOWN).records  # bad: recorded
    assert [r["type"] for r in stored(journal.run(2, FREE))] == ["run"]  # the streak breaks
    assert journal.run(3, FREE).records == []
    assert kinds(journal.run(4, UNKNOWN)) == []
    assert kinds(journal.run(5, UNKNOWN)) == []
    assert kinds(journal.run(6, UNKNOWN)) == ["alert"]  # 3 in a row, not 4 with the one before


def test_compaction_keeps_only_the_latest_delivered_reminder_and_reminders_stay_on_time() -> None:
    journal = Journal()
    journal.run(0, finding())
    for hour in range(1, 25):
        assert kinds(journal.run(hour * 60, finding())) == ["reminder"]
    kept = keep_stored(journal.records)
    reminders = [r for r in kept if r["type"] == "due" and r["kind"] == "reminder"]
    assert len(reminders) == 1 and reminders[0]["message"].endswith("@2026-12-03T09:00:00Z")
    journal.records = kept
    assert kinds(journal.run(24 * 60 + 59, finding())) == []
    assert kinds(journal.run(25 * 60, finding())) == ["reminder"]


def test_compaction_budget_keeps_the_newest_closed_incidents_and_every_open_one() -> None:
    journal = Journal()
    for hour in range(30):
        journal.run(hour * 60, finding(pid=1000 + hour))
        journal.run(hour * 60 + 30, FREE)
    journal.run(3000, finding(pid=7))  # open, and heavy: never dropped for size
    for record in journal.records:
        if record["type"] == "due":
            record["text"] = "x" * 2000
    records = journal.records
    unbudgeted = fold(typed(keep_stored(records)))
    assert sum(1 for i in unbudgeted.incidents.values() if not i.open) == 30
    kept = keep_stored(records, closed_budget=12_000)
    after = fold(typed(kept))
    closed = sorted((i for i in after.incidents.values() if not i.open), key=lambda i: i.opened_at)
    newest = sorted(
        (i for i in unbudgeted.incidents.values() if not i.open), key=lambda i: i.opened_at
    )[-len(closed) :]
    assert 0 < len(closed) < 30
    assert [i.incident_id for i in closed] == [i.incident_id for i in newest]
    closed_ids = {i.incident_id for i in closed}
    message_ids = {m.message_id for m in after.messages.values() if m.incident in closed_ids}
    weight = sum(
        len(encode(from_json(r)))
        for r in kept
        if r.get("incident") in closed_ids or r.get("message") in message_ids
    )
    assert weight <= 12_000
    assert [i.key for i in after.open_incidents()] == [i.key for i in unbudgeted.open_incidents()]


def test_compaction_keeps_only_the_latest_delivered_messages_of_no_incident() -> None:
    """A stale lock removed before any alert opened an incident sends a message of its own
    pseudo-incident; delivered ones beyond the latest 50 go, undelivered ones never do."""
    records: list[dict[str, Any]] = []
    for number in range(80):
        at = (T0 + timedelta(minutes=number)).isoformat()
        message = f"removed-{number:03d}"
        records.append(
            {
                "type": "due",
                "at": at,
                "incident": message,
                "message": message,
                "kind": "removed",
                "title": "stale lock removed",
                "markdown": "",
                "text": "",
                "targets": ["s1"],
            }
        )
        delivered = number != 3  # one never got through: it must stay to be retried
        records.append(
            {"type": "sent", "at": at, "message": message, "service": "s1", "ok": delivered}
        )
    kept = fold(typed(keep_stored(records)))
    assert len(kept.messages) == 51
    assert "removed-003" in kept.messages and kept.messages["removed-003"].pending
    assert "removed-079" in kept.messages and "removed-029" not in kept.messages
    assert "removed-030" in kept.messages


@pytest.mark.parametrize(
    ("problems", "said", "notice"),
    [
        ((), None, None),  # healthy, nothing said: nothing to say
        (("disk full",), None, StateNotice(True, "disk full")),  # degraded: said once
        (("disk full", "disk full"), "disk full", None),  # the same cause: said already
        (("read-only",), "disk full", StateNotice(True, "read-only")),  # a new cause is news
        ((), "disk full", StateNotice(False, "disk full")),  # over: said once, naming it
    ],
)
def test_the_state_notice_is_sent_once_per_cause_and_once_when_it_is_over(
    problems: tuple[str, ...], said: str | None, notice: StateNotice | None
) -> None:
    assert state_notice(problems, said) == notice


@dataclass(frozen=True)
class Configured:
    """A configured notify service as addressing sees one (alerts/notify.py's Service)."""

    service_id: str
    url: str = ""
    tags: frozenset[str] = frozenset()
    legacy_id: str = ""


def pending(services: tuple[str, ...], *attempts: Attempt, tags: tuple[str, ...] = ()) -> Retry:
    sent = Sent("i1/alert", "i1", "alert", T0, "CRITICAL wa-store", "", "", tags, services)
    sent.attempts.extend(attempts)
    return Retry(sent, services, "wa-store")


def stored_records(readdressed: Readdressed) -> list[dict[str, Any]]:
    return [to_json(record) for record in readdressed.records]


NOW = T0 + timedelta(minutes=5)


def test_a_message_due_while_notify_was_broken_goes_to_the_services_its_tags_route_to() -> None:
    services = [
        Configured("ops", tags=frozenset({"ops"})),
        Configured("all", tags=frozenset({"always"})),
        Configured("dev", tags=frozenset({"dev"})),
    ]
    done = readdress(pending((UNRESOLVED,), tags=("ops",)), services, NOW)  # type: ignore[arg-type]
    assert done.retry.services == ("ops", "all") and done.dropped is None
    [due] = stored_records(done)
    assert (due["type"], due["message"], due["targets"]) == ("due", "i1/alert", ["ops", "all"])
    assert due["at"] == format_time(T0)  # still due when it was due


def test_a_service_journaled_under_an_older_id_or_url_is_found_under_its_id_now() -> None:
    services = [
        Configured("new-1", legacy_id="old-1"),
        Configured("new-2", url="json://127.0.0.1/…"),
    ]
    shown = Attempt(T0, "old-2", "json://127.0.0.1/…", False, "503")
    done = readdress(pending(("old-1", "old-2"), shown), services, NOW)  # type: ignore[arg-type]
    assert done.retry.services == ("new-1", "new-2") and done.dropped is None
    assert [record["targets"] for record in stored_records(done)] == [["new-1", "new-2"]]


def test_a_message_nobody_has_whose_services_are_all_gone_goes_to_todays() -> None:
    today = [Configured("replacement")]
    done = readdress(pending(("removed",)), today, NOW)  # type: ignore[arg-type]
    assert done.retry.services == ("replacement",) and done.dropped is None
    assert [record["targets"] for record in stored_records(done)] == [["replacement"]]


def test_services_removed_from_the_config_are_given_up_on_and_the_rest_retried() -> None:
    delivered = Attempt(T0, "kept", "json://…", True, "success")
    done = readdress(pending(("kept", "removed"), delivered), [Configured("kept")], NOW)  # type: ignore[arg-type]
    assert done.retry.services == ("kept",)
    assert done.dropped == "alert for wa-store: not retried to 1 service(s) no longer configured"
    [giveup] = stored_records(done)
    assert giveup == {
        "type": "giveup",
        "at": format_time(NOW),
        "message": "i1/alert",
        "services": ["removed"],
        "why": "service no longer configured",
    }
