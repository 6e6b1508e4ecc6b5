"""Two machines of one short name in different domains (`ws.dc1.example.org`,
`ws.dc2.example.org`) sharing a directory (an NFS home): a lock one takes is the other's to
leave alone.

Emacs and Chromium record the host name (`USER@HOST.PID`, `HOST-PID`) and nothing that tells
one machine from another. lockwarden once took two qualified names for one host whenever their
first labels agreed, so the other machine's live lock read `stale` here (with the command that
removes it) when no process here had its PID, and `held` by an innocent one that had. Two
qualified names are now one host only when they are equal; a short name still matches the
first label of a qualified one (borg records the FQDN of a host whose nodename is short).

A differential: each "machine" is a UTS and PID namespace of its own (its own host name and
processes; a PID of one means nothing in the other), sharing the test's directory. A real Emacs
or Chromium holds a lock on one, at a random PID; lockwarden inspects it from the other, where a
decoy may run with that PID. Both names are qualified, with one first label, and differ.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC, Children, pid_namespace_command, require_tool, wait_until

SEEDS = range(4)
DOMAINS = ("dc1.example.org", "dc2.example.org", "example.net", "lab", "corp.example.org")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# A machine: its host name, and a PID for its holder (the next one after ns_last_pid).
MACHINE = 'hostname "$0"; echo $(( $1 - 1 )) > /proc/sys/kernel/ns_last_pid; '
HOLDER = MACHINE + '"${@:2}" & wait'
LOOKER = MACHINE + 'if [ "$2" = decoy ]; then sleep 600 & fi; "${@:3}"'


def machine(*argv: str) -> list[str]:
    """A UTS and PID namespace of its own, with its own /proc; killed with its unshare."""
    unshare = pid_namespace_command()
    return [unshare[0], "--uts", *unshare[1:], "bash", "-c", *argv]


def hold(children: Children, directory: Path, host: str, pid: int, program: str) -> Path:
    """A real holder on the machine named `host`, as PID `pid` there: its lock's path."""
    if program == "emacs":
        edited = directory / "notes.txt"
        edited.write_text("hello\n")
        lisp = f'(progn (find-file "{edited}") (insert "x") (sleep-for 600))'
        argv = [require_tool("emacs"), "-Q", "--batch", "--eval", lisp]
        lock = directory / ".#notes.txt"
    else:
        profile = directory / "profile"
        argv = [require_tool("chromium"), *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
        lock = profile / "SingletonLock"
    env = {**os.environ, "HOME": str(directory)}
    children.start(machine(HOLDER, host, str(pid), *argv), env=env, stdin=subprocess.DEVNULL)
    assert wait_until(lambda: os.path.islink(lock), timeout=60), f"{program} took no lock"
    return lock


def inspect_from(children: Children, host: str, pid: int, decoy: bool, lock: Path) -> dict:  # type: ignore[type-arg]
    """`lockwarden inspect --json` on the machine named `host`, with a decoy there as `pid`."""
    env = {**os.environ, "PYTHONPATH": SRC, "LOCKWARDEN_PID_NAMESPACE": "complete"}
    command = [sys.executable, "-m", "lockwarden", "inspect", str(lock), "--json"]
    mode = "decoy" if decoy else "none"
    looker = children.start(machine(LOOKER, host, str(pid), mode, *command), env=env)
    output, errors = looker.communicate(timeout=120)
    assert output.strip(), errors
    return json.loads(output)["locks"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_lock_of_another_machine_with_the_same_short_name_is_never_stale_nor_held_here(
    seed: int, tmp_path: Path, children: Children
) -> None:
    chooser = random.Random(seed)
    label = chooser.choice(["ws", "build", "db-1", "node7"])
    theirs, ours = (f"{label}.{domain}" for domain in chooser.sample(DOMAINS, 2))
    pid = chooser.randrange(300, 20000)
    program = chooser.choice(["emacs", "chromium"])
    decoy = chooser.random() < 0.5

    lock = hold(children, tmp_path, theirs, pid, program)
    finding = inspect_from(children, ours, pid, decoy, lock)

    context = (seed, program, theirs, ours, pid, decoy, finding["state"], finding["reason"])
    assert str(pid) in os.readlink(lock), context
    assert finding["state"] == "unknown", context
    assert finding["unknown_cause"] == "other_host", context
    assert finding["holders"] == [] and finding["action"] is None, context
