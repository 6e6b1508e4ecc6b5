"""Row 2: `kill -9` at every step of a run. Each trial is a real lockwarden run (forked from
forkrun.py, calling the real CLI) whose checkpoint (src/lockwarden/checkpoints.py, passed in
by forkrun.py from the job's CRASH_AT) kills it with SIGKILL at one step; then two normal runs
follow.
Two real HTTP receivers on 127.0.0.1 are the services; real children hold the locks (mkdir
style), and each trial has its own lock name and state directory.

Two kinds of crashed run: the one that sends an incident's alert (20 trials per step), and the
one that sends its "resolved" after the holder let go (5 trials per step: the same code path
but for the close record, kept smaller to bound the suite's time).

Promises: the crashed run really died at its step; the journal always loads; the next normal
run delivers (0 lost messages); a duplicate only at a step where the send happened and its
record did not, at most 1 per service per crash; no leftover compaction file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alerts.helpers import Children, Receiver, is_about, receiver, title_kind
from alerts.test_end_to_end import Scenario
from lockwarden.state.journal import COMPACT_PREFIX, Journal
from lockwarden.support.checkpoints import STEPS

from .faults_support import ForkRunner, Job, Ran, write_config
from .figures_faults import Figure, record
from .forkrun import CRASH_AT

__all__ = ["receiver"]

ALERT_TRIALS_PER_STEP = 20
RESOLVED_TRIALS_PER_STEP = 5
CONCURRENT = 8  # runs forked together: keeps 2 loaded cores busy without starving the receiver
# Where the send can have happened while its "sent" record did not reach the journal.
MAY_DUPLICATE = {"mid-send", "after-send", "mid-append"}
APPENDS_VISITED = 5  # mid-append crashes at the 1st..5th record the crashed run appends
COMPACTION_VISITS = 2  # half-written new file, or complete and not yet renamed


@dataclass(frozen=True)
class Trial:
    crash_at: str
    name: str
    config: Path
    state_dir: Path


def crash_at(step: str, trial: int) -> str:
    if step == "mid-append":
        return f"{step}:{trial % APPENDS_VISITED + 1}"
    if step == "mid-compaction":
        return f"{step}:{trial % COMPACTION_VISITS + 1}"
    return step


def run_all(runner: ForkRunner, items: list[Job]) -> list[Ran]:
    chunks = [items[start : start + CONCURRENT] for start in range(0, len(items), CONCURRENT)]
    return [ran for chunk in chunks for ran in runner.batch(chunk)]


def test_kill_9_at_every_step_loses_no_message_and_duplicates_at_most_once(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    other = Receiver()
    other.start()
    try:
        crash_trials(tmp_path, children, (receiver, other), figures)
    finally:
        other.stop()


def crash_trials(
    tmp_path: Path, children: Children, services: tuple[Receiver, Receiver], figures: list[str]
) -> None:
    runner = ForkRunner(children, tmp_path / "runs")
    alerting = Scenario(tmp_path / _made(tmp_path / "alerting"), children)
    alerting.hold()
    resolving = Scenario(tmp_path / _made(tmp_path / "resolving"), children)
    resolving.hold()
    alert_trials = _trials(tmp_path, "alert", alerting, ALERT_TRIALS_PER_STEP, services)
    resolve_trials = _trials(tmp_path, "resolved", resolving, RESOLVED_TRIALS_PER_STEP, services)

    def runs(trials: list[Trial], minutes: float, crash: bool) -> list[Ran]:
        return run_all(
            runner,
            [
                (
                    ["--once", "--config", str(t.config), "--now", alerting.at(minutes)],
                    {CRASH_AT: t.crash_at} if crash else {},
                )
                for t in trials
            ],
        )

    runs(resolve_trials, 120, crash=False)  # their alert, sent normally
    resolving.release()
    figure = Figure("row 2, kill -9 at every step")
    problems: list[str] = []
    for trials, kind in ((alert_trials, "writes blocked"), (resolve_trials, "resolved")):
        crashed = runs(trials, 125, crash=True)
        loads = [_loads(t.state_dir) for t in trials]
        later = list(
            zip(runs(trials, 130, crash=False), runs(trials, 135, crash=False), strict=True)
        )
        for trial, died, load_problem, (recovered, quiet) in zip(
            trials, crashed, loads, later, strict=True
        ):
            figure.cases += 1
            for ran in (died, recovered, quiet):
                figure.took(ran.seconds)
            counts = [_count(service, trial.name, kind) for service in services]
            figure.duplicates += sum(max(count - 1, 0) for count in counts)
            trouble = load_problem or _judge(trial, died, (recovered, quiet), counts)
            if trouble:
                figure.failures += 1
                problems.append(f"{trial.name} ({trial.crash_at}): {trouble}")
    figure.detail = (
        f"{ALERT_TRIALS_PER_STEP} alert + {RESOLVED_TRIALS_PER_STEP} resolved trials x "
        f"{len(STEPS)} steps; a duplicate is at most 1 per service per crash, only where the "
        "send happened and its record did not"
    )
    record(figures, figure)
    assert problems == []


def _made(directory: Path) -> str:
    directory.mkdir()
    return directory.name


def _trials(
    tmp_path: Path,
    kind: str,
    scenario: Scenario,
    per_step: int,
    services: tuple[Receiver, Receiver],
) -> list[Trial]:
    trials = []
    for step in STEPS:
        for number in range(per_step):
            name = f"{kind}-{step}-{number}"
            state_dir = tmp_path / "states" / name
            state_dir.mkdir(parents=True, mode=0o700)
            config = write_config(
                tmp_path / f"{name}.toml",
                name,
                scenario.lock,
                state_dir / "state.jsonl",
                [service.url() for service in services],
                extra="max_bytes = 1000",  # every run that writes compacts: mid-compaction
            )
            trials.append(Trial(crash_at(step, number), name, config, state_dir))
    return trials


def _count(service: Receiver, name: str, kind: str) -> int:
    return sum(
        1
        for p in service.payloads
        if title_kind(str(p["title"])) == kind and is_about(str(p["title"]), name)
    )


def _loads(state_dir: Path) -> str:
    """Empty when the crashed run's journal loads; else why not."""
    try:
        Journal(str(state_dir / "state.jsonl")).load()
    except Exception as error:  # any failure to load is what this row must never see
        return f"journal does not load after the crash: {error!r}"
    return ""


def _judge(trial: Trial, died: Ran, later: tuple[Ran, Ran], counts: list[int]) -> str:
    step = trial.crash_at.split(":")[0]
    if died.code != -9:
        return f"the crash point was not reached (exit {died.code}): {died.stderr[-300:]}"
    for ran in later:
        if ran.code not in (0, 2) or ran.crashed:
            return f"a later run ended {ran.code}: {ran.stderr[-400:]}"
    if 0 in counts:
        return f"LOST: deliveries per service {counts}"
    if max(counts) > 2 or (max(counts) == 2 and step not in MAY_DUPLICATE):
        return f"deliveries per service {counts}"
    leftovers = [p.name for p in trial.state_dir.iterdir() if p.name.startswith(COMPACT_PREFIX)]
    return f"compaction leftovers {leftovers}" if leftovers else ""
