"""support/durations.py beyond the parse/format tables of test_parsers.py: limits and config
durations are written so that parse_duration reads them back exactly, and moments are written
and read in one RFC 3339 form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwarden.support.durations import (
    format_config_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_time,
    stamp,
)

WHOLE_MILLISECONDS = st.integers(min_value=0, max_value=10 * 365 * 86_400_000).map(
    lambda ms: ms / 1000
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1800, "30m"), (3600, "1h"), (5400, "1h30m"), (90, "1m30s"), (0.2, "200ms"), (0, "0s")],
)
def test_a_limit_is_written_as_a_person_writes_it(seconds: float, text: str) -> None:
    assert format_limit(seconds) == text


@given(WHOLE_MILLISECONDS)
def test_a_limit_reads_back_exactly(seconds: float) -> None:
    assert parse_duration(format_limit(seconds)) == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(900, "15m"), (5400, "1h30m"), (0.5, "500ms"), (86400, "24h"), (0, "0"), (61.25, "1m1s250ms")],
)
def test_a_config_duration_is_written_in_hours_at_most(seconds: float, text: str) -> None:
    assert format_config_duration(seconds) == text


@given(WHOLE_MILLISECONDS)
def test_a_config_duration_reads_back_exactly(seconds: float) -> None:
    text = format_config_duration(seconds)
    assert "d" not in text and "w" not in text
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-9)


def test_a_moment_is_written_in_utc_to_the_second_whatever_its_zone() -> None:
    berlin = timezone(timedelta(hours=1))
    moment = datetime(2026, 12, 2, 10, 58, 0, 987654, tzinfo=berlin)
    assert format_time(moment) == "2026-12-02T09:58:00Z"


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)))
def test_a_written_moment_reads_back_to_the_second(naive: datetime) -> None:
    moment = naive.replace(tzinfo=UTC, microsecond=0)
    assert parse_time(format_time(moment)) == moment


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-12-02T09:58:00Z", datetime(2026, 12, 2, 9, 58, tzinfo=UTC)),
        ("2026-12-02T10:58:00+01:00", datetime(2026, 12, 2, 9, 58, tzinfo=UTC)),
        ("2026-12-02T09:58:00", datetime(2026, 12, 2, 9, 58, tzinfo=UTC)),  # no zone: UTC
    ],
)
def test_rfc3339_text_is_read_as_an_aware_moment(text: str, moment: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == moment
    assert parsed is not None and parsed.tzinfo is not None


@pytest.mark.parametrize("text", [None, 1733130000, "yesterday", "", "2026-13-40T00:00:00Z"])
def test_anything_else_is_no_moment(text: object) -> None:
    assert parse_time(text) is None


def test_stamp_says_unknown_for_a_moment_nobody_recorded() -> None:
    assert stamp(None) == "unknown"
    assert stamp(datetime(2026, 3, 1, 12, 0, tzinfo=UTC)) == "2026-03-01T12:00:00Z"
