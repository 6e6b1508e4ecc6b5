"""Judging reads nothing of the host: the pipeline gathers every fact first, then judges with
the snapshot closed, where any read of /proc raises."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from lockwarden.procfs.snapshot import Snapshot, SnapshotClosed


def test_a_read_while_closed_raises_and_what_was_read_before_stays_readable() -> None:
    snapshot = Snapshot.capture()
    mine = snapshot.process(os.getpid())
    assert mine is not None and mine.pid == os.getpid()
    with snapshot.closed():
        assert snapshot.process(os.getpid()) == mine  # gathered before: no read
        parent = os.getppid()
        with pytest.raises(SnapshotClosed, match=f"PID {parent} read while judging"):
            snapshot.process(parent)
        with pytest.raises(SnapshotClosed):
            snapshot.pid_exists(parent)
        with pytest.raises(SnapshotClosed):
            snapshot.working_directories()
    assert snapshot.process(os.getppid()) is not None  # open again once judging is done


def test_the_capture_is_dated_by_the_callers_clock() -> None:
    moment = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    snapshot = Snapshot.capture(clock=lambda: moment)
    assert snapshot.captured_at == moment
    assert snapshot.booted_at < moment
