"""formats/owner_record.py on real locks: a LOCK directory a real child made with mkdir and
its owner.json, the record files beside it, and the layouts that are no record. The directory
is the lock and what removal takes away; a key=value file is the flock style, whose file
outlives its holder and so is never removed."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import MKDIR_HOLDER, Children
from lockwarden.formats.owner_record import OwnerRecord

PID_MAX = 4194304
FORMAT = OwnerRecord()


def key_of(path: Path) -> tuple[int, int]:
    status = os.lstat(path)
    return (status.st_dev, status.st_ino)


def test_a_real_mkdir_lock_names_its_holder(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "LOCK"
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", "2026-03-01T10:00:00Z")
    claim = FORMAT.read(str(lock), PID_MAX)
    assert (claim.format, claim.path, claim.present, claim.existence_is_lock) == (
        "owner-record",
        str(lock),
        True,
        True,
    )
    assert (claim.pid, claim.role) == (holder.pid, "maintenance-job")
    assert (
        claim.started_at is not None and claim.started_at.isoformat() == "2026-03-01T10:00:00+00:00"
    )
    assert claim.keys == (key_of(lock), key_of(lock / "owner.json"))
    assert (claim.record_path, claim.remove_path) == (str(lock / "owner.json"), str(lock))
    assert FORMAT.detect(str(lock), os.lstat(lock))


def test_a_lock_directory_without_a_record_is_still_a_lock(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.mkdir()
    (lock / ".owner.json.tmp-4242").write_text('{"pid": 4242}')  # half-written: never read
    claim = FORMAT.read(str(lock), PID_MAX)
    assert (claim.present, claim.pid, claim.remove_path) == (True, None, str(lock))
    assert claim.note == "the lock directory holds no owner record"
    assert claim.keys == (key_of(lock),)


def test_the_preferred_record_name_wins_over_others(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.mkdir()
    (lock / "aaa").write_text("77\n")
    (lock / "pid").write_text("88\n")
    (lock / "owner.json").write_text('{"pid": 99}')
    assert FORMAT.read(str(lock), PID_MAX).pid == 99
    (lock / "owner.json").unlink()
    assert FORMAT.read(str(lock), PID_MAX).pid == 88
    (lock / "pid").unlink()
    assert FORMAT.read(str(lock), PID_MAX).pid == 77  # any file, when none has a known name


def test_a_lock_directory_too_big_to_be_one_is_a_problem(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.mkdir()
    for number in range(257):
        (lock / f"f{number}").write_text("")
    claim = FORMAT.read(str(lock), PID_MAX)
    assert claim.present and claim.pid is None
    assert claim.problem is not None and "more than 256 entries" in claim.problem


def test_a_json_record_file_is_an_existence_lock_removed_as_a_file(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    lock.write_text('{"pid": 4242, "role": "job"}')
    claim = FORMAT.read(str(lock), PID_MAX)
    assert (claim.pid, claim.existence_is_lock, claim.remove_path) == (4242, True, str(lock))


def test_a_key_value_file_is_the_flock_style_and_never_removed(tmp_path: Path) -> None:
    lock = tmp_path / "app.lock"
    lock.write_text("pid=4242\nacquired_at=2026-03-01T10:00:00Z\n")
    claim = FORMAT.read(str(lock), PID_MAX)
    assert (claim.pid, claim.existence_is_lock, claim.remove_path) == (4242, False, None)


def test_an_absent_lock_and_a_fifo(tmp_path: Path) -> None:
    absent = FORMAT.read(str(tmp_path / "LOCK"), PID_MAX)
    assert (absent.present, absent.existence_is_lock) == (False, True)
    os.mkfifo(tmp_path / "fifo")
    fifo = FORMAT.read(str(tmp_path / "fifo"), PID_MAX)
    assert fifo.problem == f"{tmp_path / 'fifo'} is neither a lock directory nor a record file"


def test_what_auto_detection_takes_for_an_owner_record(tmp_path: Path) -> None:
    files = {
        "empty": "",
        "bare": "4242\n",
        "json": '{"role": "job"}',
        "key-value": "owner=job\n",
        "garbled": "hello\nworld\n",  # has content: the reader says what is wrong with it
        "prose": "nothing here",  # likewise: one line that is no PID
        "blank": "\n  \n",  # content, but nothing in it
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    detected = {
        name for name in files if FORMAT.detect(str(tmp_path / name), os.lstat(tmp_path / name))
    }
    assert detected == {"bare", "json", "key-value", "garbled", "prose"}
