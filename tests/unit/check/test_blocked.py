"""check/blocked.py, pure: how a blocked writer's wait is bounded and graded, which series it
belongs to, and what its finding says. (The real processes are tests/integration's.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from factories import make_finding, make_holder
from lockwarden.check.blocked import (
    blocked_finding,
    grade,
    identity_of,
    is_blocked_name,
    wait_of,
)
from lockwarden.config import HostSettings
from lockwarden.model import Bound, Finding, Held, Severity, State, Waiter

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SETTINGS = HostSettings(blocked_after=600.0, blocked_critical_after=3600.0)


def waiter(pid: int, minutes_old: float, ticks: int = 7) -> Waiter:
    return Waiter(
        pid=pid,
        cmdline=("node", "write.js"),
        started_at=NOW - timedelta(minutes=minutes_old),
        start_ticks=ticks,
    )


def lock(*waiters: Waiter) -> Finding:
    return make_finding(
        name="blocked:/srv/orders.lock",
        path="/srv/orders.lock",
        state=State.HELD_TOO_LONG,
        severity=Severity.CRITICAL,
        holder=make_holder(pid=64969, role="maintenance-job", unit="wa-resync.service"),
        waiters=waiters,
        action="systemctl stop wa-resync.service",
        identity="pid:64969:100:boot",
        key=(2049, 77),
    )


def test_the_first_sighting_bounds_the_wait_from_above_by_the_oldest_waiter() -> None:
    found = lock(waiter(1, 5), waiter(2, 30))
    assert wait_of(found, None, NOW) == Held.of(1800.0, Bound.AT_MOST, NOW)
    assert wait_of(found, NOW - timedelta(minutes=12), NOW) == Held.of(720.0, Bound.AT_LEAST, NOW)
    assert wait_of(lock(), None, NOW).bound is Bound.UNKNOWN


@pytest.mark.parametrize(
    ("seconds", "bound", "state", "severity"),
    [
        (7200.0, Bound.AT_MOST, State.HELD, Severity.OK),  # a ceiling never pages
        (599.0, Bound.AT_LEAST, State.HELD, Severity.OK),
        (600.0, Bound.AT_LEAST, State.HELD_TOO_LONG, Severity.WARNING),
        (3600.0, Bound.AT_LEAST, State.HELD_TOO_LONG, Severity.CRITICAL),
        (None, Bound.UNKNOWN, State.HELD, Severity.OK),
    ],
)
def test_only_a_floor_past_the_budget_pages(
    seconds: float | None, bound: Bound, state: State, severity: Severity
) -> None:
    assert grade(Held.of(seconds, bound, NOW), SETTINGS) == (state, severity)


def test_the_series_is_the_holder_and_its_longest_waiting_writer() -> None:
    older, newer = waiter(1, 30, ticks=11), waiter(2, 5, ticks=22)
    assert identity_of(lock(newer, older)) == "blocked:pid:64969:100:boot|waiter:1:11"
    assert identity_of(lock(newer)) != identity_of(lock(older))
    assert identity_of(lock()) == "blocked:pid:64969:100:boot"


def test_the_finding_names_the_waiters_the_holder_and_the_action() -> None:
    found = blocked_finding(lock(waiter(1234, 30)), SETTINGS, NOW, NOW - timedelta(minutes=15))
    assert found.name == "blocked:/srv/orders.lock" and is_blocked_name(found.name)
    assert (found.state, found.severity) == (State.HELD_TOO_LONG, Severity.WARNING)
    assert (found.held_for_s, found.held_bound) == (900.0, Bound.AT_LEAST)
    assert found.held_since == NOW - timedelta(minutes=15)
    assert found.reason.startswith("writes to /srv/orders.lock blocked: PID 1234 (node write.js)")
    assert "behind PID 64969 (maintenance-job, wa-resync.service) — stop it" in found.reason
    assert found.action == "systemctl stop wa-resync.service"
    within = blocked_finding(lock(waiter(1234, 30)), SETTINGS, NOW, None)
    assert within.state is State.HELD and "within the 10m00s budget" in within.reason
