"""procfs/snapshot.py: /proc/locks as the kernel writes it for real holders and waiters, the
frozen Snapshot's look-ups (what a lock asks about is answered, a PID that names no process is
refused before any look-up), and a /proc read that may block given up at its deadline. (The
line tables are test_parsers.py's, the lazy index test_lock_index.py's, the frozen capture
test_snapshot_frozen.py's.)"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, POSIX_HOLDER, Children, wait_until
from factories import NOW, make_kernel_lock, make_process, make_snapshot
from lockwarden.procfs.snapshot import (
    NotCaptured,
    WorkingDirectories,
    index_proc_locks,
    parse_proc_locks,
    processes_under,
    read_within,
)

FLOCK_WAITER = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
fcntl.flock(handle, fcntl.LOCK_EX)
"""


def key_of(path: Path) -> tuple[int, int]:
    status = path.stat()
    return (status.st_dev, status.st_ino)


def test_a_real_holder_and_its_blocked_waiter_as_proc_locks_shows_them(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    waiter = children.python(FLOCK_WAITER, str(lock))
    key = key_of(lock)

    def both() -> list[tuple[int, str, str, bool]]:
        entries = parse_proc_locks(Path("/proc/locks").read_text()).get(key, [])
        return sorted((e.pid, e.kind, e.mode, e.waiting) for e in entries)

    assert wait_until(lambda: len(both()) == 2)
    assert both() == sorted(
        [(holder.pid, "FLOCK", "WRITE", False), (waiter.pid, "FLOCK", "WRITE", True)]
    )


def test_a_posix_lock_has_its_byte_range_and_is_found_through_the_index(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "state.db"
    lock.touch()
    holder = children.python(POSIX_HOLDER, str(lock))
    key = key_of(lock)
    snapshot = make_snapshot(lock_lines=index_proc_locks(Path("/proc/locks").read_text()))
    [entry] = snapshot.kernel_locks(key)
    assert (entry.pid, entry.kind, entry.mode, entry.start, entry.end) == (
        holder.pid,
        "POSIX",
        "WRITE",
        0,
        None,  # EOF: to the end of the file
    )
    assert key in snapshot.locks


def test_locks_only_the_descriptors_showed_are_among_the_snapshots() -> None:
    hidden = make_kernel_lock(pid=-1)  # a nested PID namespace's lock, read from fdinfo
    snapshot = make_snapshot(parsed_locks={hidden.key: (hidden,)})
    assert snapshot.kernel_locks(hidden.key) == [hidden]
    assert snapshot.locks == {hidden.key: [hidden]}


@pytest.mark.parametrize("pid", [0, 1, -1, True, 4194305, "42", 42.0])
def test_a_value_that_names_no_process_is_never_looked_up(pid: object) -> None:
    snapshot = make_snapshot()
    assert not snapshot.valid_pid(pid)
    assert snapshot.process(pid) is None  # type: ignore[arg-type]


def test_a_captured_process_is_answered_and_any_other_raises() -> None:
    process = make_process()
    snapshot = make_snapshot(processes={process.pid: process, 4243: None})
    assert snapshot.valid_pid(2) and snapshot.valid_pid(4194304)
    assert snapshot.process(4242) == process
    assert snapshot.process(4243) is None  # captured, and gone
    with pytest.raises(NotCaptured, match="PID 4244 was not captured"):
        snapshot.process(4244)


def test_facts_not_captured_raise_rather_than_read_the_host() -> None:
    snapshot = make_snapshot()
    key = (2049, 131)
    for look_up in (
        lambda: snapshot.descriptors(key),
        lambda: snapshot.thread_descriptors(key),
        lambda: snapshot.blocked_calls(4242),
        lambda: snapshot.mapping_pids(key),
        lambda: snapshot.namespace_twins(4242),
        snapshot.working_directories,
        lambda: snapshot.processes_working_in(["/srv/repo"]),
        snapshot.node_id,
    ):
        with pytest.raises(NotCaptured):
            look_up()
    assert snapshot.fd_target(4242, 3) is None


def test_the_boot_is_the_capture_less_the_uptime() -> None:
    assert make_snapshot(uptime_s=3600.0).booted_at == NOW - timedelta(hours=1)


def test_a_working_directory_is_under_a_root_only_at_a_path_boundary() -> None:
    cwds = WorkingDirectories(
        {10: "/srv/repo", 11: "/srv/repo/src", 12: "/srv/repository", 13: "/srv"}, ()
    )
    assert processes_under(cwds, ["/srv/repo"]) == (10, 11)


def test_a_proc_read_returns_the_text_or_empty_when_gone(tmp_path: Path) -> None:
    (tmp_path / "cmdline").write_text("python3\0resync.py\0")
    assert read_within(str(tmp_path / "cmdline"), 5.0) == "python3\0resync.py\0"
    assert read_within(str(tmp_path / "gone"), 5.0) == ""
    assert read_within(f"/proc/{os.getpid()}/comm", 5.0) != ""


def test_a_read_that_blocks_is_given_up_at_its_deadline(tmp_path: Path) -> None:
    fifo = tmp_path / "cmdline"
    os.mkfifo(fifo)  # opening it to read blocks until a writer comes, as a hung mount's page
    before = {thread.ident for thread in threading.enumerate()}
    assert read_within(str(fifo), 0.2) is None
    [reader] = [t for t in threading.enumerate() if t.ident not in before]
    # Let the reader go: a writer opens and closes the FIFO, the read sees its end.
    descriptor = os.open(fifo, os.O_WRONLY)
    os.close(descriptor)
    assert wait_until(lambda: not reader.is_alive())
