"""Row 4: overlapping runs. 2, 4 and 8 `lockwarden --once` runs started together (forked from
forkrun.py at the same moment; each calls the real CLI) on one state directory, 25 rounds each,
against a real HTTP receiver on 127.0.0.1 and one real child holding the lock. Each round has a
fresh state directory and its own lock name, so each round owes exactly one alert.

Promises: 0 duplicates and 0 lost alerts per round; every run exits 2 (the critical lock) or 75
(the documented "another run is in progress"); a run that exits 75 names the PID of the run
that holds the run lock, and ends within a bound (not a speed assertion: it catches a loser
that waits for the winner)."""

from __future__ import annotations

import re
from pathlib import Path

from alerts.helpers import Children, Receiver, receiver
from alerts.test_end_to_end import Scenario

from .faults_support import EXIT_BUSY, ForkRunner, Ran, titles_for, write_config
from .figures_faults import Figure, record

__all__ = ["receiver"]

ROUNDS = 25
WIDTHS = (2, 4, 8)
LOSER_BOUND_SECONDS = 10.0  # a loser must not wait for the winner's notify budget (30 s here)
NAMED = re.compile(r"another lockwarden run is in progress \(PID (\d+), run lock ")


def test_concurrent_runs_send_one_alert_and_losers_exit_75_naming_the_winner(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    runner = ForkRunner(children, tmp_path / "runs")
    figure = Figure("row 4, overlapping runs")
    problems: list[str] = []
    losers = 0
    for width in WIDTHS:
        for round_number in range(ROUNDS):
            name = f"overlap-{width}-{round_number}"
            state_dir = tmp_path / "states" / name  # fresh: every run also races to make it
            state_dir.parent.mkdir(exist_ok=True)
            config = write_config(
                tmp_path / f"{name}.toml",
                name,
                scenario.lock,
                state_dir / "state.jsonl",
                [receiver.url()],
                timeout="30s",
            )
            argv = ["--once", "--config", str(config), "--now", scenario.at(120)]
            ran = runner.batch([(argv, {}) for _ in range(width)])
            figure.cases += 1
            for run in ran:
                figure.took(run.seconds)
            losers += sum(1 for run in ran if run.code == EXIT_BUSY)
            delivered = len(titles_for(receiver, name))
            figure.duplicates += max(delivered - 1, 0)
            trouble = _judge(ran, delivered)
            if trouble:
                figure.failures += 1
                problems.append(f"{name}: {trouble}")
    figure.detail = f"{len(WIDTHS) * ROUNDS} rounds, {losers} runs exited 75"
    record(figures, figure)
    assert problems == []
    assert losers > 0, "no two runs ever overlapped: this test proved nothing"


def _judge(ran: list[Ran], delivered: int) -> str:
    if delivered != 1:
        return f"{delivered} deliveries"
    codes = sorted(run.code for run in ran)
    if not set(codes) <= {2, EXIT_BUSY} or 2 not in codes or any(run.crashed for run in ran):
        return f"exit codes {codes}: {[run.stderr[-300:] for run in ran if run.code != 2]}"
    winners = {run.pid for run in ran if run.code == 2}
    for run in ran:
        if run.code != EXIT_BUSY:
            continue
        named = NAMED.search(run.stderr)
        if named is None or int(named.group(1)) not in winners:
            return f"a loser did not name the running PID: {run.stderr.strip()!r}"
        if run.stdout or run.seconds > LOSER_BOUND_SECONDS:
            return f"a loser printed a report or took {run.seconds:.1f} s"
    return ""
