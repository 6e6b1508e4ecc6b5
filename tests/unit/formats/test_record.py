"""formats/record.py beyond the style and refusal tables of test_parsers.py: each field's
aliases, times as programs write them (RFC 3339 with offsets, Unix seconds and JavaScript's
milliseconds), lockwarden's own fields checked before they can decide anything, and unknown
keys kept only as bounded scalars."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from lockwarden.formats.record import (
    MAX_EXTRA,
    MAX_TEXT,
    RecordProblem,
    parse_pid,
    parse_record,
    parse_timestamp,
)

PID_MAX = 4194304
T = datetime(2026, 12, 2, 9, 18, tzinfo=UTC)
BOOT = "6b1f5c2e-8d3a-4f0b-9c7e-2a1d4e5f6a7b"


def record_of(**fields: object) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    "data",
    [
        record_of(owner_pid=4242, hostname="db1", acquired_at="2026-12-02T09:18:00Z", owner="job"),
        record_of(ownerPid=4242, node="db1", createdAt="2026-12-02T09:18:00Z", purpose="job"),
        record_of(PID=4242, host="db1", started_at="2026-12-02T09:18:00Z", operation="job"),
        b"pid=4242\nhost=db1\nacquired_at=2026-12-02T09:18:00Z\nrole=job\n",
    ],
)
def test_each_fields_aliases_are_read_alike(data: bytes) -> None:
    record = parse_record(data, PID_MAX)
    assert (record.pid, record.host, record.started_at, record.role) == (4242, "db1", T, "job")


@pytest.mark.parametrize(
    ("value", "moment"),
    [
        ("2026-12-02T09:18:00Z", T),
        ("2026-12-02T10:18:00+01:00", T),
        ("2026-12-02T09:18:00", T),  # no zone: UTC
        (int(T.timestamp()), T),
        (int(T.timestamp()) * 1000, T),  # JavaScript's Date.now()
        (str(int(T.timestamp())), T),
        (T.timestamp() + 0.5, datetime(2026, 12, 2, 9, 18, 0, 500000, tzinfo=UTC)),
    ],
)
def test_a_start_time_as_programs_write_it(value: object, moment: datetime) -> None:
    assert parse_timestamp(value) == moment


@pytest.mark.parametrize(
    "value",
    [0, -5, True, float("inf"), "1969-12-31T00:00:00Z", "9999-01-01T00:00:00Z", 10**20, [1]],
)
def test_a_start_time_no_holder_can_have_is_a_problem(value: object) -> None:
    with pytest.raises(RecordProblem):
        parse_timestamp(value)


@pytest.mark.parametrize(
    ("value", "pid"), [(4242, 4242), ("4242", 4242), (" 77 ", 77), (2, 2), (PID_MAX, PID_MAX)]
)
def test_a_pid_is_a_plain_integer_in_range(value: object, pid: int) -> None:
    assert parse_pid(value, PID_MAX) == pid


@pytest.mark.parametrize("value", ["٤٢", "0x10", "+42", "4.0", 4242.0, None, "12345678901"])
def test_anything_else_is_no_pid(value: object) -> None:
    with pytest.raises(RecordProblem):
        parse_pid(value, PID_MAX)


def test_lockwardens_own_fields_are_read_when_well_formed() -> None:
    record = parse_record(
        record_of(
            pid=4242,
            boot_id=BOOT,
            start_ticks="123456",
            pid_namespace=4026531836,
            max_hold="30m",
            user="backup",
        ),
        PID_MAX,
    )
    assert (record.boot_id, record.start_ticks, record.pid_namespace) == (BOOT, 123456, 4026531836)
    assert (record.max_hold_s, record.user) == (1800.0, "backup")
    assert parse_record(record_of(pid=2, max_hold=90), PID_MAX).max_hold_s == 90.0


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"boot_id": "not-a-boot"}, "is not a boot id"),
        ({"boot_id": BOOT.upper()}, "is not a boot id"),  # the kernel prints it lowercase
        ({"start_ticks": -1}, "start_ticks is not a non-negative integer"),
        ({"start_ticks": "12a"}, "start_ticks is not a non-negative integer"),
        ({"pid_namespace": 2**64}, "pid_namespace is not a non-negative integer"),
        ({"max_hold": "soon"}, "max_hold 'soon' is not a duration"),
        ({"max_hold": 0}, "max_hold '0' is not a duration"),
        ({"max_hold": "0"}, "max_hold is not a positive duration"),
        ({"role": "job\x1b[2J"}, "non-text value"),
    ],
)
def test_a_malformed_own_field_is_a_problem_never_a_guess(
    fields: dict[str, object], words: str
) -> None:
    with pytest.raises(RecordProblem, match=words.replace("(", r"\(").replace("[", r"\[")):
        parse_record(record_of(pid=4242, **fields), PID_MAX)


def test_unknown_keys_are_kept_as_bounded_scalars_only() -> None:
    fields: dict[str, object] = {
        "pid": 4242,
        "ticket": "OPS-1",
        "nested": {"a": 1},
        "list": [1, 2],
        "huge": 2**70,
        "long": "x" * 1000,
    }
    extra = parse_record(record_of(**fields), PID_MAX).extra
    assert extra == {"ticket": "OPS-1", "long": "x" * MAX_TEXT}


def test_no_more_than_max_extra_unknown_keys_travel_on() -> None:
    many = {f"k{number:03d}": number for number in range(MAX_EXTRA * 3)}
    extra = parse_record(record_of(pid=4242, **many), PID_MAX).extra
    assert len(extra) == MAX_EXTRA
    assert list(extra) == [f"k{number:03d}" for number in range(MAX_EXTRA)]


def test_long_text_fields_are_cut() -> None:
    record = parse_record(record_of(pid=4242, role="r" * 1000, host="h" * 1000), PID_MAX)
    assert (len(record.role or ""), len(record.host or "")) == (MAX_TEXT, MAX_TEXT)
