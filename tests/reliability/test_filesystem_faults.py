"""Row 8: filesystem faults. The state directory full (a real 64 KiB tmpfs: ENOSPC),
read-only (a real read-only tmpfs), a symlink, mode 0777, or missing its parent — each for 3
runs, then healed — and directories that vanish mid-run: the monitored lock's directory and
the state directory, each removed and re-made in a tight loop by a real child process while
runs go on. Real HTTP receiver on 127.0.0.1, one real child holding a lock, real runs forked
from forkrun.py calling the real CLI. (tests/alerts/test_end_to_end.py checks the wording of
each state problem on one run; this row checks the matrix over runs, with figures.)

Promises: 0 crashes (every run ends with a Nagios code, no traceback); 0 lost alerts and no
repeats: the first run whose state is unusable delivers the alert, and neither the later
degraded runs nor the healed ones send it again (the runtime directory remembers it); a lock
whose directory vanishes is never called stale while its holder lives."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.helpers import Children, Receiver, is_about, receiver, tiny_tmpfs, title_kind
from alerts.test_end_to_end import Scenario

from .faults_support import ForkRunner, Ran, write_config
from .figures_faults import Figure, record

__all__ = ["receiver", "tiny_tmpfs"]

DEGRADED_RUNS = 3
NAGIOS_CODES = {0, 1, 2, 3}


def mount_or_report(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = f"cannot mount a tmpfs here: {done.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(descriptor)
    return filler


def alerts(receiver: Receiver, name: str) -> int:
    return sum(
        1
        for p in receiver.payloads
        if title_kind(str(p["title"])) == "writes blocked" and is_about(str(p["title"]), name)
    )


def test_unusable_state_for_three_runs_then_healed_loses_no_alert(
    tmp_path: Path, children: Children, receiver: Receiver, tiny_tmpfs: Path, figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    runner = ForkRunner(children, tmp_path / "runs")
    faults: dict[str, tuple[Path, Callable[[], None]]] = {}

    enospc = tiny_tmpfs / "state"
    enospc.mkdir(mode=0o700)
    filler = fill(tiny_tmpfs)
    faults["enospc"] = (enospc, filler.unlink)

    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o700)
    mount_or_report("-t", "tmpfs", "-o", "ro,size=64k,mode=0700", "tmpfs", str(read_only))
    faults["read-only"] = (read_only, lambda: _umount(read_only))

    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir(mode=0o700)
    link.symlink_to(target)

    def real_directory() -> None:
        link.unlink()
        link.mkdir(mode=0o700)

    faults["symlink"] = (link, real_directory)

    open_dir = tmp_path / "world"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    faults["world-writable"] = (open_dir, lambda: open_dir.chmod(0o700))

    orphan = tmp_path / "no" / "state"
    faults["missing-parent"] = (orphan, lambda: orphan.mkdir(parents=True, mode=0o700))

    configs = {
        name: write_config(
            tmp_path / f"{name}.toml",
            name,
            scenario.lock,
            state_dir / "state.jsonl",
            [receiver.url()],
        )
        for name, (state_dir, _heal) in faults.items()
    }
    figure = Figure("row 8, unusable state dir x runs")
    problems: list[str] = []
    try:
        for step in range(DEGRADED_RUNS + 2):
            if step == DEGRADED_RUNS:
                for _state_dir, heal in faults.values():
                    heal()
            ran = runner.batch(
                [
                    (["--once", "--config", str(c), "--now", scenario.at(120 + 5 * step)], {})
                    for c in configs.values()
                ]
            )
            for name, run in zip(configs, ran, strict=True):
                figure.cases += 1
                figure.took(run.seconds)
                degraded = "state degraded" in run.stdout
                if run.crashed or run.code != 2 or degraded != (step < DEGRADED_RUNS):
                    figure.failures += 1
                    problems.append(f"{name} run {step}: exit {run.code}, {run.stdout[-300:]}")
        for name in faults:
            got = alerts(receiver, name)
            figure.duplicates += max(got - 1, 0)
            # Exactly one alert for the incident, whatever the fault: what the state journal
            # cannot take (refused at load, or loading but refusing the write: ENOSPC,
            # read-only) is kept in the runtime directory's journal, and the first healed run
            # moves it into the state journal, so no run pages again.
            if got != 1:
                figure.failures += 1
                problems.append(f"{name}: {got} alerts")
    finally:
        if os.path.ismount(read_only):
            _umount(read_only)
    figure.detail = "ENOSPC, read-only, symlink, 0777, missing parent; repeats: see the test"
    record(figures, figure)
    assert problems == []


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False)


# Takes the lock in a directory it then removes and re-makes, as fast as it can, forever.
VANISHING_LOCK = """
import json, os, shutil, sys
directory = sys.argv[1]
print("ready", flush=True)
while True:
    os.makedirs(os.path.join(directory, "LOCK"), exist_ok=True)
    with open(os.path.join(directory, "LOCK", "owner.json"), "w") as handle:
        json.dump({"pid": os.getpid(), "role": "flapper"}, handle)
    shutil.rmtree(directory, ignore_errors=True)
"""

# Removes the state directory and makes it again, as fast as it can, forever.
VANISHING_STATE = """
import os, shutil, sys
directory = sys.argv[1]
print("ready", flush=True)
while True:
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory, mode=0o700, exist_ok=True)
"""

RACE_RUNS = 40


def test_directories_vanishing_mid_run_crash_nothing_and_lose_no_alert(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    flapping = tmp_path / "flapping"
    state_dir = tmp_path / "vanishing-state"
    lock_config = write_config(
        tmp_path / "lock.toml",
        "flapping",
        flapping / "LOCK",
        tmp_path / "s1" / "state.jsonl",
        [receiver.url()],
    )
    state_config = write_config(
        tmp_path / "state.toml",
        "steady",
        scenario.lock,
        state_dir / "state.jsonl",
        [receiver.url()],
    )
    (tmp_path / "s1").mkdir(mode=0o700)
    runner = ForkRunner(children, tmp_path / "runs")
    children.python(VANISHING_LOCK, str(flapping))
    children.python(VANISHING_STATE, str(state_dir))
    figure = Figure("row 8, directories vanishing mid-run")
    problems: list[str] = []
    outcomes: list[tuple[str, Ran]] = []
    for step in range(RACE_RUNS // 2):
        now = scenario.at(120 + step)
        ran = runner.batch(
            [
                (["--once", "--config", str(c), "--now", now], {})
                for c in (lock_config, state_config)
            ]
        )
        outcomes += [("flapping", ran[0]), ("steady", ran[1])]
    for name, run in outcomes:
        figure.cases += 1
        figure.took(run.seconds)
        if run.crashed or run.code not in NAGIOS_CODES:
            problems.append(f"{name}: exit {run.code}: {run.stderr[-400:]}")
        elif name == "flapping" and " stale " in run.stdout:
            problems.append(f"flapping lock called stale while its holder lives: {run.stdout}")
        elif name == "steady" and run.code != 2:
            problems.append(f"steady lock not critical: {run.stdout[-300:]}")
        elif name == "steady" and "NOT delivered" in run.stdout:
            problems.append(f"an alert was not delivered: {run.stdout[-300:]}")
    figure.failures = len(problems)
    figure.duplicates = max(alerts(receiver, "steady") - 1, 0)
    figure.detail = f"{RACE_RUNS} runs; repeats come from the vanished journal, by design"
    record(figures, figure)
    assert problems == []
    assert alerts(receiver, "steady") >= 1  # not lost


def test_a_journal_that_loads_but_cannot_be_written_pages_once_per_incident(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    """A state journal that reads fine but refuses every write (its directory bind-mounted
    read-only): the alert and the "state degraded" notice go out once, not once per run,
    because what the journal cannot take is kept in the runtime directory; healed, the state
    journal gets those records (no repeat, one "usable again"), and the incident resolves."""
    scenario = Scenario(tmp_path, children)
    scenario.configure([receiver.url()])
    scenario.hold()
    scenario.once(120)
    scenario.release()
    scenario.once(121)  # an earlier incident, alerted and resolved: a journal that loads
    before = scenario.state_path.read_text()
    state = str(scenario.state_dir)
    mount_or_report("--bind", state, state)
    try:
        mount_or_report("-o", "remount,bind,ro", state, state)
        scenario.hold()
        runs = [scenario.once(240 + step) for step in range(3)]
    finally:
        _umount(scenario.state_dir)
    assert [run.returncode for run in runs] == [2, 2, 2], runs[-1].stdout
    assert all("Read-only file system" in run.stderr for run in runs), runs[0].stderr
    kinds = [title_kind(str(p["title"])) for p in receiver.payloads]
    assert kinds == ["writes blocked", "resolved", "writes blocked", "state degraded"], kinds

    healed = scenario.once(245, "--json")
    report = json.loads(healed.stdout)
    assert healed.returncode == 2 and report["alerts"]["state_problems"] == [], healed.stdout
    assert [lock["name"] for lock in report["locks"]] == ["wa-store"]  # no state finding
    titles = [str(p["title"]) for p in receiver.payloads]
    assert len(titles) == 5 and titles[4].endswith("lockwarden state usable again"), titles
    moved = scenario.state_path.read_text().removeprefix(before)
    moved_types = [json.loads(line)["type"] for line in moved.splitlines()]
    assert "sent" in moved_types  # the delivery the read-only journal could not take
    scenario.release()
    scenario.once(246)
    titles = [str(p["title"]) for p in receiver.payloads]
    assert len(titles) == 6 and is_about(titles[5], "wa-store"), titles
    assert title_kind(titles[5]) == "resolved", titles
