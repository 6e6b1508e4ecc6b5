"""Helpers for the format tests: inspect one real lock in-process, and make records by hand.

The records made here are written exactly as the real program writes them (the tests that use
the real program check that), to stage what the program cannot be made to do on demand: a PID
reused by an unrelated process, another host, another boot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from lockwarden.config import LockConfig
from lockwarden.model import Finding
from lockwarden.pipeline import inspect_locks
from lockwarden.procfs.reader import HostReader, wall_clock

AN_HOUR_AGO = 3600


def inspect_lock(
    path: str | Path, lock_format: str = "auto", host_aliases: tuple[str, ...] = ()
) -> Finding:
    lock = LockConfig(
        name="under-test",
        path=str(path),
        format=lock_format,
        warn_after=900.0,
        critical_after=3600.0,
        host_aliases=host_aliases,
    )
    return inspect_locks([lock], HostReader(wall_clock), datetime.now(UTC))[0]


def backdate(path: str | Path, seconds: float = AN_HOUR_AGO) -> None:
    """Make a lock look taken `seconds` ago (its own mtime; a symlink is not followed)."""
    moment = time.time() - seconds
    os.utime(path, (moment, moment), follow_symlinks=False)


def kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL a holder started with start_new_session=True and everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
