"""formats/symlink_lock.py on real links: the record is the link's target, read without ever
following it; the O_EXCL-file fallback holds the same text; the claim's key, owner and time
are the link's own, never its target's."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from lockwarden.formats.symlink_lock import LinkRecord, claim_from_link, read_or_problem
from lockwarden.model import Claim

TAKEN = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def test_a_symlink_lock_is_read_without_following_it(tmp_path: Path) -> None:
    lock = tmp_path / "SingletonLock"
    lock.symlink_to("db1-4242")  # dangling, as Chromium's is: following it would fail
    record = read_or_problem("chromium-profile", str(lock))
    assert isinstance(record, LinkRecord)
    assert record.text == "db1-4242"
    assert record.status.st_ino == os.lstat(lock).st_ino


def test_the_regular_file_fallback_holds_the_same_text(tmp_path: Path) -> None:
    lock = tmp_path / "SingletonLock"
    lock.write_text("db1-4242\n")
    record = read_or_problem("chromium-profile", str(lock))
    assert isinstance(record, LinkRecord)
    assert record.text == "db1-4242"


def test_an_absent_lock_is_an_absent_claim(tmp_path: Path) -> None:
    claim = read_or_problem("emacs", str(tmp_path / ".#notes.txt"))
    assert claim == Claim(
        format="emacs", path=str(tmp_path / ".#notes.txt"), present=False, existence_is_lock=True
    )


def test_a_fifo_or_a_directory_is_a_problem(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, kind in (("fifo", "a FIFO"), ("dir", "a directory")):
        claim = read_or_problem("mercurial", str(tmp_path / name))
        assert isinstance(claim, Claim)
        assert claim.present and claim.existence_is_lock
        assert claim.problem is not None and kind in claim.problem


def test_a_fallback_file_over_4096_bytes_is_a_problem(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.write_bytes(b"x" * 4097)
    claim = read_or_problem("mercurial", str(lock))
    assert isinstance(claim, Claim)
    assert claim.problem is not None and "4096-byte record limit" in claim.problem


def test_the_claim_is_the_links_own_key_owner_and_time(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("")
    os.utime(target, (0, 0))  # the target's time must not leak into the claim
    lock = tmp_path / ".#notes.txt"
    lock.symlink_to(target)
    os.utime(lock, (TAKEN.timestamp(),) * 2, follow_symlinks=False)
    record = read_or_problem("emacs", str(lock))
    assert isinstance(record, LinkRecord)
    claim = claim_from_link("emacs", str(lock), record)
    link = os.lstat(lock)
    assert claim.keys == ((link.st_dev, link.st_ino),)
    assert (claim.started_at, claim.created_at) == (TAKEN, TAKEN)
    assert claim.owner_uid == link.st_uid
    assert (claim.present, claim.existence_is_lock) == (True, True)
    assert (claim.record_path, claim.remove_path) == (str(lock), str(lock))
