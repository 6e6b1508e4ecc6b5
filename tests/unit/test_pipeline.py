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
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from alerts.helpers import tiny_tmpfs
from conftest import Children, cli_env, wait_until
from factories import CaptureAfter
from lockwarden.config import DEFAULT_CRITICAL_AFTER, DEFAULT_WARN_AFTER, LockConfig
from lockwarden.model import Finding, State, UnknownCause
from lockwarden.pipeline import STALE_LOOKS, inspect
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
