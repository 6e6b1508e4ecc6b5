"""The one place tests build model objects: each factory has complete, plausible defaults and
takes any field as a keyword, so a test names only what it is about."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lockwarden.check.classify import Policy
from lockwarden.check.identify import Evidence
from lockwarden.model import (
    Claim,
    Finding,
    Holder,
    InodeKey,
    KernelLock,
    Process,
    Severity,
    State,
    Waiter,
)
from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.snapshot import Snapshot

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BOOTED = NOW - timedelta(days=1)
KEY: InodeKey = (2049, 131)
"""(st_dev, st_ino) of the lock file the factories' claim and kernel lock are about."""


def make_process(**fields: Any) -> Process:
    """A live root process started two hours ago, outside any unit."""
    base = Process(
        pid=4242,
        start_ticks=100,
        state="S",
        threads=1,
        uid=0,
        user="root",
        cmdline=("tool",),
        name="tool",
        unit=None,
        user_unit=False,
        pid_namespace=1,
        started_at=NOW - timedelta(hours=2),
    )
    return replace(base, **fields)


def make_evidence(**fields: Any) -> Evidence:
    """What the snapshot says about a lock nobody holds, on a host booted a day ago."""
    base = Evidence(
        boot_id="boot",
        hostname="here",
        booted_at=BOOTED,
        captured_at=NOW,
        pid_namespace=1,
        nested_pid_namespace=False,
        granted=(),
        kernel_holders=(),
        waiters=(),
        openers=(),
        record_process=None,
        unreadable_pids=0,
    )
    return replace(base, **fields)


def make_holder(**fields: Any) -> Holder:
    base = Holder(pid=4242, alive=True, name="tool", started_at=NOW - timedelta(hours=2))
    return replace(base, **fields)


def make_claim(**fields: Any) -> Claim:
    """What an owner-record format reads of a present mkdir lock at /srv/store/LOCK: the
    owner.json inside names make_process()'s PID on this host ("here"), a maintenance job that
    took the lock when it started two hours ago."""
    base = Claim(
        format="owner-record",
        path="/srv/store/LOCK",
        present=True,
        existence_is_lock=True,
        keys=(KEY,),
        pid=4242,
        role="maintenance-job",
        host="here",
        started_at=NOW - timedelta(hours=2),
        created_at=NOW - timedelta(hours=2),
        record_path="/srv/store/LOCK/owner.json",
        remove_path="/srv/store/LOCK",
        owner_uid=0,
    )
    return replace(base, **fields)


def make_waiter(**fields: Any) -> Waiter:
    """A writer blocked for its flock on the factories' lock file, started a minute ago."""
    base = Waiter(
        pid=5151,
        cmdline=("node", "write.js"),
        name="node",
        user="root",
        started_at=NOW - timedelta(minutes=1),
        lock_kind="FLOCK WRITE",
    )
    return replace(base, **fields)


def make_policy(**fields: Any) -> Policy:
    """classify's policy as a lock's defaults give it: warn at 15 minutes, page at an hour."""
    base = Policy(warn_after=900.0, critical_after=3600.0, stale_after=600.0)
    return replace(base, **fields)


def make_kernel_lock(**fields: Any) -> KernelLock:
    """One /proc/locks line: make_process()'s exclusive flock on the whole lock file."""
    base = KernelLock(
        number=1, kind="FLOCK", mode="WRITE", pid=4242, key=KEY, start=0, end=None, waiting=False
    )
    return base._replace(**fields)


def make_finding(**fields: Any) -> Finding:
    """A free lock at /srv/store/LOCK read by the kernel format."""
    base = Finding(
        name="store",
        path="/srv/store/LOCK",
        format="kernel",
        state=State.FREE,
        severity=Severity.OK,
        reason="free",
    )
    return replace(base, **fields)


def make_snapshot(**fields: Any) -> Snapshot:
    """A host booted a day ago, seen at NOW, with no lock, descriptor or process captured."""
    base = Snapshot(
        boot_id="boot",
        hostname="here",
        captured_at=NOW,
        uptime_s=86400.0,
        clock_ticks=100,
        pid_max=4194304,
        pid_namespace=1,
        nested_pid_namespace=False,
    )
    return replace(base, **fields)


def capture_host(pids: tuple[int, ...] = (), scan_keys: tuple[InodeKey, ...] = ()) -> Snapshot:
    """A real capture of this host, for the processes and inodes a test asks about."""
    request = Request(pids=pids, scan_keys=frozenset(scan_keys))
    return HostReader(wall_clock).capture(request)


class CaptureAfter(HostReader):
    """The real host reader; before each capture, the next of `between` happens (a holder
    letting go, dying, handing over: what a run may meet between reading a lock's claim and
    capturing the host). `captures` counts the captures."""

    def __init__(self, *between: Callable[[], None]) -> None:
        super().__init__(wall_clock)
        self.between = list(between)
        self.captures = 0

    def capture(self, request: Request) -> Snapshot:
        self.captures += 1
        if self.between:
            self.between.pop(0)()
        return super().capture(request)
