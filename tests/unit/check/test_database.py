"""check/database.py: how long a database lock has been held, and how sure that figure is.
pg_locks records no grant time, so a session's lock is bounded by its backend's and
transaction's start from above and by the sighting memory from below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lockwarden.check.database import hold_bound
from lockwarden.check.observation import Backend, Hold
from lockwarden.model import Bound

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_a_session_lock_is_held_at_most_since_its_backend_started():
    backend = Backend(pid=9, backend_start=NOW - timedelta(hours=3), xact_start=None)
    held, origin = hold_bound(Hold("advisory lock 1", backend), NOW)
    assert (held.seconds, held.bound, origin) == (3 * 3600, Bound.AT_MOST, "backend_start")
    assert held.since == backend.backend_start


def test_a_table_lock_is_held_at_most_since_its_transaction_started():
    backend = Backend(
        pid=9, backend_start=NOW - timedelta(hours=3), xact_start=NOW - timedelta(minutes=20)
    )
    held, _origin = hold_bound(Hold("table t", backend, transaction_scoped=True), NOW)
    assert (held.seconds, held.bound) == (20 * 60, Bound.AT_MOST)


def test_a_session_lock_seen_by_an_earlier_run_is_held_at_least_since_then():
    """backend_start bounds a session's lock from above only; the sighting memory from below,
    and only that may put it past its budget (graded as at_least, not at_most)."""
    backend = Backend(pid=9, backend_start=NOW - timedelta(hours=3))
    held, origin = hold_bound(Hold("x", backend), NOW, first_seen=NOW - timedelta(minutes=2))
    assert (held.seconds, held.bound, origin) == (120, Bound.AT_LEAST, "first sighting")
    assert held.since == NOW - timedelta(minutes=2)


def test_without_session_times_only_the_first_sighting_bounds_it_from_below():
    backend = Backend(pid=9)
    assert hold_bound(Hold("x", backend), NOW)[0].bound is Bound.UNKNOWN
    held, _origin = hold_bound(Hold("x", backend), NOW, first_seen=NOW - timedelta(minutes=5))
    assert (held.seconds, held.bound) == (300, Bound.AT_LEAST)
