"""lockwarden in a PID namespace of its own that reads the host's /proc (one entered without
mounting a /proc: `unshare --pid --fork`, `nsenter --pid`), with holders on the host.

Such a /proc is the host's view: its /proc/locks lists every flock(2), wherever its taker runs,
and its descriptors are the host's. So a flock held outside the namespace is named there, and a
lock nobody holds is free; a lock that may be a flock is `unknown` only where a flock taken
outside could not show (a /proc of the namespace's own, tests/integration/
test_pid_namespace_outside.py). It once read every free `kernel` and key=value lock `unknown`
(`other_pid_namespace`) there, a false alarm, though nothing was hidden from it.

A differential: seeded flock holders (flock(1) and Python's fcntl.flock, as py-filelock's
FileLock takes it) on the host at random, lockwarden judging them from inside. It needs the
host's /proc, so it runs in the host part of the suite (scripts/test-parts.sh).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, cli_env, pid_namespace_command, require_tool

SEEDS = range(4)
LOCKS_PER_SEED = 6

FLOCK_HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "r")
fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


def hosts_proc() -> bool:
    """Whether this test reads the host's /proc: kthreadd (PID 2) is a kernel thread only there."""
    try:
        stat = Path("/proc/2/stat").read_text()
    except OSError:
        return False
    return bool(int(stat[stat.rfind(")") + 2 :].split()[6]) & 0x00200000)


def namespace_on_the_hosts_proc() -> list[str]:
    """`unshare` for a PID namespace of its own that keeps reading this (the host's) /proc."""
    if not hosts_proc():
        reason = "this test does not run on the host's /proc (run it in the host part)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return [part for part in pid_namespace_command() if part != "--mount-proc"]


def hold(children: Children, path: Path, chooser: random.Random) -> int:
    """A real flock holder on the host, its lock taken before this returns: its PID."""
    if chooser.random() < 0.5:
        return children.python(FLOCK_HOLDER, str(path)).pid
    flock = require_tool("flock")
    # -o: the command runs without the lock's descriptor, so flock(1) alone holds it
    holder = children.start([flock, "-o", str(path), "sh", "-c", "echo ready; exec sleep 120"])
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder.pid


def arrange(children: Children, directory: Path, seed: int) -> tuple[str, dict[str, int | None]]:
    """The config's locks (`kernel` files, key=value records, and files left to `auto`), each
    free or held at random: the PID that holds each."""
    chooser = random.Random(seed)
    tables, holders = [], {}
    for number in range(LOCKS_PER_SEED):
        name = f"lock-{number}"
        lock_format = chooser.choice(["kernel", "owner-record", "auto"])
        path = directory / f"{name}.lock"
        record = "pid=4242\nacquired_at=2026-01-01T00:00:00Z\n"
        path.write_text(record if lock_format == "owner-record" else "")
        holders[name] = hold(children, path, chooser) if chooser.random() < 0.5 else None
        tables.append(f'\n[[lock]]\nname = "{name}"\npath = "{path}"\nformat = "{lock_format}"\n')
    (directory / "state").mkdir(mode=0o700)
    config = directory / "lockwarden.toml"
    config.write_text(
        f'[state]\npath = "{directory / "state" / "state.jsonl"}"\n\n[host]\n'
        f"blocked_writers = false\n{''.join(tables)}"
    )
    config.chmod(0o600)
    return str(config), holders


def once_inside(children: Children, config: str) -> dict[str, dict[str, Any]]:
    """`lockwarden --once --json` as PID 1 of a new PID namespace on the host's /proc, not
    declared to hold every taker."""
    env = cli_env()
    env.pop("LOCKWARDEN_PID_NAMESPACE", None)
    command = [sys.executable, "-m", "lockwarden", "--once", "--config", config, "--json"]
    inside = children.start([*namespace_on_the_hosts_proc(), *command], env=env)
    try:
        output, errors = inside.communicate(timeout=120)
    finally:
        inside.kill()
    assert output.strip(), errors
    return {lock["name"]: lock for lock in json.loads(output)["locks"]}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_hosts_proc_read_from_a_namespace_names_flock_holders_and_reads_free_locks_free(
    seed: int, tmp_path: Path, children: Children
) -> None:
    config, holders = arrange(children, tmp_path, seed)
    findings = once_inside(children, config)
    said = {
        name: (found["state"], [holder["pid"] for holder in found["holders"]])
        for name, found in findings.items()
    }
    wanted = {
        name: ("held", [pid]) if pid is not None else ("free", []) for name, pid in holders.items()
    }
    assert said == wanted, (seed, {name: findings[name]["reason"] for name in holders})
