"""Judging reads nothing of the host: the run captures one frozen snapshot with every fact its
locks ask for, and a look-up of anything it did not capture raises instead of reading /proc."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.snapshot import NotCaptured, Snapshot


def test_a_captured_snapshot_answers_what_was_asked_and_reads_nothing_more() -> None:
    # a live process of our own that was not asked about (our parent may be PID 1, which
    # names no process a lock can be judged by)
    other = subprocess.Popen(["sleep", "30"])
    try:
        snapshot = HostReader(wall_clock).capture(Request(pids=(os.getpid(),)))
        with pytest.raises(NotCaptured, match=f"PID {other.pid} was not captured"):
            snapshot.process(other.pid)
    finally:
        other.kill()
        other.wait()
    mine = snapshot.process(os.getpid())
    assert mine is not None and mine.pid == os.getpid()
    with pytest.raises(NotCaptured):
        snapshot.working_directories()
    with pytest.raises(NotCaptured):
        snapshot.descriptors((0, 0))
    with pytest.raises(NotCaptured):
        snapshot.node_id()
    assert snapshot.process(os.getpid()) == mine  # looked up again: the same captured fact


def test_a_snapshot_is_frozen_and_holds_no_reader() -> None:
    snapshot = HostReader(wall_clock).capture(Request(pids=(os.getpid(),)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.captured_at = datetime.now(UTC)  # type: ignore[misc]
    with pytest.raises(TypeError):
        snapshot.processes[os.getppid()] = None  # type: ignore[index]
    assert not any(hasattr(snapshot, name) for name in ("proc", "capture", "scan_descriptors"))
    assert not any(isinstance(getattr(snapshot, name), HostReader) for name in Snapshot.__slots__)


def test_the_capture_is_dated_by_the_callers_clock() -> None:
    moment = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    snapshot = HostReader(lambda: moment).capture(Request(pids=(os.getpid(),)))
    assert snapshot.captured_at == moment
    assert snapshot.booted_at < moment
    assert snapshot.booted_at == moment - timedelta(seconds=snapshot.uptime_s)
    mine = snapshot.process(os.getpid())
    assert mine is not None and snapshot.booted_at <= mine.started_at <= moment
