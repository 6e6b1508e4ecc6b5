"""A flock whose taker is gone, held by the child it started: the holder is the child, judged
in the host's PID namespace, where /proc/locks still prints the dead taker (docs/design.md,
"Where /proc/locks leaves locks out"). This file runs in the test parts' host part; the Debian
pin runs take it in a namespace, where the kernel hides that line.

The other holder tests (tests/integration/test_holders.py) run in a PID namespace of their own:
there no other part's nested namespace can hold a process with a record's PID number, which
makes a record's PID ambiguous (unknown) on purpose.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from conftest import Children, proc_locks_pid, require_tool, run_json, wait_until, write_config


def store_config(tmp_path: Path, lock: Path) -> str:
    return write_config(
        tmp_path / "config.toml",
        f"""
        [[lock]]
        name = "wa-store"
        path = "{lock}"
        format = "kernel"
        """,
    )


def test_flock_holder_is_the_child_not_the_dead_parent(tmp_path: Path, children: Children) -> None:
    flock = require_tool("flock")
    lock = tmp_path / "store.lock"
    lock.touch()
    parent = children.start([flock, "-x", str(lock), "sleep", "60"])
    assert wait_until(lambda: _sleep_child_of(parent.pid) is not None)
    child_pid = _sleep_child_of(parent.pid)
    assert child_pid is not None
    children.track(child_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    _code, document = run_json("--once", "--config", store_config(tmp_path, lock))
    [finding] = document["locks"]
    assert finding["state"] == "held"
    assert finding["holders"][0]["pid"] == child_pid
    assert finding["holders"][0]["cmdline"] == ["sleep", "60"]
    assert finding["action"] is None  # held within its budget: no action, no stale PID
    # What a reader of /proc/locks is told instead: in the host's PID namespace the kernel
    # still prints the dead parent; in a PID namespace of its own (a container, or the Debian
    # pin runs) it hides the line, since the dead parent has no PID there, and the lock reads
    # free.
    kernel_says = proc_locks_pid(lock)
    assert kernel_says == (parent.pid if _in_the_initial_pid_namespace() else None), kernel_says


def _sleep_child_of(parent: int) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[1]) == parent and "(sleep)" in stat:
                return int(entry)
    return None


def _in_the_initial_pid_namespace() -> bool:
    """The initial PID namespace has a fixed inode number (PROC_PID_INIT_INO, 0xEFFFFFFC)."""
    return os.stat("/proc/self/ns/pid").st_ino == 0xEFFFFFFC
