"""The words of an alert are pure functions of a finding: checked as tables."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from lockwarden.alerts.messages import Ended, render_alert, render_resolved
from lockwarden.model import Bound, Finding, Held, Holder, Severity, State, Waiter

NOW = datetime(2026, 12, 2, 11, 19, tzinfo=UTC)
HOLDER = Holder(
    pid=64969,
    alive=True,
    role="maintenance-job",
    user="wa",
    cmdline=("node", "resync.js", "--full"),
    name="node",
    started_at=NOW - timedelta(hours=2, minutes=1),
    unit="wa-resync.service",
)
HELD = Finding(
    name="wa-store",
    path="/srv/wa/store/LOCK",
    format="owner-record",
    state=State.HELD_TOO_LONG,
    severity=Severity.CRITICAL,
    reason="writes to wa-store blocked",
    held=Held.of(7260.0, Bound.UNKNOWN, NOW),
    holder=HOLDER,
    waiters=(
        Waiter(pid=1234, cmdline=("node", "write.js")),
        Waiter(pid=1240, cmdline=("node", "write.js")),
    ),
    action="systemctl stop wa-resync.service",
)
STALE = Finding(
    name="wa-store",
    path="/srv/wa/store/LOCK",
    format="owner-record",
    state=State.STALE,
    severity=Severity.CRITICAL,
    reason="stale: its holder PID 4242 is gone",
    held=Held.of(600.0, Bound.UNKNOWN, NOW),
    proof="PID 4242 is not running on this host and no process holds a kernel lock",
    action="rm -r -- /srv/wa/store/LOCK",
)


def test_held_too_long_title_names_the_process_to_stop() -> None:
    message = render_alert(HELD, "db1")
    assert message.title == (
        "CRITICAL db1: wa-store blocked 2h01m by PID 64969 (maintenance-job, wa-resync.service)"
    )
    assert message.notify_type == "failure"


def test_a_kernel_lock_alert_says_its_duration_is_a_lower_bound() -> None:
    """A kernel lock's hold is known from the runs that saw it: the alert says "at least"."""
    seen = replace(HELD, held=Held.of(300.0, Bound.AT_LEAST, NOW))
    message = render_alert(seen, "db1")
    assert message.title == (
        "CRITICAL db1: wa-store blocked at least 5m00s by PID 64969 "
        "(maintenance-job, wa-resync.service)"
    )
    assert "at least 5m00s" in message.text and "at least 5m00s" in message.markdown


def test_body_has_host_lock_holder_duration_waiters_and_action_in_both_forms() -> None:
    message = render_alert(HELD, "db1")
    for body in (message.markdown, message.text):
        for fact in (
            "db1",
            "wa-store at /srv/wa/store/LOCK (owner-record)",
            "PID 64969, role maintenance-job, user wa, unit wa-resync.service, "
            "started 2026-12-02T09:18:00Z",
            "node resync.js --full",
            "2h01m",
            "2 blocked: PID 1234 (node write.js), PID 1240 (node write.js)",
            "systemctl stop wa-resync.service",
        ):
            assert fact in body
    assert "**Action:** `systemctl stop wa-resync.service`" in message.markdown
    assert "Action:" in message.text and "**" not in message.text and "`" not in message.text


def test_stale_body_has_the_proof_and_the_path_to_remove() -> None:
    message = render_alert(STALE, "db1")
    assert message.title.startswith("CRITICAL db1: wa-store stale lock")
    assert "Proof:    PID 4242 is not running" in message.text
    assert "Remove:   /srv/wa/store/LOCK" in message.text
    assert "Action:   rm -r -- /srv/wa/store/LOCK" in message.text


def test_reminder_and_resolved_are_marked() -> None:
    reminder = render_alert(HELD, "db1", kind="reminder")
    assert reminder.title.startswith("CRITICAL db1: reminder: wa-store blocked 2h01m")
    assert "Reminder:" in reminder.text
    ended = Ended(
        lock="wa-store",
        path="/srv/wa/store/LOCK",
        holder="PID 64969 (maintenance-job)",
        opened_at=NOW - timedelta(hours=1),
        held_since=NOW - timedelta(hours=2, minutes=31),
        state="held_too_long",
    )
    resolved = render_resolved(ended, None, "db1", NOW)
    assert resolved.title == (
        "RESOLVED db1: wa-store no longer blocked after 2h31m, held by PID 64969 (maintenance-job)"
    )
    assert "it lasted 2h31m" in resolved.text
    assert "From:        2026-12-02T08:48:00Z to 2026-12-02T11:19:00Z" in resolved.text


def test_a_multi_line_command_stays_on_one_line() -> None:
    from dataclasses import replace

    holder = replace(HOLDER, cmdline=("python", "-c", "\nimport time\ntime.sleep(9)\n"))
    message = render_alert(replace(HELD, holder=holder), "db1")
    command = [line for line in message.text.splitlines() if line.startswith("Command:")]
    assert command == ["Command:  python -c \\nimport time\\ntime.sleep(9)\\n"]
