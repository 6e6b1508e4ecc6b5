"""Helpers for the format tests: inspect one lock in-process, exactly as a run does."""
# A module, not a conftest.py: a second conftest would shadow tests/conftest.py's helpers.

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import Children, wait_until
from lockwarden.config import LockConfig
from lockwarden.model import Finding
from lockwarden.pipeline import inspect_locks
from lockwarden.procfs.reader import HostReader, wall_clock


def inspect(path: str, lock_format: str = "auto", later: float = 0.0, **settings: float) -> Finding:
    """The finding a run would report for this lock now (fresh snapshot of /proc), or `later`
    seconds from now, as a later run would see the same processes and files."""
    lock = LockConfig(
        name="under-test",
        path=path,
        format=lock_format,
        warn_after=settings.get("warn_after", 900.0),
        critical_after=settings.get("critical_after", 3600.0),
        stale_after=settings.get("stale_after", 600.0),
    )
    now = datetime.now(UTC) + timedelta(seconds=later)
    return inspect_locks([lock], HostReader(wall_clock), now)[0]


def start_sqlite_shell(
    children: Children, database: str, *statements: str
) -> subprocess.Popen[str]:
    """A real `sqlite3` shell fed through a pipe that stays open: it runs `statements`, says
    ready, and then waits for more input forever (an abandoned interactive shell)."""
    shell = children.start(["sqlite3", database], stdin=subprocess.PIPE)
    assert shell.stdin is not None and shell.stdout is not None
    shell.stdin.write("".join(f"{statement}\n" for statement in statements) + ".print ready\n")
    shell.stdin.flush()
    for _ in range(100):  # the statements' own output comes first
        line = shell.stdout.readline()
        if line.strip() == "ready" or not line:
            break
    assert line.strip() == "ready", f"sqlite3 {database} did not get ready"
    return shell


def sqlite_lock_held(database: str, pid: int, mode: str, start: int) -> bool:
    """The test's own view, from /proc/locks: `pid` holds a granted POSIX lock of `mode`
    starting at byte `start` of the database (1073741824: SQLite's PENDING byte)."""
    inode = os.stat(database).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 8 or not fields[5].endswith(f":{inode}"):
            continue
        if fields[1] == "POSIX" and fields[3:5] == [mode, str(pid)] and fields[6] == str(start):
            return True
    return False


def start_committing_writer(children: Children, database: str) -> subprocess.Popen[str]:
    """A real sqlite3 shell whose COMMIT waits, retrying in its busy handler, for the readers
    of a rollback journal to let go: it holds PENDING and RESERVED meanwhile."""
    writer = start_sqlite_shell(children, database, ".timeout 600000")
    assert writer.stdin is not None
    writer.stdin.write("BEGIN; INSERT INTO t VALUES (2); COMMIT;\n")
    writer.stdin.flush()

    def holds_pending() -> bool:
        return sqlite_lock_held(database, writer.pid, "WRITE", 1073741824)

    assert wait_until(holds_pending, timeout=10), "the writer took no PENDING lock"
    return writer


def unrelated_process(children: Children) -> int:
    """A live process that has nothing to do with any lock: the "reused PID" of a record."""
    return children.start(["sleep", "120"]).pid
