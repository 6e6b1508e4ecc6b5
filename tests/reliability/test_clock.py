"""Row 10: a stepped wall clock never makes a lock `held_too_long` (or `stale`) on its own.

A real step of the system clock moves every wall-clock reading of a run together: `now`, the
snapshot's capture time and so the boot time lockwarden derives from it (capture time minus the
monotonic uptime), while the kernel's monotonic numbers (uptime, a process's start ticks) stay.
The in-process tests inject exactly that: the real snapshot of real holders, with its capture
time and `now` moved by the step, through run.inspect_locks (the stage run_once calls). The CLI
tests inject a backward step through `--now`; a forward `--now` is a what-if ("what would it say
in two hours"), which is meant to extrapolate, so it is not a clock step.

Not covered here: "no missed reminder beyond one interval" needs the alerting journal.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, run_json, write_config
from lockwarden.config import LockConfig
from lockwarden.model import Finding, State, UnknownCause
from lockwarden.pipeline import inspect_locks
from lockwarden.procfs.reader import HostReader, Request
from lockwarden.procfs.snapshot import Snapshot
from reliability.support import Figures

WARN_AFTER = 900.0  # 15 min: an hour's step past it would be a false held_too_long
CRITICAL_AFTER = 1800.0
STEPS = (timedelta(hours=-1), timedelta(0), timedelta(hours=1), timedelta(days=1))
TICKS_RECORD_HOLDER = """
import json, os, sys, time
lock = sys.argv[1]
with open(f"/proc/{os.getpid()}/stat") as handle:
    text = handle.read()
ticks = int(text[text.rfind(")") + 2 :].split()[19])
os.mkdir(lock)
started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump({"pid": os.getpid(), "start_ticks": ticks, "startedAt": started}, handle)
print("ready", flush=True)
time.sleep(120)
"""
WALL_RECORD_HOLDER = """
import json, os, sys, time
lock = sys.argv[1]
os.mkdir(lock)
started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump({"pid": os.getpid(), "startedAt": started}, handle)
print("ready", flush=True)
time.sleep(120)
"""


def lock(name: str, path: Path, lock_format: str) -> LockConfig:
    return LockConfig(name, str(path), lock_format, WARN_AFTER, CRITICAL_AFTER)


def stepped(snapshot: Snapshot, step: timedelta) -> Snapshot:
    """The same host, seen after the wall clock moved by `step`: its capture time moved, and
    with it the boot time and every process's start time derived from it; uptime and start
    ticks are the kernel's."""
    processes = {
        pid: None if process is None else replace(process, started_at=process.started_at + step)
        for pid, process in snapshot.processes.items()
    }
    return replace(snapshot, captured_at=snapshot.captured_at + step, processes=processes)


class SteppedHost(HostReader):
    """One real capture of the host (the first one asked for, at `moment`), replayed as seen
    with the wall clock moved by `step`: every step judges the same kernel numbers."""

    def __init__(self, moment: datetime) -> None:
        super().__init__(lambda: moment)
        self.step = timedelta(0)
        self.real: Snapshot | None = None

    def capture(self, request: Request) -> Snapshot:
        if self.real is None:
            self.real = super().capture(request)
        return stepped(self.real, self.step)


@pytest.fixture
def holders(tmp_path: Path, children: Children) -> list[LockConfig]:
    flock = tmp_path / "flock.lock"
    children.python(FLOCK_HOLDER, str(flock))
    children.python(TICKS_RECORD_HOLDER, str(tmp_path / "TICKS.lock"))
    children.python(WALL_RECORD_HOLDER, str(tmp_path / "WALL.lock"))
    pidless = tmp_path / "PIDLESS.lock"
    pidless.mkdir()
    return [
        lock("flock", flock, "kernel"),
        lock("ticks-record", tmp_path / "TICKS.lock", "owner-record"),
        lock("wall-record", tmp_path / "WALL.lock", "owner-record"),
        lock("pidless-mkdir", pidless, "owner-record"),
    ]


def running_time(snapshot: Snapshot, finding: Finding) -> float:
    """The holder's running time from monotonic numbers only: uptime minus start ticks."""
    assert finding.holder is not None and finding.holder.start_ticks is not None
    return snapshot.uptime_s - finding.holder.start_ticks / snapshot.clock_ticks


def test_clock_steps_make_nothing_held_too_long_or_stale(
    holders: list[LockConfig], figures: Figures
) -> None:
    figure = figures.row("10 clock steps (run.inspect_locks)")
    moment = datetime.now(UTC)
    host = SteppedHost(moment)
    baseline: dict[str, float | None] = {}
    for step in STEPS:
        host.step = step
        findings = inspect_locks(holders, host, moment + step)
        assert host.real is not None
        snapshot = stepped(host.real, step)
        for finding in findings:
            wrong = finding.state in (State.HELD_TOO_LONG, State.STALE)
            figure.count(0.0, failed=wrong)
            assert not wrong, f"step {step}: {finding.name} {finding.state}: {finding.reason}"
        by_name = {finding.name: finding for finding in findings}
        for name in ("flock", "ticks-record"):
            finding = by_name[name]
            assert finding.state is State.HELD, f"step {step}: {finding.reason}"
            assert finding.held_for_s is not None
            # held for no longer than the holder has run, by the kernel's monotonic count
            assert finding.held_for_s <= running_time(snapshot, finding) + 0.01
        # with no record times at all, the duration is the monotonic one, unmoved by any step
        flock = by_name["flock"].held_for_s
        baseline.setdefault("flock", flock)
        assert flock is not None and abs(flock - (baseline["flock"] or 0.0)) < 0.01, step
        # wall-clock times only: held, or unknown when the step makes them disagree; never more
        assert by_name["wall-record"].state in (State.HELD, State.UNKNOWN)
        assert by_name["pidless-mkdir"].state is State.UNKNOWN
    figure.notes.append(
        "steps -1h, 0, +1h, +1d: the flock holder held for the same monotonic duration at "
        "every step; no holder ever longer than it has run"
    )


def test_forward_day_step_does_not_make_a_fresh_lock_look_older_than_the_boot(
    holders: list[LockConfig],
) -> None:
    """A lock made a moment ago looks made before the boot once the clock jumps a day ahead
    (the boot time is derived from the clock). Without a PID there is no proof either way."""
    moment = datetime.now(UTC) + timedelta(days=1)
    pidless = next(lock for lock in holders if lock.name == "pidless-mkdir")
    finding = inspect_locks([pidless], HostReader(lambda: moment), moment)[0]
    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.unknown_cause is UnknownCause.UNPROVEN  # made "before this boot" by the clock


def test_cli_now_stepped_back_an_hour_is_not_held_too_long(
    tmp_path: Path, holders: list[LockConfig], figures: Figures
) -> None:
    figure = figures.row("10 clock steps (CLI --now)")
    config = write_config(
        tmp_path / "config.toml",
        "\n".join(
            f'[[lock]]\nname = "{lock.name}"\npath = "{lock.path}"\nformat = "{lock.format}"\n'
            f'warn_after = "15m"\ncritical_after = "30m"\n'
            for lock in holders
        ),
    )
    for step in (timedelta(hours=-1), timedelta(0), timedelta(hours=-1)):
        now = (datetime.now(UTC) + step).strftime("%Y-%m-%dT%H:%M:%SZ")
        code, document = run_json("--once", "--config", config, "--now", now)
        states = {lock["name"]: lock["state"] for lock in document["locks"]}
        wrong = [name for name, state in states.items() if state in ("held_too_long", "stale")]
        figure.count(0.0, failed=bool(wrong))
        assert not wrong, json.dumps(document, indent=2)
        assert states["flock"] == "held" and states["ticks-record"] == "held", states
        assert code in (0, 3), code  # ok, or unknown for the holderless directory
    assert os.path.isdir(holders[-1].path)
