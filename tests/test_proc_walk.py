"""Whole-host walks of /proc (the descriptor scan, the nested PID namespace scan) are shared
by two threads on a host with many processes. Splitting must change nothing: the same
descriptors, in the same order, and an error in either half reaches the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children
from lockwarden import host


def scan(keys: frozenset[host.InodeKey], split_at: int) -> host.DescriptorScan:
    saved = host.SPLIT_AT
    host.SPLIT_AT = split_at
    try:
        entries = tuple(entry for entry in os.listdir("/proc") if entry.isdigit())
        return host._scan_descriptors("/proc", keys, entries)
    finally:
        host.SPLIT_AT = saved


def test_a_split_scan_finds_what_one_walk_finds(tmp_path: Path, children: Children) -> None:
    locks = [tmp_path / f"lock-{number}" for number in range(3)]
    holders = []
    for path in locks:
        path.touch()
        holders.append(children.python(FLOCK_HOLDER, str(path)).pid)
    keys = frozenset((status.st_dev, status.st_ino) for status in map(os.stat, locks))
    whole = scan(keys, split_at=1_000_000)
    split = scan(keys, split_at=2)  # two threads, however few processes there are
    assert whole.by_key == split.by_key
    assert whole.unreadable_pids == split.unreadable_pids
    found = sorted(d.pid for descriptors in split.by_key.values() for d in descriptors)
    assert found == sorted(holders)
    assert all(d.locks for descriptors in split.by_key.values() for d in descriptors)


def test_an_error_in_the_other_half_is_raised_in_the_run() -> None:
    def walk(part: tuple[str, ...]) -> int:
        if "boom" in part:
            raise RuntimeError("the second half failed")
        return len(part)

    entries = (*(str(number) for number in range(10)), "boom")
    saved = host.SPLIT_AT
    host.SPLIT_AT = 2
    try:
        assert host._shared_walk(entries[:10], walk) == [5, 5]
        with pytest.raises(RuntimeError, match="second half"):
            host._shared_walk(entries, walk)
    finally:
        host.SPLIT_AT = saved
