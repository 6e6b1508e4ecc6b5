"""formats/hidden.py: the question F_OFD_GETLK asks of the kernel, on real files held by real
processes. Only a lock whose owner has no PID in this namespace is reported; one the kernel
gives a PID (this test's own child) is listed in /proc/locks already. Files that are not what
the claim read (replaced, a FIFO) are not asked about, and asking never blocks. The owner
outside a namespace: tests/integration/test_pid_namespace_outside.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lockwarden.formats.hidden import _ask, hidden_locks
from lockwarden.model import ByteRange
from lockwarden.support.namespaces import proc_is_own_nested_namespace

HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "r+")
fcntl.lockf(handle, fcntl.LOCK_EX, 1, int(sys.argv[2]))
print("ready", flush=True)
time.sleep(60)
"""


def key_of(path: Path) -> tuple[int, int]:
    status = path.stat()
    return (status.st_dev, status.st_ino)


def hold(path: Path, byte: int) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(byte)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


def test_a_lock_whose_owner_has_a_pid_here_is_not_reported(tmp_path: Path) -> None:
    path = tmp_path / "held.lock"
    path.write_bytes(b"\0" * 64)
    holder = hold(path, 10)
    try:
        assert _ask(str(path), key_of(path), [(0, None)], exclusive_only=False) == []
        assert hidden_locks([(str(path), key_of(path))]) == ()
    finally:
        holder.kill()
        holder.wait()


def test_only_the_files_the_claim_read_are_asked_about(tmp_path: Path) -> None:
    path, fifo = tmp_path / "replaced.lock", tmp_path / "fifo"
    path.write_bytes(b"")
    old_key = key_of(path)
    path.unlink()
    path.write_bytes(b"")  # a new inode under the same name
    os.mkfifo(fifo)
    assert _ask(str(path), (old_key[0], old_key[1] + 10**9), [(0, None)], False) == []
    assert _ask(str(fifo), key_of(fifo), [(0, None)], False) == []  # opened O_NONBLOCK
    assert _ask(str(tmp_path / "absent"), (0, 0), [(0, None)], False) == []


def test_sqlite_writer_ranges_ask_only_about_their_own_file(tmp_path: Path) -> None:
    """With writer ranges, a file none of them is on is not asked about at all."""
    database = tmp_path / "app.db"
    database.write_bytes(b"")
    other = ByteRange((1, 1), 120, 120)
    assert hidden_locks([(str(database), key_of(database))], [other]) == ()


def test_outside_a_container_nothing_is_asked() -> None:
    if not proc_is_own_nested_namespace():
        assert hidden_locks([("/nonexistent", (0, 0))]) == ()
