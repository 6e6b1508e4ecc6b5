"""emacs: a real `emacs --batch` that modified a file it visits, holding `.#FILE`."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from pathlib import Path

from conftest import Children, require_tool, wait_until
from lockcheck import backdate, inspect_lock
from lockwarden.model import State, UnknownCause


def edit_in_emacs(children: Children, edited: Path) -> subprocess.Popen[str]:
    emacs = require_tool("emacs")
    program = f'(progn (find-file "{edited}") (insert "x") (sleep-for 60))'
    holder = children.start(
        [emacs, "-Q", "--batch", "--eval", program],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(edited.parent)},
    )
    lock = edited.parent / f".#{edited.name}"
    assert wait_until(lambda: os.path.islink(lock), timeout=20)
    return holder


def this_boot() -> int:
    with open("/proc/uptime") as uptime:
        return int(time.time() - float(uptime.read().split()[0]))


def test_emacs_lock_names_emacs_then_turns_stale_when_it_is_killed(
    children: Children, tmp_path: Path
) -> None:
    edited = tmp_path / "notes.txt"
    edited.write_text("hello\n")
    holder = edit_in_emacs(children, edited)
    lock = tmp_path / ".#notes.txt"

    held = inspect_lock(lock)
    by_file = inspect_lock(edited, "emacs")
    holder.kill()
    holder.wait(timeout=10)
    stale = inspect_lock(lock)

    assert os.readlink(lock).endswith(f".{holder.pid}") or f".{holder.pid}:" in os.readlink(lock)
    assert held.format == "emacs"
    assert held.state is State.HELD
    assert held.holder is not None and held.holder.pid == holder.pid
    assert by_file.path == str(lock) and by_file.state is State.HELD
    assert stale.state is State.STALE
    assert stale.proof is not None and str(holder.pid) in stale.proof


def test_pid_reused_by_an_unrelated_process_is_never_the_holder(
    children: Children, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    lock = tmp_path / ".#notes.txt"
    lock.symlink_to(f"{getpass.getuser()}@{socket.gethostname()}.{sleeper.pid}")
    backdate(lock)

    finding = inspect_lock(lock)

    assert finding.state is State.UNKNOWN  # wall-clock times only: no proof, never held
    assert finding.holder is None


def test_recorded_boot_time_decides_this_boot_or_another(
    children: Children, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    owner = f"{getpass.getuser()}@{socket.gethostname()}.{sleeper.pid}"
    this = tmp_path / ".#this-boot"
    this.symlink_to(f"{owner}:{this_boot()}")
    earlier = tmp_path / ".#earlier-boot"
    earlier.symlink_to(f"{owner}:{this_boot() - 86400}")

    same_boot = inspect_lock(this)
    other_boot = inspect_lock(earlier)

    assert same_boot.state is State.HELD
    assert same_boot.holder is not None and same_boot.holder.pid == sleeper.pid
    assert other_boot.state is State.STALE
    assert other_boot.proof is not None and "another boot" in other_boot.proof


def test_another_host_is_unknown(tmp_path: Path) -> None:
    lock = tmp_path / ".#notes.txt"
    lock.symlink_to("alice@laptop.example.org.4242:1700000000")

    finding = inspect_lock(lock)

    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.OTHER_HOST


def test_only_a_regular_file_with_emacs_text_is_taken_for_an_emacs_lock(tmp_path: Path) -> None:
    """systemd-nspawn names its image locks `.#root.lck` too (an empty file it holds with an OFD
    lock): discover and `auto` once called it an Emacs lock. Emacs's own regular-file lock
    (where symlinks are unsupported) holds its USER@HOST.PID[:BOOT] text."""
    from lockwarden.formats.emacs import EmacsLock

    image_lock, fallback, link = tmp_path / ".#root.lck", tmp_path / ".#notes", tmp_path / ".#a"
    image_lock.write_text("")
    fallback.write_text("me@host.1234:1700000000")
    os.symlink("me@host.99", link)
    detect = EmacsLock().detect
    assert [detect(str(path), os.lstat(path)) for path in (image_lock, fallback, link)] == [
        False,
        True,
        True,
    ]
