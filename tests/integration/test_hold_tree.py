"""`lockwarden hold` holds its lock while COMMAND, or anything COMMAND started, runs: however
the supervisor ends, the lock is never stale (nor free, nor removed) before all of them are
gone.

A randomized differential. Each seed starts a few holds side by side, each a COMMAND of one
shape (it sleeps; it leaves a worker running and exits; it starts a daemon in a session of its
own) run plainly, under another user (`setpriv`) or through a setgid copy of the shell, the
last two being changes of credentials after which the kernel no longer sends COMMAND the
supervisor's death signal. Each supervisor is then killed with SIGKILL, sent SIGTERM, or left
alone. Every combination is some seed's; the seed orders them and draws how long each process
works. Every process of each tree says its PID, so the test knows which still run; the real
`--once`, with `remove_stale = true` and its shortest thresholds, judges the locks again and
again meanwhile. While any process of a tree runs, its lock must be held by a process of that
tree (or its supervisor) that ran when the run began, and stay where it is; once the tree and
its supervisor are gone, a killed supervisor's lock is stale and then removed, any other's is
gone. Every process is tracked by PID and killed at teardown.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    Children,
    cli_env,
    require_tool,
    run_cli,
    run_json,
    start_ticks,
    wait_until,
    write_config,
)

NOBODY = 65534
SEEDS = list(range(5))
PRIVILEGES = ("plain", "setpriv", "setgid")
FATES = ("killed", "terminated", "left alone")
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
PIDS_PRINTED = {"sleeps": 1, "leaves a worker": 2, "starts a daemon": 2}
# Every case, dealt among the seeds: each seed runs its share side by side, with its own
# random order and timings.
CASES = list(itertools.product(PRIVILEGES, SHAPES, FATES))
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


def setgid_shell(directory: Path) -> str:
    """A copy of the shell, setgid to nobody's group: running it changes the credentials."""
    reason = None
    if os.geteuid() != 0:
        reason = "making a setgid program of another group needs root"
    elif os.statvfs(directory).f_flag & os.ST_NOSUID:
        reason = f"{directory} is mounted nosuid: a setgid program there changes nothing"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    copy = directory / "sgid-sh"
    shutil.copy(require_tool("sh"), copy)
    os.chown(copy, 0, NOBODY)
    os.chmod(copy, 0o2755)
    return str(copy)


def command_of(privilege: str, shape: str, rng: random.Random, sgid_sh: str) -> list[str]:
    work, helper = (f"{rng.uniform(2.0, 4.0):.1f}" for _ in range(2))
    script = ["-c", SHAPES[shape], work, helper]
    if privilege == "setpriv":
        setpriv = require_tool("setpriv")
        drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return [setpriv, *drop, require_tool("sh"), *script]
    if privilege == "setgid":
        return [sgid_sh, *script]
    return [require_tool("sh"), *script]


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


def config_for(trees: Iterable[Tree], directory: Path) -> str:
    locks = "".join(
        f'[[lock]]\nname = "{tree.name}"\npath = "{tree.lock}"\nformat = "owner-record"\n'
        'stale_after = "1s"\nremove_stale = true\nstale_confirm = "1s"\n'
        for tree in trees
    )
    state = directory / "state" / "state.jsonl"
    return write_config(directory / "config.toml", f'[state]\npath = "{state}"\n{locks}')


def check_while_running(
    tree: Tree, finding: dict[str, Any], ran: set[int], lock_there: bool
) -> None:
    """A tree that ran throughout the run: its lock held by one of the processes that ran
    when the run began (the supervisor among them, if it did), and left in place (looked at
    before the tree was: a tree running after that look ran during it)."""
    assert finding["state"] in ("held", "held_too_long"), (tree.describe(), finding)
    named = finding["holders"][0]["pid"]
    assert named in ran, f"{tree.describe()}: named PID {named}, running {ran}"
    assert finding.get("removal") is None, tree.describe()
    assert lock_there, f"{tree.describe()}: the lock was removed while its tree ran"


def check_after(tree: Tree, finding: dict[str, Any], supervisor_ran: bool) -> None:
    """A tree gone before the run: its lock stale or free, or still held by its supervisor
    on its way to removing it."""
    if finding["state"] in ("stale", "free"):
        return
    assert supervisor_ran and finding["state"] in ("held", "held_too_long"), (
        tree.describe(),
        finding,
    )
    assert finding["holders"][0]["pid"] == tree.supervisor.pid, tree.describe()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_hold_is_held_while_any_process_of_its_command_runs(
    seed: int, children: Children, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    print(f"seed {seed}")
    sgid_sh = setgid_shell(tmp_path)
    cases = CASES[seed :: len(SEEDS)]
    rng.shuffle(cases)
    trees = []
    for index, (privilege, shape, fate) in enumerate(cases):
        print(f"lock{index}: {privilege}, {shape}, supervisor {fate}")
        command = command_of(privilege, shape, rng, sgid_sh)
        tree = start_tree(children, tmp_path / f"lock{index}", command, PIDS_PRINTED[shape], fate)
        trees.append(tree)
    for tree in trees:
        apply_fate(tree)
    config = config_for(trees, tmp_path)

    deadline = time.monotonic() + DEADLINE_S
    while any(tree.running() or tree.supervisor_runs() for tree in trees):
        assert time.monotonic() < deadline, [tree.describe() for tree in trees]
        before = {tree.name: tree.running() for tree in trees}
        supervisors = {tree.name: tree.supervisor_runs() for tree in trees}
        _code, document = run_json("--once", "--config", config)
        findings = {finding["name"]: finding for finding in document["locks"]}
        for tree in trees:
            finding, ran = findings[tree.name], before[tree.name]
            # Looked at first: a tree may end, and its lock be removed, between two looks.
            lock_there = tree.lock.is_dir()
            if tree.running():  # then it ran throughout the run, and at that look
                supervisor = {tree.supervisor.pid} if supervisors[tree.name] else set()
                check_while_running(tree, finding, ran | supervisor, lock_there)
            elif not ran:
                check_after(tree, finding, supervisors[tree.name])

    for tree in trees:
        tree.supervisor.wait(timeout=5)
        if tree.fate == "killed":  # its lock outlived every process: stale, with proof
            assert wait_until(lambda tree=tree: removed(tree, config), timeout=15), tree.describe()
        else:
            assert not tree.lock.exists(), tree.describe()


def removed(tree: Tree, config: str) -> bool:
    """Run once more: the stale lock, seen stale twice a second apart, is removed."""
    _code, document = run_json("--once", "--config", config)
    [finding] = [finding for finding in document["locks"] if finding["name"] == tree.name]
    assert finding["state"] in ("stale", "free"), json.dumps(finding, indent=1)
    time.sleep(0.5)
    return not tree.lock.exists()


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
