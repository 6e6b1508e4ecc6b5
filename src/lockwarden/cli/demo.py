"""`lockwarden demo`: a real store, a real holder, a real blocked write — and the diagnosis.

A child process takes the store lock as role `maintenance-job` and holds it for 2 s; a write
with a 400 ms lock wait is blocked; lockwarden names the holder; once the holder exits, the same
write acquires the lock at once. Everything lives in a temporary directory removed at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

from lockwarden.pipeline import inspect_path

HOLD_SECONDS = 2.0
WRITE_WAIT_MS = 400

DIAGNOSIS = (
    "nothing is broken: another process holds the store's exclusive lock, and every write "
    "waits or fails until that process lets go; retrying harder never helps"
)

_HOLDER = r"""
import json, os, sys, time
lock, hold, host = sys.argv[1], float(sys.argv[2]), sys.argv[3]
os.mkdir(lock)
record = {"pid": os.getpid(), "role": "maintenance-job", "host": host,
          "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump(record, handle)
print("ready", flush=True)
time.sleep(hold)
os.remove(os.path.join(lock, "owner.json"))
os.rmdir(lock)
"""


def try_write(store: str, wait_ms: int) -> float | None:
    """The store's writer: take the mkdir lock within wait_ms, append a record, let go.
    Returns how long the lock took in ms, or None when it was not acquired."""
    lock = os.path.join(store, "LOCK")
    started = time.monotonic()
    deadline = started + wait_ms / 1000
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
    waited = (time.monotonic() - started) * 1000
    try:
        with open(os.path.join(store, "data.log"), "a", encoding="utf-8") as handle:
            handle.write(f"{datetime.now(UTC).isoformat()} write\n")
    finally:
        os.rmdir(lock)
    return waited


def _budget() -> str:
    from lockwarden.config import DEFAULT_CRITICAL_AFTER, DEFAULT_WARN_AFTER
    from lockwarden.support.durations import format_duration

    return (
        f"a warning after {format_duration(DEFAULT_WARN_AFTER)}, "
        f"critical after {format_duration(DEFAULT_CRITICAL_AFTER)}"
    )


def run_demo(say: Callable[[str], None] = print) -> int:
    base = tempfile.mkdtemp(prefix="lockwarden-demo-")
    store = os.path.join(base, "store")
    os.mkdir(store)
    holder: subprocess.Popen[str] | None = None
    try:
        say("lockwarden demo: a real store, a real holder, a real blocked write")
        say(f"1. store at {store}")
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _HOLDER,
                os.path.join(store, "LOCK"),
                str(HOLD_SECONDS),
                socket.gethostname(),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "ready":
            say("the holder process failed to start")
            return 3
        say(
            f"2. PID {holder.pid} (maintenance-job) took the store lock and holds it "
            f"{HOLD_SECONDS:g} s"
        )
        say(f"3. write with a {WRITE_WAIT_MS} ms lock wait ...")
        if try_write(store, WRITE_WAIT_MS) is not None:
            say("   the write was not blocked; the holder let go too early")
            return 3
        finding = inspect_path(store, datetime.now(UTC)).findings[0]
        who = finding.holder.describe() if finding.holder else "a process lockwarden cannot name"
        alive = (
            ""
            if finding.holder is None
            else (", running" if finding.holder.alive else ", no longer running")
        )
        say(f"   BLOCKED: the store's lock is {finding.state.value} by {who}{alive}")
        say(f"   lockwarden says: {finding.reason}")
        say(f"   diagnosis: {DIAGNOSIS}")
        say(
            f"   a holder left running past its budget ({_budget()}) gets an alert that "
            "names it as the process to stop"
        )
        say(f"4. this holder is a short job: waiting for PID {holder.pid} to let go ...")
        started = time.monotonic()
        holder.wait(timeout=HOLD_SECONDS + 10)
        say(
            f"   it exited after {time.monotonic() - started:.1f} s; "
            f"lockwarden now says: {inspect_path(store, datetime.now(UTC)).findings[0].reason}"
        )
        waited = try_write(store, WRITE_WAIT_MS)
        if waited is None:
            say("5. the retried write was still blocked")
            return 3
        say(f"5. retried write: lock acquired after {waited:.0f} ms, record written, lock released")
        return 0
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        shutil.rmtree(base, ignore_errors=True)
        say(f"cleaned up {base}")
