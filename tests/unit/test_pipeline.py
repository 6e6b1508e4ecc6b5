"""The pipeline's inspection against holders that change their lock between its steps.

A run reads each lock's claim, then captures the host, then judges. Between the read and the
capture a holder can let go and exit, die without letting go, or hand the lock over. Only
the dead holder's lock is stale; a lock let go is free, and a lock handed over is held by
its new holder. The differential puts real holders (`lockwarden.hold` in both layouts, a
hand-written pidfile) through random fates at that moment, through a host reader whose
capture first carries out the fates: the capture itself is the real one. Every holder is
started by the test and killed by its PID at teardown.

The locks live on a tmpfs of the test's own: a lock let go frees its inode numbers, and on a
shared file system another program's file may get one at once and be locked (a test running
beside this one did): the claim read before would then meet that file's kernel lock.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from alerts.helpers import tiny_tmpfs
from conftest import Children, cli_env, wait_until
from factories import CaptureAfter
from lockwarden import pipeline
from lockwarden.config import DEFAULT_CRITICAL_AFTER, DEFAULT_WARN_AFTER, LockConfig
from lockwarden.model import Finding, State, UnknownCause
from lockwarden.pipeline import STALE_LOOKS, FileReads, inspect
from lockwarden.procfs.reader import HostReader, Request
from lockwarden.procfs.snapshot import Snapshot

__all__ = ["tiny_tmpfs"]  # the fixture, imported so pytest finds it here

HOLDER = textwrap.dedent(
    """
    import os, sys
    layout, path = sys.argv[1], sys.argv[2]
    if layout == "pidfile":
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(descriptor, f"{os.getpid()}\\n".encode())
        os.close(descriptor)
        print("ready", flush=True)
        sys.stdin.readline()
        os.unlink(path)
    else:
        import lockwarden
        with lockwarden.hold(path, role="differential", file=layout == "file"):
            print("ready", flush=True)
            sys.stdin.readline()
    """
)

LAYOUTS = ("directory", "file", "pidfile")
FATES = ("holds", "lets go", "killed", "handed over")
SEEDS = list(range(8))


@dataclass
class Lock:
    layout: str
    path: Path
    holder: subprocess.Popen[str]

    @property
    def config(self) -> LockConfig:
        lock_format = "pidfile" if self.layout == "pidfile" else "owner-record"
        return LockConfig(
            name=self.path.name,
            path=str(self.path),
            format=lock_format,
            warn_after=DEFAULT_WARN_AFTER,
            critical_after=DEFAULT_CRITICAL_AFTER,
        )


def take(children: Children, layout: str, path: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", HOLDER, layout, str(path)]
    return children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)


def ended(holder: subprocess.Popen[str], reap: bool) -> None:
    """Wait until `holder` has exited: reaped (its PID gone), or left a zombie."""
    if reap:
        holder.wait(timeout=15)
        return
    process = psutil.Process(holder.pid)
    assert wait_until(lambda: process.status() == psutil.STATUS_ZOMBIE, timeout=15)


def let_go(holder: subprocess.Popen[str], reap: bool) -> None:
    assert holder.stdin is not None
    holder.stdin.write("done\n")
    holder.stdin.close()
    ended(holder, reap)


def kill(holder: subprocess.Popen[str], reap: bool) -> None:
    holder.send_signal(signal.SIGKILL)
    ended(holder, reap)


def judged(locks: list[Lock], host: HostReader) -> tuple[Finding, ...]:
    configs = [lock.config for lock in locks]
    return inspect(configs, host, datetime.now(UTC)).findings


@pytest.mark.parametrize("seed", SEEDS)
def test_only_a_dead_holders_lock_is_stale_whatever_happens_between_read_and_capture(
    children: Children, tiny_tmpfs: Path, seed: int
) -> None:
    rng = random.Random(seed)
    locks, fates, expected = [], [], []
    for index in range(rng.randint(3, 5)):
        layout = rng.choice(LAYOUTS)
        path = tiny_tmpfs / (f"lock{index}.pid" if layout == "pidfile" else f"lock{index}")
        locks.append(Lock(layout, path, take(children, layout, path)))
        fates.append((rng.choice(FATES), rng.random() < 0.5))

    def between() -> None:
        for lock, (fate, reap) in zip(locks, fates, strict=True):
            if fate == "holds":
                expected.append((State.HELD, lock.holder.pid))
            elif fate == "lets go":
                let_go(lock.holder, reap)
                expected.append((State.FREE, None))
            elif fate == "killed":
                kill(lock.holder, reap)
                expected.append((State.STALE, None))
            else:
                let_go(lock.holder, reap)
                lock.holder = take(children, lock.layout, lock.path)
                expected.append((State.HELD, lock.holder.pid))

    host = CaptureAfter(between)
    findings = judged(locks, host)

    said = [(f.state, f.holder.pid if f.holder else None) for f in findings]
    story = [(lock.layout, *fate) for lock, fate in zip(locks, fates, strict=True)]
    assert said == expected, f"seed {seed}: {story}"
    judged_stale = any(fate != "holds" for fate, _reap in fates)  # by the first look
    assert host.captures == (2 if judged_stale else 1), "a stale verdict takes a second look"


@pytest.mark.parametrize("hand_overs", [STALE_LOOKS - 1, STALE_LOOKS])
def test_a_lock_handed_over_before_each_look_is_held_by_the_last_holder_or_unknown(
    children: Children, tiny_tmpfs: Path, hand_overs: int
) -> None:
    """Handed over before the first look's capture and the second's: the third look finds the
    last holder. Handed over before every look's capture: each look reads a record whose
    holder is gone by its capture, and the lock is unknown, never stale."""
    path = tiny_tmpfs / "LOCK"
    lock = Lock("directory", path, take(children, "directory", path))

    def hand_over() -> None:
        let_go(lock.holder, reap=hand_overs % 2 == 0)
        lock.holder = take(children, "directory", path)

    host = CaptureAfter(*[hand_over] * hand_overs)
    [finding] = judged([lock], host)

    if hand_overs < STALE_LOOKS:
        said = (finding.state, finding.holder and finding.holder.pid)
        why = (finding.reason, finding.proof, finding.unattributed, host.captures)
        assert said == (State.HELD, lock.holder.pid), why
    else:
        assert (finding.state, finding.unknown_cause) == (State.UNKNOWN, UnknownCause.UNPROVEN)
    assert host.captures == STALE_LOOKS


def test_a_lock_left_behind_is_stale_once_a_second_look_agrees(
    children: Children, tiny_tmpfs: Path
) -> None:
    path = tiny_tmpfs / "LOCK"
    lock = Lock("file", path, take(children, "file", path))
    kill(lock.holder, reap=True)

    host = CaptureAfter()
    [finding] = judged([lock], host)

    assert finding.state is State.STALE
    assert host.captures == 2


PACMAN_HOLDER = textwrap.dedent(
    """
    import os, sys
    descriptor = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    print("ready", flush=True)
    sys.stdin.readline()
    os.unlink(sys.argv[1])
    """
)

# Takes db.lck as a file on the freed inode: the inode kept aside (a hard link) is linked
# back under the lock's name, its times untouched, and kept open.
PACMAN_ON_THE_FREED_INODE = textwrap.dedent(
    """
    import os, sys
    lock, aside = sys.argv[1], sys.argv[2]
    descriptor = os.open(aside, os.O_WRONLY)
    os.link(aside, lock)
    os.unlink(aside)
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_a_lock_taken_again_with_the_same_inode_and_time_is_not_stale(
    children: Children, tiny_tmpfs: Path
) -> None:
    """pacman's db.lck says nothing but its inode and mtime, and no process with it open
    proves it stale. Its holder lets go and exits before the capture; right after the
    capture another takes it on the freed inode in the same timestamp tick (ext4 hands a
    freed inode to the next file, and a tick is 4 ms to 1 s; here a hard link kept aside
    gives the inode back, so it happens every time): read again, the claim is the same. The
    second look's capture finds the new holder with it open. Run in a PID namespace of its
    own in CI, where every process's descriptors can be read."""
    path, aside = tiny_tmpfs / "db.lck", tiny_tmpfs / "freed-inode"
    first = children.start(
        [sys.executable, "-c", PACMAN_HOLDER, str(path)],
        ready="ready",
        env=cli_env(),
        stdin=subprocess.PIPE,
    )
    before = path.stat()
    second: list[subprocess.Popen[str]] = []

    def lets_go() -> None:
        os.link(path, aside)
        let_go(first, reap=True)

    def taken_again_after_the_capture() -> None:
        argv = [sys.executable, "-c", PACMAN_ON_THE_FREED_INODE, str(path), str(aside)]
        second.append(children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE))

    config = LockConfig(
        name="db.lck",
        path=str(path),
        format="pacman",
        warn_after=DEFAULT_WARN_AFTER,
        critical_after=DEFAULT_CRITICAL_AFTER,
    )

    class TakenAfterTheCapture(CaptureAfter):
        def capture(self, request: Request) -> Snapshot:
            snapshot = super().capture(request)
            if self.captures == 1:
                taken_again_after_the_capture()
            return snapshot

    host = TakenAfterTheCapture(lets_go)
    [finding] = inspect([config], host, datetime.now(UTC)).findings

    same = path.stat()
    assert (same.st_ino, same.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == second[0].pid
    assert host.captures == 2


FLOCK_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    print("ready", flush=True)
    sys.stdin.readline()
    """
)

# What may happen to a kernel lock's file between its claim and the capture, and what the
# lock then is: its inode handed to another file (a hard link made, the lock's name removed:
# as a file system does when it gives a freed inode to the next file) that another process
# locks; the lock's file renamed away by a holder that keeps its lock; the lock taken again
# on a new file of its name once its inode went to another file.
HELD_SIDE_FATES = ("holds", "another name", "inode to another file", "renamed away", "retaken")


def flock_holder(children: Children, path: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", FLOCK_HOLDER, str(path)]
    return children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)


def kernel_lock(name: str, path: Path, lock_format: str = "kernel") -> LockConfig:
    return LockConfig(
        name=name,
        path=str(path),
        format=lock_format,
        warn_after=DEFAULT_WARN_AFTER,
        critical_after=DEFAULT_CRITICAL_AFTER,
    )


@dataclass
class Reads:
    """How many times the locks' claims were read (FileReads), and of how many locks."""

    sizes: list[int]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Counts the pipeline's claim reads; the reads themselves are the real ones."""
    counted = Reads([])

    class Counted(FileReads):
        def __init__(self, locks: Sequence[LockConfig], *args: Any, **kwargs: Any) -> None:
            counted.sizes.append(len(locks))
            super().__init__(locks, *args, **kwargs)

    monkeypatch.setattr(pipeline, "FileReads", Counted)
    return counted


@pytest.mark.parametrize("seed", SEEDS)
def test_a_held_kernel_lock_names_only_a_process_holding_the_file_at_its_path(
    children: Children, tiny_tmpfs: Path, reads: Reads, seed: int
) -> None:
    """The held side of the window between claim and capture. A kernel lock's claim is its
    file's inode; if that inode leaves the lock's path before the capture (its file renamed
    away, or its name removed and the inode given to another file, as a file system hands a
    freed inode to the next file it creates), the capture meets whoever locks that other file
    on it. Such a process is innocent: the lock is free, or held by whoever took it again at
    its path. A holder that reached the file by another name (here the lock is configured
    through a symlinked directory) still holds it: the claim read again proves it."""
    rng = random.Random(seed)
    real, alias = tiny_tmpfs / "real", tiny_tmpfs / "alias"
    real.mkdir()
    alias.symlink_to(real)
    fates = [rng.choice(HELD_SIDE_FATES) for _index in range(rng.randint(3, 5))]
    holders = [flock_holder(children, real / f"lock{index}") for index in range(len(fates))]
    configs = [
        kernel_lock(f"lock{index}", (alias if fate == "another name" else real) / f"lock{index}")
        for index, fate in enumerate(fates)
    ]
    innocent: list[int] = []
    expected: list[tuple[State, int | None]] = []

    def between() -> None:
        for index, (fate, holder) in enumerate(zip(fates, holders, strict=True)):
            path, elsewhere = real / f"lock{index}", tiny_tmpfs / f"other{index}"
            if fate in ("holds", "another name"):
                expected.append((State.HELD, holder.pid))
                continue
            if fate == "renamed away":
                path.rename(elsewhere)
                expected.append((State.FREE, None))
                continue
            os.link(path, elsewhere)
            path.unlink()
            let_go(holder, reap=True)
            innocent.append(flock_holder(children, elsewhere).pid)
            if fate == "retaken":
                expected.append((State.HELD, flock_holder(children, path).pid))
            else:
                expected.append((State.FREE, None))

    host = CaptureAfter(between)
    findings = inspect(configs, host, datetime.now(UTC)).findings

    said = [(f.state, f.holder.pid if f.holder else None) for f in findings]
    assert said == expected, f"seed {seed}: {fates}: {[f.reason for f in findings]}"
    named = {party.pid for f in findings for party in (*f.holders, *f.readers, *f.waiters)}
    assert not named & set(innocent), f"seed {seed}: an innocent process named: {fates}"
    away = {"inode to another file", "renamed away", "retaken"}
    assert host.captures == (2 if away & set(fates) else 1), "a lock moved gets another look"
    read_again = [fate for fate in fates if fate != "holds"]
    assert reads.sizes[1:2] == ([len(read_again)] if read_again else []), "only those read again"


def test_a_kernel_lock_held_under_its_own_name_is_read_once(
    children: Children, tiny_tmpfs: Path, reads: Reads
) -> None:
    """The common case costs nothing more: the holder's descriptor shows the lock's path."""
    path = tiny_tmpfs / "lock"
    holder = flock_holder(children, path)

    host = CaptureAfter()
    [finding] = inspect([kernel_lock("lock", path)], host, datetime.now(UTC)).findings

    assert (finding.state, finding.holder and finding.holder.pid) == (State.HELD, holder.pid)
    assert (reads.sizes, host.captures) == ([1], 1)


def test_a_link_in_another_mount_namespace_proves_nothing(
    children: Children, tiny_tmpfs: Path, reads: Reads
) -> None:
    """A descriptor's link names the path its own mount namespace sees: a process with a bind
    mount over the lock's directory shows the lock's path for another file. The lock's inode
    goes to that file, an innocent process there locks it: the claim is read again, and the
    lock is free."""
    real, other = tiny_tmpfs / "real", tiny_tmpfs / "other"
    real.mkdir()
    other.mkdir()
    path = real / "app.lock"
    holder = flock_holder(children, path)
    innocent: list[int] = []

    def between() -> None:
        os.link(path, other / "app.lock")
        path.unlink()
        let_go(holder, reap=True)
        script = f'mount --bind {other} {real} && exec {sys.executable} -c "$0" {path}'
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, FLOCK_HOLDER]
        started = children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)
        innocent.append(started.pid)

    host = CaptureAfter(between)
    [finding] = inspect([kernel_lock("app", path)], host, datetime.now(UTC)).findings

    assert finding.state is State.FREE, (finding.reason, innocent)
    assert (reads.sizes[1:], host.captures) == ([1, 1], 2)  # read again, then looked again


SQLITE_READER = textwrap.dedent(
    """
    import fcntl, os, sys
    descriptor = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(descriptor, fcntl.LOCK_SH, 510, 1073741826, 0)  # SQLite's SHARED range
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_a_free_lock_names_no_reader_of_another_file(
    children: Children, tiny_tmpfs: Path, reads: Reads
) -> None:
    """A SQLite database's inode goes to another file that an innocent process reads: free,
    and that reader is not listed as one of the lock's."""
    database, other = tiny_tmpfs / "app.db", tiny_tmpfs / "other.db"
    sqlite3.connect(database).execute("create table t(x)").connection.close()
    innocent: list[int] = []

    def between() -> None:
        os.link(database, other)
        database.unlink()
        argv = [sys.executable, "-c", SQLITE_READER, str(other)]
        innocent.append(
            children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE).pid
        )

    host = CaptureAfter(between)
    [finding] = inspect([kernel_lock("db", database, "sqlite")], host, datetime.now(UTC)).findings

    named = {party.pid for party in (*finding.holders, *finding.readers, *finding.waiters)}
    assert not named & set(innocent), finding.reason
    assert host.captures == 2


POSIX_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(descriptor, fcntl.LOCK_EX, 1, int(sys.argv[2]))
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def _firefox_profile(children: Children, directory: Path) -> tuple[Path, int]:
    """A profile as Firefox holds it: a POSIX lock on `.parentlock`, `lock -> IP:+PID`."""
    argv = [sys.executable, "-c", POSIX_HOLDER, str(directory / ".parentlock"), "0"]
    holder = children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)
    (directory / "lock").symlink_to(f"127.0.0.1:+{holder.pid}")
    return directory, holder.pid


def _terraform_state(children: Children, directory: Path) -> tuple[Path, int]:
    """Terraform's local state as `terraform apply` holds it: a POSIX lock on the state file,
    then the info beside it."""
    state = directory / "terraform.tfstate"
    argv = [sys.executable, "-c", POSIX_HOLDER, str(state), "0"]
    holder = children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)
    info = '{"ID": "1", "Operation": "OperationTypeApply", "Who": "ops@here", "Version": "1.9"}'
    (directory / ".terraform.tfstate.lock.info").write_text(info)
    return state, holder.pid


SQLITE_WAL_WRITER = textwrap.dedent(
    """
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("begin immediate")
    connection.execute("insert into t values (1)")
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def _sqlite_wal_writer(children: Children, directory: Path) -> tuple[Path, int]:
    """A SQLite database in WAL mode inside a write transaction: its write lock is on the
    `-shm` file (byte 120, WAL_WRITE_LOCK), beside the database."""
    database = directory / "app.db"
    connection = sqlite3.connect(database)
    connection.execute("pragma journal_mode=wal")
    connection.execute("create table t(x)")
    connection.close()
    argv = [sys.executable, "-c", SQLITE_WAL_WRITER, str(database)]
    holder = children.start(argv, ready="ready", env=cli_env(), stdin=subprocess.PIPE)
    return database, holder.pid


@pytest.mark.parametrize(
    ("lock_format", "held_by"),
    [
        ("firefox-profile", _firefox_profile),
        ("terraform", _terraform_state),
        ("sqlite", _sqlite_wal_writer),
    ],
)
def test_a_lock_held_on_a_file_beside_its_path_is_read_once(
    children: Children, tiny_tmpfs: Path, reads: Reads, lock_format: str, held_by: Any
) -> None:
    """A format whose kernel lock is on a file beside the lock's path names that file: its
    holder's descriptor shows the lock's own file, so the claim needs no second read."""
    path, pid = held_by(children, tiny_tmpfs)

    host = CaptureAfter()
    [finding] = inspect([kernel_lock("app", path, lock_format)], host, datetime.now(UTC)).findings

    assert (finding.state, finding.holder and finding.holder.pid) == (State.HELD, pid), (
        finding.reason
    )
    assert (reads.sizes, host.captures) == ([1], 1)
