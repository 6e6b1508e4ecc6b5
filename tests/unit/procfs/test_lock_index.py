"""The lazy /proc/locks index answers exactly what parsing every line answers."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from lockwarden.procfs.snapshot import Snapshot, index_proc_locks, parse_proc_locks

TEXT = (
    "1: FLOCK  ADVISORY  WRITE 1993 fe:00:2146390 0 EOF\n"
    "1: -> FLOCK  ADVISORY  WRITE 1997 fe:00:2146390 0 EOF\n"
    "1: -> -> FLOCK  ADVISORY  WRITE 1998 fe:00:2146390 0 EOF\n"
    "2: OFDLCK ADVISORY  READ  -1 08:01:77 0 99\n"
    "3: POSIX  ADVISORY  WRITE 12 00:2a:5 1073741825 1073741825\n"
    "4: POSIX  ADVISORY  WRITE 13 08:01:5 0 EOF\n"  # same inode number, another device
    "5: LEASE  ACTIVE    READ  14 fe:00:9 0 EOF\n"
    "garbage line\n"
    "\n"
)


def snapshot_of(text: str) -> Snapshot:
    return Snapshot(
        boot_id="b",
        hostname="h",
        captured_at=datetime.now(UTC),
        uptime_s=1.0,
        clock_ticks=100,
        pid_max=4194304,
        pid_namespace=None,
        nested_pid_namespace=False,
        lock_lines=index_proc_locks(text),
    )


def test_every_key_gets_what_the_full_parse_gives() -> None:
    full = parse_proc_locks(TEXT)
    snapshot = snapshot_of(TEXT)
    assert len(full) == 5
    for key, locks in full.items():
        assert snapshot.kernel_locks(key) == locks
    assert snapshot.locks == full


def test_same_inode_on_another_device_is_kept_apart() -> None:
    snapshot = snapshot_of(TEXT)
    (first,) = snapshot.kernel_locks((os.makedev(0, 0x2A), 5))
    (second,) = snapshot.kernel_locks((os.makedev(8, 1), 5))
    assert (first.pid, second.pid) == (12, 13)


def test_an_inode_nobody_locks_has_no_entries() -> None:
    assert snapshot_of(TEXT).kernel_locks((os.makedev(0xFE, 0), 1)) == []
    assert snapshot_of("").kernel_locks((os.makedev(0xFE, 0), 2146390)) == []
