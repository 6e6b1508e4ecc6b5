"""Tables for the pure parsers: durations, owner records, /proc/locks lines, cgroup paths."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from lockwarden.formats.record import RecordProblem, parse_record
from lockwarden.procfs.snapshot import parse_lock_line, parse_proc_locks, unit_from_cgroup
from lockwarden.support.durations import DurationError, format_duration, parse_duration

PID_MAX = 4194304


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1h30m", 5400),
        ("2d", 172800),
        ("0", 0),
        ("500ms", 0.5),
        (" 1h 5m ", 3900),
        ("1.5h", 5400),
    ],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["15 minutes", "", "h", "15", "-5m", 15, True, None, "1y"])
def test_bad_durations_are_refused_with_a_hint(text: object) -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (425, "7m05s"), (7260, "2h01m"), (273600, "3d04h"), (-3, "0s")],
)
def test_durations_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_json_record_with_every_field() -> None:
    record = parse_record(
        b'{"role":"maintenance-job","pid":4242,"startedAt":"2026-12-02T09:18:00Z",'
        b'"host":"db1","extra":1}',
        PID_MAX,
    )
    assert (record.pid, record.role, record.host, record.style) == (
        4242,
        "maintenance-job",
        "db1",
        "json",
    )
    assert record.started_at == datetime(2026, 12, 2, 9, 18, tzinfo=UTC)
    assert record.extra == {"extra": 1}


@pytest.mark.parametrize(
    ("data", "pid", "style"),
    [
        (b"pid=77\nacquired_at=2026-12-02T10:00:00Z\n", 77, "key-value"),
        (b"4242\n", 4242, "bare"),
        (b"", None, "empty"),
        (b'{"pid": "123", "started_at": 1764666000000}', 123, "json"),
        (b'{"hostname": "x"}', None, "json"),
    ],
)
def test_record_styles(data: bytes, pid: int | None, style: str) -> None:
    record = parse_record(data, PID_MAX)
    assert (record.pid, record.style) == (pid, style)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b'{"pid": true}', "not a process id"),
        (b'{"pid": 1}', "outside 2..4194304"),
        (b'{"pid": 0}', "outside"),
        (b'{"pid": -1}', "outside"),
        (b'{"pid": 4194305}', "outside"),
        (b'{"pid": 12.5}', "not a process id"),
        (b'{"pid": NaN}', "NaN"),
        (b'{"pid": 1, "pid": 2}', "repeats the key 'pid'"),
        (b"9" * 5000, "not a process id"),
        (b"[" * 1000 + b"]" * 1000, "not a process id"),
        (b'{"pid": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested too deeply"),
        (b"[1, 2]", "not a process id"),
        (b'{"a":' * 100000 + b"1" + b"}" * 100000, "nested too deeply"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"{not json", "not valid JSON"),
        (b"hello\nworld", "neither JSON"),
        (b'{"pid": 5, "startedAt": "yesterday"}', "not RFC 3339"),
        (b'{"pid": 5, "role": ["x"]}', "non-text value"),
        (b"pid=1\npid=2", "repeats the key"),
    ],
    ids=lambda value: repr(value)[:24],
)
def test_untrustworthy_records_are_problems(data: bytes, words: str) -> None:
    with pytest.raises(RecordProblem, match=words.replace("(", r"\(").replace("[", r"\[")):
        parse_record(data, PID_MAX)


def test_proc_locks_lines_and_waiters() -> None:
    text = (
        "1: FLOCK  ADVISORY  WRITE 1993 fe:00:2146390 0 EOF\n"
        "1: -> FLOCK  ADVISORY  WRITE 1997 fe:00:2146390 0 EOF\n"
        "2: OFDLCK ADVISORY  READ  -1 08:01:77 0 99\n"
        "3: POSIX  ADVISORY  WRITE 12 00:2a:5 1073741825 1073741825\n"
        "garbage line\n"
    )
    index = parse_proc_locks(text)
    held, waiting = index[(os.makedev(0xFE, 0), 2146390)]
    assert (held.kind, held.mode, held.pid, held.waiting) == ("FLOCK", "WRITE", 1993, False)
    assert (waiting.pid, waiting.waiting) == (1997, True)
    (ofd,) = index[(os.makedev(8, 1), 77)]
    assert (ofd.pid, ofd.end, ofd.exclusive) == (-1, 99, False)
    (posix,) = index[(os.makedev(0, 0x2A), 5)]
    assert (posix.start, posix.end) == (1073741825, 1073741825)
    assert parse_lock_line("1: FLOCK") is None


@pytest.mark.parametrize(
    ("cgroup", "unit", "user_unit"),
    [
        ("0::/system.slice/wa-resync.service\n", "wa-resync.service", False),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sync.service\n",
            "sync.service",
            True,
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, False),
        ("12:pids:/\n1:name=systemd:/system.slice/apt-daily-upgrade.service\n0::/\n", None, False),
        (
            "1:name=systemd:/system.slice/apt-daily-upgrade.service\n",
            "apt-daily-upgrade.service",
            False,
        ),
        ("0::/\n", None, False),
        ("", None, False),
    ],
)
def test_systemd_unit_from_cgroup(cgroup: str, unit: str | None, user_unit: bool) -> None:
    assert unit_from_cgroup(cgroup) == (unit, user_unit)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0"),
        (900, "15m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (90, "1m30s"),
        (0.5, "500ms"),
        (90061.25, "25h1m1s250ms"),
        (86400, "24h"),  # as give_up_after's default is written in init and the example
    ],
)
def test_config_durations_round_trip(seconds: float, text: str) -> None:
    from lockwarden.support.durations import format_config_duration

    assert format_config_duration(seconds) == text
    assert parse_duration(text) == seconds
