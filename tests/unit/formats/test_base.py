"""formats/base.py: the helpers every format builds its Claim with, on real record files. A
record's fields reach the claim, the record file's own inode joins the lock's keys, a file
that cannot be parsed or read is a problem that keeps what is known, and a time no datetime
can hold is no time."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from lockwarden.formats.base import (
    absent,
    claim_from_record_file,
    key_of,
    lstat_or_none,
    mtime_of,
    unreadable,
)
from lockwarden.model import Claim

PID_MAX = 4194304
STARTED = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
LOCK_KEY = (2049, 7)  # the lock directory's, as a format passes it


def write_record(directory: Path, text: str) -> Path:
    record = directory / "owner.json"
    record.write_text(text)
    return record


def test_a_records_fields_become_the_claims(tmp_path: Path) -> None:
    record = write_record(
        tmp_path,
        '{"pid": 4242, "role": "maintenance-job", "host": "db1", '
        '"startedAt": "2026-03-01T10:00:00Z", "ticket": "OPS-1"}',
    )
    os.utime(record, (STARTED.timestamp(),) * 2)
    claim = claim_from_record_file(
        "owner-record", str(record), PID_MAX, existence_is_lock=True, keys=(LOCK_KEY,)
    )
    assert (claim.pid, claim.role, claim.host, claim.started_at) == (
        4242,
        "maintenance-job",
        "db1",
        STARTED,
    )
    assert claim.extra == {"ticket": "OPS-1"}
    assert claim.keys == (LOCK_KEY, key_of(record.stat()))
    assert (claim.record_path, claim.owner_uid, claim.created_at) == (
        str(record),
        os.geteuid(),
        STARTED,
    )
    assert (claim.present, claim.existence_is_lock, claim.problem, claim.distrust) == (
        True,
        True,
        None,
        None,
    )


def test_the_record_files_key_is_not_repeated(tmp_path: Path) -> None:
    record = write_record(tmp_path, "4242\n")
    own = key_of(record.stat())
    claim = claim_from_record_file(
        "pidfile", str(record), PID_MAX, existence_is_lock=True, keys=(own,)
    )
    assert claim.keys == (own,)


def test_a_record_of_kernel_style_is_no_existence_lock(tmp_path: Path) -> None:
    write_record(tmp_path, '{"pid": 4242, "role": "flock"}')
    claim = claim_from_record_file(
        "owner-record",
        str(tmp_path / "owner.json"),
        PID_MAX,
        existence_is_lock=True,
        keys=(),
        kernel_style=lambda record: record.role == "flock",
    )
    assert (claim.pid, claim.existence_is_lock) == (4242, False)


def test_an_unparsable_record_is_a_problem_that_keeps_what_is_known(tmp_path: Path) -> None:
    record = write_record(tmp_path, '{"pid": 1, "pid": 2}')
    claim = claim_from_record_file(
        "owner-record", str(record), PID_MAX, existence_is_lock=True, keys=(LOCK_KEY,)
    )
    assert claim.pid is None
    assert claim.problem is not None and claim.problem.startswith(f"{record}: ")
    assert claim.keys == (LOCK_KEY, key_of(record.stat()))
    assert (claim.record_path, claim.owner_uid) == (str(record), os.geteuid())
    assert claim.created_at is not None


def test_an_unsafe_record_is_a_problem_with_the_lock_keys_only(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "owner.json")
    claim = claim_from_record_file(
        "owner-record",
        str(tmp_path / "owner.json"),
        PID_MAX,
        existence_is_lock=True,
        keys=(LOCK_KEY,),
    )
    assert (claim.present, claim.pid, claim.keys) == (True, None, (LOCK_KEY,))
    assert claim.problem is not None and "FIFO" in claim.problem


def test_an_absent_record_is_an_absent_claim(tmp_path: Path) -> None:
    claim = claim_from_record_file(
        "pidfile", str(tmp_path / "x.pid"), PID_MAX, existence_is_lock=True, keys=()
    )
    assert claim == absent("pidfile", str(tmp_path / "x.pid"), existence_is_lock=True)
    assert not claim.present


def test_unreadable_is_present_with_its_problem() -> None:
    assert unreadable("git", "/srv/repo/.git/index.lock", "no") == Claim(
        format="git",
        path="/srv/repo/.git/index.lock",
        present=True,
        existence_is_lock=True,
        problem="no",
    )


def test_an_mtime_no_datetime_can_hold_is_no_time(tmp_path: Path) -> None:
    record = write_record(tmp_path, "")
    os.utime(record, (STARTED.timestamp(),) * 2)
    assert mtime_of(record.stat()) == STARTED
    os.utime(record, (0, 0))  # 1970-01-01: before EARLIEST, a clock that was never set
    assert mtime_of(record.stat()) is None
    # Year 300 million, as anyone may set on their file where the file system keeps it (ext4
    # clamps it to 2446): a stat that says so, built by hand.
    far = os.stat_result((0o100644, 1, 1, 1, 0, 0, 0, 10**16, 10**16, 10**16))
    assert mtime_of(far) is None


def test_lstat_or_none_for_an_absent_path_and_one_through_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert lstat_or_none(str(tmp_path / "gone")) is None
    assert lstat_or_none(str(tmp_path / "file" / "under")) is None
    (tmp_path / "link").symlink_to("gone")
    status = lstat_or_none(str(tmp_path / "link"))
    assert status is not None and status.st_ino == os.lstat(tmp_path / "link").st_ino
