"""model.Held: the one value for how long any lock has been held, and since when."""

from __future__ import annotations

from datetime import timedelta

import pytest

from factories import NOW, make_finding
from lockwarden.model import NOT_HELD, Bound, Held


def test_a_hold_starts_its_duration_before_the_moment_it_was_judged() -> None:
    held = Held.of(600.0, Bound.AT_LEAST, NOW)
    assert (held.seconds, held.bound, held.since) == (
        600.0,
        Bound.AT_LEAST,
        NOW - timedelta(minutes=10),
    )
    assert Held.of(None, Bound.AT_MOST, NOW) == NOT_HELD  # no figure: nothing known of when


def test_a_recorded_start_is_the_hold_start_and_one_ahead_of_our_clock_is_just_taken() -> None:
    granted = NOW - timedelta(hours=3)
    assert Held.began(granted, Bound.EXACT, NOW) == Held(3 * 3600.0, Bound.EXACT, granted)
    assert Held.began(NOW + timedelta(seconds=5), Bound.EXACT, NOW) == Held(0.0, Bound.EXACT, NOW)


def test_a_start_is_known_exactly_when_a_duration_is() -> None:
    with pytest.raises(ValueError, match=r"Held\.of"):
        Held(600.0, Bound.EXACT)
    with pytest.raises(ValueError, match=r"Held\.of"):
        Held(None, Bound.EXACT, NOW)


def test_a_findings_duration_fields_read_its_held() -> None:
    finding = make_finding(held=Held.of(90.0, Bound.AT_MOST, NOW))
    assert (finding.held_for_s, finding.held_bound, finding.held_since) == (
        90.0,
        Bound.AT_MOST,
        NOW - timedelta(seconds=90),
    )
    assert (make_finding().held_for_s, make_finding().held_bound) == (None, Bound.UNKNOWN)
