"""Row 3: the notifier is out (connection refused, HTTP 503, a receiver that never answers)
for 1, 3 and 10 runs, then healthy. Real HTTP receivers on 127.0.0.1 (one per kind of outage),
one real child holding the lock, each case its own lock name and state; the runs are real
lockwarden runs forked from forkrun.py, one every 5 minutes of injected time (--now).

Promises: nothing is recorded as delivered during the outage; once healthy, exactly one
delivery per incident and service; every run ends within its budget — the notify timeout (1 s)
plus a generous margin for start-up on a loaded machine, far under the hanging receiver's 30 s,
so a run stuck on it fails."""

from __future__ import annotations

from pathlib import Path

from alerts.helpers import Children, Receiver
from alerts.test_end_to_end import Scenario

from .faults_support import ForkRunner, Job, titles_for, write_config
from .figures_faults import Figure, record

OUTAGES = ("refused", "http-503", "never-answers")
LENGTHS = (1, 3, 10)
BUDGET_SECONDS = 1.0 + 9.0  # [notify] timeout + start-up margin: a bound, not a speed target


def test_outage_of_1_3_10_runs_then_healthy_delivers_exactly_once(
    tmp_path: Path, children: Children, figures: list[str]
) -> None:
    receivers = {outage: Receiver() for outage in OUTAGES}
    receivers["http-503"].start()
    receivers["http-503"].mode, receivers["http-503"].fail_status = "fail", 503
    receivers["never-answers"].start()
    receivers["never-answers"].mode = "hang"
    try:
        _outage(tmp_path, children, receivers, figures)
    finally:
        for server in receivers.values():
            server.release.set()
            server.stop()


def _outage(
    tmp_path: Path, children: Children, receivers: dict[str, Receiver], figures: list[str]
) -> None:
    scenario = Scenario(tmp_path, children)
    scenario.hold()
    runner = ForkRunner(children, tmp_path / "runs")
    cases: dict[str, tuple[str, int, Path]] = {}
    for outage in OUTAGES:
        for length in LENGTHS:
            name = f"{outage}-{length}"
            state_dir = tmp_path / "states" / name
            state_dir.mkdir(parents=True, mode=0o700)
            cases[name] = (
                outage,
                length,
                write_config(
                    tmp_path / f"{name}.toml",
                    name,
                    scenario.lock,
                    state_dir / "state.jsonl",
                    [receivers[outage].url()],
                    timeout="1s",
                ),
            )
    figure = Figure("row 3, notifier outage")
    problems: list[str] = []

    def run(step: int, names: list[str]) -> None:
        jobs: list[Job] = [
            (["--once", "--config", str(cases[n][2]), "--now", scenario.at(120 + 5 * step)], {})
            for n in names
        ]
        for name, ran in zip(names, runner.batch(jobs), strict=True):
            figure.cases += 1
            figure.took(ran.seconds)
            if ran.code != 2 or ran.crashed or ran.seconds > BUDGET_SECONDS:
                figure.failures += 1
                problems.append(f"{name} step {step}: exit {ran.code} in {ran.seconds:.1f} s")

    for step in range(max(LENGTHS)):
        run(step, [name for name, (_o, length, _c) in cases.items() if length > step])
    assert all(server.payloads == [] for server in receivers.values())
    receivers["refused"].start()
    receivers["never-answers"].release.set()
    for server in receivers.values():
        server.mode = "ok"
    for step in (max(LENGTHS), max(LENGTHS) + 1):  # the last at +55 min: no reminder due yet
        run(step, list(cases))
    for name, (outage, _length, _config) in cases.items():
        delivered = len(titles_for(receivers[outage], name))
        figure.duplicates += max(delivered - 1, 0)
        if delivered != 1:
            figure.failures += 1
            problems.append(f"{name}: {delivered} deliveries once healthy")
    figure.detail = "outages of 1, 3, 10 runs x refused, HTTP 503, never answers"
    record(figures, figure)
    assert problems == []
