"""`lockwarden hold` holds its lock while COMMAND runs, however the supervisor ends: COMMAND
holds the lock's flock too, through a change of user after which the kernel no longer sends it
the supervisor's death signal. A real `flock` blocked on the lock is told who holds it. Every
process is tracked by PID and killed at teardown."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import (
    Children,
    cli_env,
    require_tool,
    run_cli,
    start_ticks,
    wait_until,
)

NOBODY = 65534
# Each shape is `sh -c` text: every process of the tree prints `pid N` once it runs (after
# any change of user), the first one `ready` after its own. $0 and $1 are how long the work
# and its helper run, in seconds.
SHAPES = {
    "sleeps": "echo pid $$; echo ready; exec sleep $0",
    "leaves a worker": "sleep $1 & echo pid $!; echo pid $$; echo ready",
    "starts a daemon": (
        "(setsid sh -c 'echo pid $$; exec sleep \"$0\"' $1 &); echo pid $$; echo ready; "
        "exec sleep $0"
    ),
}
DEADLINE_S = 30.0


@dataclass
class Tree:
    """One hold: its lock, its supervisor, and the processes of its COMMAND."""

    name: str
    lock: Path
    fate: str
    supervisor: subprocess.Popen[str]
    members: dict[int, int | None] = field(default_factory=dict)  # PID -> start ticks

    def running(self) -> set[int]:
        """Its processes that run now (one gone before the test read its start is gone)."""
        return {
            pid for pid, ticks in self.members.items() if ticks is not None and runs(pid, ticks)
        }

    def supervisor_runs(self) -> bool:
        return runs(self.supervisor.pid, None)

    def describe(self) -> str:
        return f"{self.name} ({self.fate}): supervisor {self.supervisor.pid}, tree {self.members}"


def runs(pid: int, ticks: int | None) -> bool:
    """Whether the process runs (a zombie has let go of everything it held)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] not in ("Z", "X") and (ticks is None or int(fields[19]) == ticks)


def start_tree(children: Children, lock: Path, command: list[str], printed: int, fate: str) -> Tree:
    argv = [sys.executable, "-m", "lockwarden", "hold", str(lock), "--role", "tree", "--"]
    supervisor = children.start([*argv, *command], env=cli_env(), start_new_session=True)
    tree = Tree(lock.name, lock, fate, supervisor)
    assert supervisor.stdout is not None
    for line in lines_until_ready(supervisor.stdout.fileno(), printed):
        pid = int(line.removeprefix("pid "))
        tree.members[pid] = start_ticks(pid)
        children.track(pid)
    return tree


def lines_until_ready(stream: int, printed: int) -> list[str]:
    """The `pid N` lines of a tree, read until all of them and `ready` have come."""
    text, deadline = "", time.monotonic() + DEADLINE_S
    while not ("ready\n" in text and text.count("pid ") == printed):
        assert time.monotonic() < deadline, f"the tree did not get ready: {text!r}"
        if select.select([stream], [], [], 0.1)[0]:
            chunk = os.read(stream, 4096).decode()
            assert chunk, f"the hold ended before its tree got ready: {text!r}"
            text += chunk
    return [line for line in text.splitlines() if line.startswith("pid ")]


def apply_fate(tree: Tree) -> None:
    if tree.fate == "killed":
        tree.supervisor.send_signal(signal.SIGKILL)
    elif tree.fate == "terminated":
        tree.supervisor.send_signal(signal.SIGTERM)


# The blocked side.


def waiting_in_flock(pid: int) -> bool:
    return any(
        "lock" in (task / "wchan").read_text() for task in Path(f"/proc/{pid}/task").iterdir()
    )


def holders_for(waiter: int) -> set[int]:
    completed = run_cli("why", "--json", str(waiter))
    [process] = json.loads(completed.stdout)["processes"]
    [wait] = process["waits"]
    return {holder["pid"] for holder in wait["lock"]["holders"]}


def test_why_names_the_hold_and_then_its_command_for_a_blocked_writer(
    children: Children, tmp_path: Path
) -> None:
    """A real `flock` waiting on a held lock is told the supervisor and COMMAND hold it, and,
    once the supervisor is killed, COMMAND (under another user now) alone; it takes the lock
    only after COMMAND has exited."""
    lock = tmp_path / "LOCK"
    sh, setpriv = require_tool("sh"), require_tool("setpriv")
    drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    command = [setpriv, *drop, sh, "-c", SHAPES["sleeps"], "60", "0"]
    tree = start_tree(children, lock, command, 1, "killed")
    [command_pid] = tree.members
    waiter = children.start([require_tool("flock"), str(lock), "true"])
    assert wait_until(lambda: waiting_in_flock(waiter.pid), timeout=10)

    held_by_both = holders_for(waiter.pid)
    apply_fate(tree)
    tree.supervisor.wait(timeout=5)
    held_by_command = holders_for(waiter.pid)
    still_waiting = waiter.poll() is None
    os.kill(command_pid, signal.SIGKILL)

    assert held_by_both == {tree.supervisor.pid, command_pid}
    assert held_by_command == {command_pid}
    assert still_waiting
    assert waiter.wait(timeout=10) == 0
