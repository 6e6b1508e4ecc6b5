"""mercurial: real `hg debuglocks --set-wlock --set-lock` holding a repository's two locks."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import Children, require_tool, wait_until
from lockcheck import backdate, inspect_lock
from lockwarden.check.advice import shell_argv
from lockwarden.model import State, UnknownCause

HG_ENV = {**os.environ, "HGPLAIN": "1", "HGRCPATH": os.devnull}


def own_pid_namespace() -> int:
    """What Mercurial records: the inode of /proc/self/ns/pid (printed in hex)."""
    return os.stat("/proc/self/ns/pid").st_ino


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    hg = require_tool("hg")
    subprocess.run([hg, "init", str(tmp_path / "repo")], check=True, env=HG_ENV)
    return tmp_path / "repo"


def hold_locks(children: Children, repository: Path) -> subprocess.Popen[str]:
    """`hg debuglocks` holds both locks until its stdin closes; the pipe stays open."""
    holder = children.start(
        ["hg", "debuglocks", "--set-wlock", "--set-lock"],
        stdin=subprocess.PIPE,
        cwd=repository,
        env=HG_ENV,
    )
    locks = [repository / ".hg" / "wlock", repository / ".hg" / "store" / "lock"]
    assert wait_until(lambda: all(os.path.islink(lock) for lock in locks), timeout=20)
    return holder


def test_held_locks_name_hg_then_turn_stale_when_it_is_killed(
    children: Children, repository: Path
) -> None:
    holder = hold_locks(children, repository)
    target = os.readlink(repository / ".hg" / "wlock")

    held = inspect_lock(repository)
    store = inspect_lock(repository / ".hg" / "store" / "lock")
    holder.kill()
    holder.wait(timeout=10)
    stale = inspect_lock(repository)

    assert target == f"{socket.gethostname()}/{own_pid_namespace():x}:{holder.pid}"
    assert held.format == "mercurial"
    assert held.state is State.HELD
    assert held.holder is not None and held.holder.pid == holder.pid
    assert store.state is State.HELD and store.holder is not None
    assert store.holder.pid == holder.pid
    assert stale.state is State.STALE
    assert stale.proof is not None and str(holder.pid) in stale.proof
    assert shell_argv(stale.action or "") == [
        *("hg", "--cwd", str(repository), "debuglocks"),
        *("--force-free-wlock", "--force-free-lock"),
    ]


def test_pid_reused_by_an_unrelated_process_is_never_the_holder(
    children: Children, repository: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    lock = repository / ".hg" / "wlock"
    lock.symlink_to(f"{socket.gethostname()}/{own_pid_namespace():x}:{sleeper.pid}")
    backdate(lock)  # taken an hour ago; the sleep started just now

    finding = inspect_lock(repository)

    assert finding.state is State.UNKNOWN  # wall-clock times only: no proof, never held
    assert finding.holder is None
    assert finding.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED


def test_lock_from_another_pid_namespace_is_unknown(children: Children, repository: Path) -> None:
    sleeper = children.start(["sleep", "60"])
    other_namespace = own_pid_namespace() + 1
    lock = repository / ".hg" / "wlock"
    lock.symlink_to(f"{socket.gethostname()}/{other_namespace:x}:{sleeper.pid}")

    finding = inspect_lock(repository)

    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.OTHER_PID_NAMESPACE


def test_old_style_lock_without_a_host_is_unknown(repository: Path) -> None:
    (repository / ".hg" / "wlock").symlink_to("4242")

    finding = inspect_lock(repository, "mercurial")

    assert finding.state is State.UNKNOWN
    assert "old-style" in finding.reason


def test_repository_without_locks_is_free(repository: Path) -> None:
    finding = inspect_lock(repository)

    assert finding.format == "mercurial"
    assert finding.state is State.FREE
