"""The one place tests build model objects: each factory has complete, plausible defaults and
takes any field as a keyword, so a test names only what it is about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lockwarden.check.identify import Evidence
from lockwarden.model import Finding, Holder, InodeKey, Process, Severity, State
from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.snapshot import Snapshot

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BOOTED = NOW - timedelta(days=1)


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
