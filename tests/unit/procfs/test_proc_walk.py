"""Whole-host walks of /proc (the descriptor scan, the nested PID namespace scan) are shared
by two threads on a host with many processes. Splitting must change nothing: the same
descriptors, in the same order, and an error in either half reaches the run."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, run_json, run_python
from lockwarden.procfs import snapshot as host


def scan(keys: frozenset[host.InodeKey], split_at: int) -> host.DescriptorScan:
    saved = host.SPLIT_AT
    host.SPLIT_AT = split_at
    try:
        entries = tuple(entry for entry in os.listdir("/proc") if entry.isdigit())
        return host._scan_descriptors("/proc", keys, entries)
    finally:
        host.SPLIT_AT = saved


def test_a_split_scan_finds_what_one_walk_finds(tmp_path: Path, children: Children) -> None:
    locks = [tmp_path / f"lock-{number}" for number in range(3)]
    holders = []
    for path in locks:
        path.touch()
        holders.append(children.python(FLOCK_HOLDER, str(path)).pid)
    keys = frozenset((status.st_dev, status.st_ino) for status in map(os.stat, locks))
    whole = scan(keys, split_at=1_000_000)
    split = scan(keys, split_at=2)  # two threads, however few processes there are
    assert whole.by_key == split.by_key
    assert whole.unreadable_pids == split.unreadable_pids
    found = sorted(d.pid for descriptors in split.by_key.values() for d in descriptors)
    assert found == sorted(holders)
    assert all(d.locks for descriptors in split.by_key.values() for d in descriptors)


def test_an_error_in_the_other_half_is_raised_in_the_run() -> None:
    def walk(part: tuple[str, ...]) -> int:
        if "boom" in part:
            raise RuntimeError("the second half failed")
        return len(part)

    entries = (*(str(number) for number in range(10)), "boom")
    saved = host.SPLIT_AT
    host.SPLIT_AT = 2
    try:
        assert host._shared_walk(entries[:10], walk) == [5, 5]
        with pytest.raises(RuntimeError, match="second half"):
            host._shared_walk(entries, walk)
    finally:
        host.SPLIT_AT = saved


AT_THE_PROCESS_LIMIT = """
import os, resource, sys, threading
from lockwarden.procfs import snapshot as host
os.setgid(65534)
os.setuid(65534)
resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))  # this process is that one
try:
    threading.Thread(target=lambda: None).start()
    print("a thread started: the limit did not bite")
except RuntimeError:
    pass
host.SPLIT_AT = 2
print(host._shared_walk(tuple("abcdef"), len))
"""


def test_at_the_process_limit_the_walk_runs_in_one_thread(children: Children) -> None:
    """A unit's TasksMax or `ulimit -u` can refuse a thread: the run walks alone, it does not
    fail. Real: the child drops to nobody (root is exempt from RLIMIT_NPROC) with a limit of
    one process, which it already is."""
    if os.geteuid() != 0:  # CI runs as root; a developer's run may not
        message = "needs root to drop to another user"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    completed = run_python(AT_THE_PROCESS_LIMIT)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["[6]"], completed.stdout


DEEP_HOLDER = """
import fcntl, os, sys, time
directory = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(25):  # 25 x 200 characters: past PATH_MAX, reached through openat
    try:
        os.mkdir("d" * 200, dir_fd=directory)
    except FileExistsError:
        pass
    deeper = os.open("d" * 200, os.O_RDONLY, dir_fd=directory)
    os.close(directory)
    directory = deeper
lock = os.open("LOCK", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=directory)
fcntl.flock(lock, fcntl.LOCK_EX)
status = os.fstat(lock)
print(f"ready {status.st_dev} {status.st_ino} {lock}", flush=True)
time.sleep(120)
"""


def test_a_holder_whose_path_is_too_long_to_read_is_still_found(
    tmp_path: Path, children: Children
) -> None:
    """readlink of /proc/PID/fd/N fails (ENAMETOOLONG) for a file deeper than PATH_MAX; that
    descriptor must still be read through fdinfo, not taken for closed."""
    holder = children.start(
        [sys.executable, "-c", DEEP_HOLDER, str(tmp_path)], stdin=subprocess.DEVNULL
    )
    assert holder.stdout is not None
    _ready, device, inode, fd = holder.stdout.readline().split()
    with pytest.raises(OSError) as too_long:
        os.readlink(f"/proc/{holder.pid}/fd/{fd}")
    assert too_long.value.errno == errno.ENAMETOOLONG
    key = (int(device), int(inode))
    found = host._scan_descriptors("/proc", frozenset({key}), (str(holder.pid),))
    (descriptor,) = found.by_key[key]
    assert descriptor.pid == holder.pid and descriptor.locks


MANY_RANGES = """
import fcntl, os, sys, time
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
for number in range(int(sys.argv[2])):  # one byte in two: the ranges never merge
    fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * number)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_descriptor_carrying_more_locks_than_one_read_holds_has_them_all(
    tmp_path: Path, children: Children
) -> None:
    """Its fdinfo entry lists 1,500 lock lines (~94 KB, past one 64 KiB read): every one is
    attributed to it, and none is left unattributed."""
    lock = tmp_path / "tdb"
    holder = children.python(MANY_RANGES, str(lock), "1500")

    code, document = run_json("inspect", str(lock), "--format", "kernel")
    finding = document["locks"][0]
    fdinfo_bytes = sum(
        len(Path(f"/proc/{holder.pid}/fdinfo/{fd}").read_bytes())
        for fd in os.listdir(f"/proc/{holder.pid}/fd")
        if os.path.realpath(f"/proc/{holder.pid}/fd/{fd}") == str(lock)
    )

    assert fdinfo_bytes > 64 * 1024  # more than one read of the scan takes
    assert (code, finding["state"]) == (0, "held")
    assert [holder_["pid"] for holder_ in finding["holders"]] == [holder.pid]
    assert finding["unattributed"] is None


def test_an_entry_past_one_read_is_read_on_only_when_its_rest_matters(tmp_path: Path) -> None:
    """A real inotify descriptor watching 1,000 files has an fdinfo entry past 64 KiB (a line
    per watch). Read on, it comes whole and ends with a whole line; not wanted, one read."""
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = libc.inotify_init1(os.O_CLOEXEC)
    assert descriptor >= 0, os.strerror(ctypes.get_errno())
    try:
        for number in range(1000):
            watched = tmp_path / f"w{number}"
            watched.touch()
            assert libc.inotify_add_watch(descriptor, os.fsencode(watched), 0x2) >= 0
        entry = f"/proc/self/fdinfo/{descriptor}"
        whole = host._read_small(entry, read_on=lambda _first: True)
        first = host._read_small(entry, read_on=lambda _first: False)
    finally:
        os.close(descriptor)

    assert whole is not None and first is not None
    assert whole.count(b"inotify wd:") == 1000
    assert whole.endswith(b"\n")
    assert len(first) == 64 * 1024 and whole.startswith(first)
