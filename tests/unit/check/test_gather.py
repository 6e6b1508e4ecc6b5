"""identify.gather only looks facts up in the frozen snapshot: with every way of reading /proc
taken away after the capture, a real held lock is still judged, and its holder named."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import FLOCK_HOLDER, Children
from factories import NOW, make_process, make_snapshot
from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import gather, request_for
from lockwarden.formats import read_claim
from lockwarden.model import Claim, KernelLock, State, UnknownCause
from lockwarden.procfs.reader import HostReader, wall_clock
from lockwarden.procfs.snapshot import Descriptor, NotCaptured

POLICY = Policy(warn_after=900.0, critical_after=3600.0)


def _refusing(real: Callable[..., Any]) -> Callable[..., Any]:
    def refuse(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith("/proc"):
            raise AssertionError(f"{path} read after the capture")
        return real(path, *args, **kwargs)

    return refuse


def test_a_held_lock_is_judged_with_proc_out_of_reach(
    tmp_path: Path, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "store.lock"
    holder = children.python(FLOCK_HOLDER, str(lock))
    host = HostReader(wall_clock)
    claim = read_claim(str(lock), "kernel", host.pid_max)
    snapshot = host.capture(request_for([claim]))

    for name in ("open", "listdir", "readlink", "scandir", "stat", "lstat"):
        monkeypatch.setattr(os, name, _refusing(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", _refusing(builtins.open))
    monkeypatch.setattr(psutil, "Process", _refusing(psutil.Process))
    monkeypatch.setattr(psutil, "pids", _refusing(lambda: []))

    finding = classify("store", claim, gather(claim, snapshot), POLICY, datetime.now(UTC))
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == holder.pid


@pytest.mark.parametrize("directory_exists", [True, False], ids=["free", "missing-directory"])
def test_an_absent_lock_is_judged_with_every_file_system_out_of_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory_exists: bool
) -> None:
    """Whether an absent lock's directory exists is read with its claim (the read a deadline
    guards), so judging touches no file system: a mount that hangs after the claim was read
    cannot stall the run's own process."""
    directory = tmp_path / ("store" if directory_exists else "unmounted")
    if directory_exists:
        directory.mkdir()
    host = HostReader(wall_clock)
    claim = read_claim(str(directory / "LOCK"), "owner-record", host.pid_max)
    snapshot = host.capture(request_for([claim]))

    for name in ("open", "listdir", "readlink", "scandir", "stat", "lstat", "access"):
        monkeypatch.setattr(os, name, _refusing(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", _refusing(builtins.open))
    finding = classify("store", claim, gather(claim, snapshot), POLICY, datetime.now(UTC))

    if directory_exists:
        assert (finding.state, claim.missing_directory) == (State.FREE, None)
    else:
        assert finding.state is State.UNKNOWN
        assert finding.unknown_cause is UnknownCause.MISSING_DIRECTORY
        assert claim.missing_directory == str(directory)


KEY = (os.makedev(0xFE, 0), 2146390)
TAKEN = KernelLock(1, "FLOCK", "WRITE", 1993, KEY, 0, None, False)
CLAIM = Claim(
    format="kernel", path="/srv/store.lock", present=True, existence_is_lock=False, keys=(KEY,)
)


def test_the_holder_is_the_descriptor_owner_not_the_dead_taker() -> None:
    """A hand-made snapshot: /proc/locks prints the parent that took the flock (gone); the
    child that inherited the descriptor holds it."""
    child = make_process(
        pid=2001, cmdline=("sync", "--resume"), started_at=NOW - timedelta(minutes=1)
    )
    snapshot = make_snapshot(
        parsed_locks={KEY: (TAKEN,)},
        scanned_keys=frozenset({KEY}),
        found_descriptors={KEY: (Descriptor(2001, 3, (TAKEN,), True),)},
        processes={1993: None, 2001: child},
    )
    evidence = gather(CLAIM, snapshot)
    assert [holder.pid for holder in evidence.kernel_holders] == [2001]
    assert evidence.takers == {1993: None}
    assert classify("store", CLAIM, evidence, POLICY, NOW).state is State.HELD


def test_a_fact_the_capture_did_not_read_is_an_error_not_a_late_read() -> None:
    snapshot = make_snapshot(parsed_locks={KEY: (TAKEN,)}, processes={1993: None})
    with pytest.raises(NotCaptured, match="descriptors"):
        gather(CLAIM, snapshot)
