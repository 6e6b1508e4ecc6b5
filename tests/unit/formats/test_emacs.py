"""emacs: a real `emacs --batch` that modified a file it visits, holding `.#FILE`."""

from __future__ import annotations

import getpass
import os
import random
import socket
import subprocess
import time
from functools import partial
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


def test_a_recorded_boot_time_is_never_proof_the_pid_decides(
    children: Children, tmp_path: Path
) -> None:
    """The boot time in the record is Emacs's estimate, moved by a stepped clock too: a lock
    whose PID runs is held whatever boot it records, or, made before this boot, probably a
    reused PID (`unknown`, never stale); a lock whose PID is gone is stale whatever it records."""
    sleeper = children.start(["sleep", "60"])
    here = f"{getpass.getuser()}@{socket.gethostname()}"
    older_than_boot = time.time() - this_boot() + 3600  # seconds: made an hour before boot
    cases = {
        "this-boot": (sleeper.pid, this_boot(), None, State.HELD),
        "misdated": (sleeper.pid, this_boot() - 86400, None, State.HELD),
        "earlier": (sleeper.pid, this_boot() - 86400, older_than_boot, State.UNKNOWN),
        "gone": (dead_pid(), this_boot(), None, State.STALE),
        "gone-earlier": (dead_pid(), this_boot() - 86400, older_than_boot, State.STALE),
    }
    for name, (pid, boot, age, _) in cases.items():
        lock = tmp_path / f".#{name}"
        lock.symlink_to(f"{here}.{pid}:{boot}")
        if age is not None:
            backdate(lock, age)

    found = {name: inspect_lock(tmp_path / f".#{name}") for name in cases}

    assert {name: finding.state for name, finding in found.items()} == {
        name: state for name, (_, _, _, state) in cases.items()
    }
    assert found["misdated"].holder is not None and found["misdated"].holder.pid == sleeper.pid
    assert "reused the PID" in found["earlier"].reason


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_live_emacs_whose_boot_estimate_is_off_holds_its_lock(
    children: Children, tmp_path: Path
) -> None:
    """Emacs 28 estimates the boot time from the mtime of /var/run/random-seed when it exists,
    so a touched file puts another "boot" in every lock it makes. The real Emacs, given a
    random-seed of a random age in a /run of its own (a mount namespace: the host's /run is
    left alone), holds its lock while it runs; its lock is stale only once it is gone."""
    emacs, unshare = require_tool("emacs"), require_tool("unshare")
    seed = random.randrange(1 << 32)
    offsets = random.Random(seed).sample([-86400 * 3, -7200, -600, 300, 5400], 3)
    for offset in offsets:
        edited = tmp_path / f"notes{offset}.txt"
        edited.write_text("hello\n")
        program = f'(progn (find-file "{edited}") (insert "x") (sleep-for 60))'
        private_run = (
            'mount -t tmpfs run /run && touch -d @$1 /run/random-seed && shift && exec "$@"'
        )
        holder = children.start(
            [unshare, "--mount", "sh", "-c", private_run, "sh",
             str(this_boot() + offset), emacs, "-Q", "--batch", "--eval", program],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(tmp_path)},
        )  # fmt: skip
        lock = tmp_path / f".#{edited.name}"
        assert wait_until(partial(os.path.islink, lock), timeout=20), f"seed {seed}"
        stamp = os.readlink(lock).rpartition(":")[2]
        assert abs(int(stamp) - this_boot() - offset) < 5, f"seed {seed}: Emacs wrote {stamp}"
        held = inspect_lock(lock)
        holder.kill()
        holder.wait(timeout=10)
        gone = inspect_lock(lock)
        context = f"seed {seed}, boot estimate off by {offset}s"
        assert held.state is State.HELD, f"{context}: {held.reason}"
        assert held.holder is not None and held.holder.pid == holder.pid, context
        assert gone.state is State.STALE, f"{context}: {gone.reason}"
        assert gone.proof is not None and f"PID {holder.pid}" in gone.proof, context


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
