"""Row 2: `kill -9` at every step of a run. Each trial is a real lockwarden run (forked from
forkrun.py, calling the real CLI) that a TEST-ONLY crash point (LOCKWARDEN_CRASH_AT, see
src/lockwarden/crashpoints.py) kills with SIGKILL at one step; then two normal runs follow.
Two real HTTP receivers on 127.0.0.1 are the services; one real child holds the lock (mkdir
style) for every trial, and each trial has its own lock name and state directory.

Promises: the crashed run really died at its step; the journal always loads; the next normal
run delivers (0 lost alerts); a duplicate only at a step where the send happened and its
record did not, at most 1 per service per crash; no leftover compaction file."""

from __future__ import annotations

from pathlib import Path

from alerts.helpers import Children, Receiver, receiver
from alerts.test_end_to_end import Scenario
from lockwarden.crashpoints import STEPS
from lockwarden.journal import COMPACT_PREFIX, Journal

from .faults_support import ForkRunner, Job, Ran, titles_for, write_config
from .figures_faults import Figure, record

__all__ = ["receiver"]

TRIALS_PER_STEP = 20
CONCURRENT = 8  # runs forked together: keeps 2 loaded cores busy without starving the receiver
# Where the send can have happened while its "sent" record did not reach the journal.
MAY_DUPLICATE = {"mid-send", "after-send", "mid-append"}
APPENDS_VISITED = 5  # mid-append crashes at the 1st..5th record a first run appends
COMPACTION_VISITS = 2  # half-written new file, or complete and not yet renamed


def crash_at(step: str, trial: int) -> str:
    if step == "mid-append":
        return f"{step}:{trial % APPENDS_VISITED + 1}"
    if step == "mid-compaction":
        return f"{step}:{trial % COMPACTION_VISITS + 1}"
    return step


def chunks(
    items: list[tuple[list[str], dict[str, str]]],
) -> list[list[tuple[list[str], dict[str, str]]]]:
    return [items[start : start + CONCURRENT] for start in range(0, len(items), CONCURRENT)]


def run_all(runner: ForkRunner, items: list[Job]) -> list[Ran]:
    return [ran for chunk in chunks(items) for ran in runner.batch(chunk)]


def test_kill_9_at_every_step_loses_no_alert_and_duplicates_at_most_once(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    other = Receiver()
    other.start()
    try:
        _trials(tmp_path, children, receiver, other, figures)
    finally:
        other.stop()


def _trials(
    tmp_path: Path, children: Children, first: Receiver, second: Receiver, figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    runner = ForkRunner(children, tmp_path / "runs")
    trials: list[tuple[str, str, Path, Path]] = []  # step, lock name, config, state dir
    for step in STEPS:
        for trial in range(TRIALS_PER_STEP):
            name = f"{step}-{trial}"
            state_dir = tmp_path / "states" / name
            state_dir.mkdir(parents=True, mode=0o700)
            config = write_config(
                tmp_path / f"{name}.toml",
                name,
                scenario.lock,
                state_dir / "state.jsonl",
                [first.url(), second.url()],
                extra="max_bytes = 1000",  # every first run compacts: mid-compaction is reached
            )
            trials.append((crash_at(step, trial), name, config, state_dir))

    def runs(minutes: float, crash: bool) -> list[Ran]:
        return run_all(
            runner,
            [
                (
                    ["--once", "--config", str(config), "--now", scenario.at(minutes)],
                    {"LOCKWARDEN_CRASH_AT": where} if crash else {},
                )
                for where, _name, config, _state in trials
            ],
        )

    crashed = runs(120, crash=True)
    loads = [_loads(state_dir) for _w, _n, _c, state_dir in trials]
    recovered = runs(125, crash=False)
    quiet = runs(130, crash=False)

    figure = Figure("row 2, kill -9 at every step")
    problems: list[str] = []
    for index, (where, name, _config, state_dir) in enumerate(trials):
        figure.cases += 1
        for ran in (crashed[index], recovered[index], quiet[index]):
            figure.took(ran.seconds)
        trouble = _judge(
            where,
            name,
            crashed[index],
            loads[index],
            recovered[index],
            quiet[index],
            state_dir,
            first,
            second,
        )
        duplicates = sum(
            len(titles_for(r, name)) - 1 for r in (first, second) if titles_for(r, name)
        )
        figure.duplicates += max(duplicates, 0)
        if trouble:
            figure.failures += 1
            problems.append(f"{name} ({where}): {trouble}")
    figure.detail = (
        f"{TRIALS_PER_STEP} trials x {len(STEPS)} steps; a duplicate is at most 1 per service "
        "per crash, only where the send happened and its record did not"
    )
    record(figures, figure)
    assert problems == []


def _loads(state_dir: Path) -> str | None:
    """None when the crashed run's journal loads; else why not."""
    try:
        Journal(str(state_dir / "state.jsonl")).load()
    except Exception as error:  # any failure to load is what this row must never see
        return f"journal does not load after the crash: {error!r}"
    return None


def _judge(
    where: str,
    name: str,
    crashed: Ran,
    load_problem: str | None,
    recovered: Ran,
    quiet: Ran,
    state_dir: Path,
    first: Receiver,
    second: Receiver,
) -> str:
    step = where.split(":")[0]
    if crashed.code != -9:
        return f"the crash point was not reached (exit {crashed.code}): {crashed.stderr[-300:]}"
    if load_problem:
        return load_problem
    for ran in (recovered, quiet):
        if ran.code != 2 or ran.crashed:
            return f"a later run ended {ran.code}: {ran.stderr[-400:]}"
    for service in (first, second):
        got = len(titles_for(service, name))
        if got == 0:
            return "LOST: a service never got the alert"
        if got > 2 or (got == 2 and step not in MAY_DUPLICATE):
            return f"{got} deliveries to one service"
    leftovers = [p.name for p in state_dir.iterdir() if p.name.startswith(COMPACT_PREFIX)]
    if leftovers:
        return f"compaction leftovers {leftovers}"
    return ""
