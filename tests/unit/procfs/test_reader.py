"""procfs/reader.py: HostReader against this host's real /proc, with real children. A process
is its kernel identity (start ticks as /proc/PID/stat counts them, its argv, its PID
namespace), a dead one is none and a zombie holds nothing; a capture finds the descriptors on
an inode with the kernel locks each carries. (What a capture reads, and how often, is
test_host_reads.py's; the frozen snapshot's, test_snapshot_frozen.py's.)"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from conftest import FLOCK_HOLDER, Children, start_ticks, wait_until
from lockwarden.procfs.reader import (
    DEFAULT_PID_MAX,
    HostReader,
    Request,
    lock_identity,
    unmatched_locks,
    wall_clock,
)

SLEEPER = "import time; print('ready', flush=True); time.sleep(120)"

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def key_of(path: Path) -> tuple[int, int]:
    status = path.stat()
    return (status.st_dev, status.st_ino)


def kernel_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]


def test_a_process_is_its_kernel_identity(children: Children) -> None:
    child = children.python(SLEEPER, "--role", "maintenance-job")
    assert wait_until(lambda: kernel_state(child.pid) == "S")  # past its print, asleep
    process = HostReader(wall_clock).process(child.pid)
    assert process is not None
    assert process.start_ticks == start_ticks(child.pid)
    assert process.cmdline == (sys.executable, "-c", SLEEPER, "--role", "maintenance-job")
    assert process.name == Path(f"/proc/{child.pid}/comm").read_text().strip()
    assert (process.uid, process.state, process.alive) == (os.geteuid(), "S", True)
    assert process.pid_namespace == os.stat("/proc/self/ns/pid").st_ino


def test_a_dead_process_is_none_and_a_zombie_holds_nothing(children: Children) -> None:
    child = children.python(SLEEPER)
    os.kill(child.pid, signal.SIGKILL)  # not reaped yet: a zombie
    assert wait_until(lambda: kernel_state(child.pid) == "Z")
    zombie = HostReader(wall_clock).process(child.pid)
    assert zombie is not None and zombie.state == "Z" and not zombie.alive
    child.wait()
    assert HostReader(wall_clock).process(child.pid) is None


def test_a_value_that_is_no_pid_is_never_read() -> None:
    reader = HostReader(wall_clock)
    for value in (0, 1, -1, True, reader.pid_max + 1):
        assert reader.process(value) is None  # type: ignore[arg-type]


def test_the_work_below_a_process_is_its_descendants(children: Children) -> None:
    parent = children.start([sys.executable, "-c", PARENT])
    assert parent.stdout is not None
    grandchild = children.track(int(parent.stdout.readline()))
    assert HostReader(wall_clock).descendants(parent.pid) == (grandchild,)
    assert HostReader(wall_clock).descendants(2**22 + 1) == ()


def test_a_capture_finds_the_descriptor_that_carries_a_real_lock(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    key = key_of(lock)
    snapshot = HostReader(wall_clock).capture(Request(scan_keys=frozenset({key})))
    descriptors = [found for found in snapshot.descriptors(key) if found.pid == holder.pid]
    assert len(descriptors) == 1
    [carried] = descriptors[0].locks
    [granted] = snapshot.kernel_locks(key)
    assert lock_identity(carried) == lock_identity(granted)
    assert lock_identity(granted) == ("FLOCK", "WRITE", holder.pid, 0, None)
    assert unmatched_locks([granted], descriptors) == 0
    assert unmatched_locks([granted], []) == 1  # a lock nobody could be found carrying


def test_a_capture_that_needs_no_locks_reads_none(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    children.python(FLOCK_HOLDER, str(lock))
    snapshot = HostReader(wall_clock).capture(Request(read_locks=False))
    assert snapshot.kernel_locks(key_of(lock)) == []
    assert dict(snapshot.lock_lines) == {}


def test_the_hosts_facts_are_the_kernels() -> None:
    snapshot = HostReader(wall_clock).capture(Request(read_locks=False))
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert (snapshot.boot_id, snapshot.hostname) == (boot_id, os.uname().nodename)
    assert snapshot.pid_max == int(Path("/proc/sys/kernel/pid_max").read_text())
    assert snapshot.euid == os.geteuid()


def test_a_proc_without_pid_max_falls_back_to_the_kernels_default(tmp_path: Path) -> None:
    assert HostReader(wall_clock, proc=str(tmp_path)).pid_max == DEFAULT_PID_MAX


def test_a_lock_the_kernel_reported_to_the_claim_joins_those_listed_once() -> None:
    """formats/hidden.py's answers (POSIX locks held from outside the namespace, PID 0) join
    the capture's kernel locks unless /proc/locks or a descriptor's fdinfo showed the same
    lock already; none is ever counted twice, and one no descriptor carries stays unnamed."""
    from lockwarden.model import KernelLock
    from lockwarden.procfs.reader import LockQuestion, _with_locks_asked, uncarried
    from lockwarden.procfs.snapshot import Descriptor

    key, other = (1, 10), (1, 11)
    listed = KernelLock(1, "POSIX", "WRITE", 0, key, 0, 0, False)  # fdinfo's line: carried
    outside = KernelLock(0, "POSIX", "WRITE", 0, key, 100, 100, False)
    again = KernelLock(0, "POSIX", "WRITE", 0, key, 0, 0, False)  # the same as `listed`
    on_other = KernelLock(0, "POSIX", "READ", 0, other, 0, None, False)
    questions = [
        LockQuestion(keys=(key,), hidden_locks=(outside, again)),
        LockQuestion(keys=(other,), hidden_locks=(on_other,)),
    ]
    merged = _with_locks_asked({key: (listed,), other: ()}, questions)
    assert merged == {key: (listed, outside), other: (on_other,)}
    carrier = Descriptor(pid=7, fd=3, locks=(listed,), write=True)
    assert uncarried(merged[key], [carrier]) == [outside]
    assert unmatched_locks(merged[key], [carrier]) == 1
