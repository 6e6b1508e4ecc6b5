"""formats/kernel.py on real files: the lock is the kernel's, so the claim is only the file's
(st_dev, st_ino), the key /proc/locks names a real holder's flock by; nothing in the file is
read, and a file that is not one is a problem, never a lock."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import FLOCK_HOLDER, Children
from lockwarden.formats.kernel import KernelLockFile
from lockwarden.procfs.snapshot import parse_proc_locks

PID_MAX = 4194304
FORMAT = KernelLockFile()


def test_a_present_file_is_claimed_by_its_inode_and_its_content_is_ignored(tmp_path: Path) -> None:
    lock = tmp_path / "app.lock"
    lock.write_text("4242\n")  # a PID in it says nothing: flock(1) leaves such files behind
    claim = FORMAT.read(str(lock), PID_MAX)
    status = lock.stat()
    assert (claim.format, claim.present, claim.existence_is_lock) == ("kernel", True, False)
    assert claim.keys == ((status.st_dev, status.st_ino),)
    assert (claim.pid, claim.problem, claim.remove_path) == (None, None, None)


def test_the_claims_key_is_the_one_proc_locks_shows_for_a_real_holder(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "held.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    [key] = FORMAT.read(str(lock), PID_MAX).keys
    held = parse_proc_locks(Path("/proc/locks").read_text()).get(key, [])
    assert [(entry.pid, entry.kind, entry.mode) for entry in held] == [
        (holder.pid, "FLOCK", "WRITE")
    ]


def test_a_directory_is_a_lock_file_too(tmp_path: Path) -> None:
    claim = FORMAT.read(str(tmp_path), PID_MAX)
    assert claim.present and claim.problem is None
    assert FORMAT.detect(str(tmp_path), os.lstat(tmp_path))


def test_an_absent_file_is_an_absent_kernel_lock(tmp_path: Path) -> None:
    for path in (tmp_path / "gone.lock", tmp_path / "file" / "under-a-file.lock"):
        (tmp_path / "file").write_text("")
        claim = FORMAT.read(str(path), PID_MAX)
        assert (claim.present, claim.existence_is_lock, claim.keys) == (False, False, ())


def test_a_fifo_is_not_detected_and_reads_as_a_problem(tmp_path: Path) -> None:
    fifo = tmp_path / "app.lock"
    os.mkfifo(fifo)
    assert not FORMAT.detect(str(fifo), os.lstat(fifo))
    claim = FORMAT.read(str(fifo), PID_MAX)
    assert claim.present and not claim.existence_is_lock
    assert claim.problem == f"{fifo} is not a regular file or directory"


def test_a_symlink_is_not_detected_by_its_lstat(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("")
    (tmp_path / "link.lock").symlink_to(tmp_path / "target")
    assert not FORMAT.detect(str(tmp_path / "link.lock"), os.lstat(tmp_path / "link.lock"))
