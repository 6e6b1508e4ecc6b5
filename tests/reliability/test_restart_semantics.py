"""Row 5 (restart semantics) and the clock-step part of row 10. lockwarden is one-shot: all it
knows between runs is its journal. Each case is a sequence of real runs (forked from
forkrun.py, calling the real CLI) with the clock injected by --now, one real child holding the
lock (mkdir style, removed when it is told to stop), and a real HTTP receiver on 127.0.0.1.

Promises: an incident that opens between two runs gets exactly one alert; one that resolves
between two runs exactly one "resolved"; one that lasts across many runs one alert and no
reminder before repeat_interval (1h) — then exactly one; a wall clock stepped back or forward
an hour between runs neither opens a new incident, nor resolves one, nor delays a reminder
by more than one run interval past repeat_interval."""

from __future__ import annotations

from pathlib import Path

from alerts.helpers import Children, Receiver, receiver, title_kind
from alerts.test_end_to_end import Scenario

from .faults_support import ForkRunner, titles_for, write_config
from .figures_faults import Figure, record

__all__ = ["receiver"]

RUN_EVERY = 5  # minutes between runs
INTERVAL = 60  # repeat_interval in minutes


class Case:
    """One lock, its holder, its config and the runs made so far."""

    def __init__(
        self, name: str, tmp_path: Path, children: Children, runner: ForkRunner, rx: Receiver
    ) -> None:
        (tmp_path / name).mkdir()
        self.name, self.runner, self.receiver = name, runner, rx
        self.scenario = Scenario(tmp_path / name, children)
        self.config = write_config(
            tmp_path / name / "case.toml",
            name,
            self.scenario.lock,
            self.scenario.state_path,
            [rx.url()],
        )
        self.delivered_at: list[tuple[float, str]] = []  # (wall minutes, kind)
        self.worst = 0.0
        self.problems: list[str] = []

    def run(self, minutes: float) -> None:
        before = len(titles_for(self.receiver, self.name))
        ran = self.runner.once(self.config, self.scenario.at(minutes))
        self.worst = max(self.worst, ran.seconds)
        if ran.crashed or ran.code not in (0, 1, 2):
            self.problems.append(f"run at {minutes}: exit {ran.code}: {ran.stderr[-300:]}")
        for title in titles_for(self.receiver, self.name)[before:]:
            self.delivered_at.append((minutes, title_kind(title)))

    def kinds(self) -> list[str]:
        return [kind for _minutes, kind in self.delivered_at]


def test_incidents_across_restarts_alert_once_resolve_once_and_remind_on_time(
    tmp_path: Path, children: Children, receiver: Receiver, figures: list[str]
) -> None:
    runner = ForkRunner(children, tmp_path / "runs")
    cases = {
        name: Case(name, tmp_path, children, runner, receiver)
        for name in ("opens", "resolves", "lasts", "clock-back", "clock-forward")
    }
    opens = cases["opens"]
    opens.run(0)  # free
    opens.scenario.hold()
    for minutes in (120, 125, 130):
        opens.run(minutes)
    expect(opens, ["writes blocked"])

    resolves = cases["resolves"]
    resolves.scenario.hold()
    resolves.run(120)
    resolves.scenario.release()
    for minutes in (125, 130, 135):
        resolves.run(minutes)
    expect(resolves, ["writes blocked", "resolved"])

    lasts = cases["lasts"]
    lasts.scenario.hold()
    for minutes in range(120, 120 + INTERVAL + 2 * RUN_EVERY, RUN_EVERY):
        lasts.run(minutes)
    expect(lasts, ["writes blocked", "reminder"])
    assert lasts.delivered_at[1][0] == 120 + INTERVAL  # not before, and not a run later

    for case, step in ((cases["clock-back"], -60), (cases["clock-forward"], 60)):
        case.scenario.hold()
        real = 120  # the minutes that really passed; the wall clock is real + offset
        offset = 0
        while real <= 120 + INTERVAL + RUN_EVERY:
            if real == 135:
                offset = step  # the wall clock is stepped between two runs
            case.run(real + offset)
            real += RUN_EVERY
        kinds = case.kinds()
        if (
            kinds[:1] != ["writes blocked"]
            or "resolved" in kinds
            or kinds.count("writes blocked") != 1
        ):
            case.problems.append(f"deliveries {case.delivered_at}")
        if "reminder" not in kinds:  # due by real 180, allowed one run late: real 185
            case.problems.append(f"no reminder by one interval and one run: {case.delivered_at}")

    figure = Figure("row 5, restart semantics (+ row 10 clock steps)")
    for case in cases.values():
        figure.cases += 1
        figure.failures += bool(case.problems)
        figure.took(case.worst)
        figure.duplicates += max(case.kinds().count("writes blocked") - 1, 0)
    figure.detail = f"{sum(len(c.delivered_at) for c in cases.values())} deliveries checked"
    record(figures, figure)
    assert {name: case.problems for name, case in cases.items() if case.problems} == {}


def expect(case: Case, kinds: list[str]) -> None:
    if case.kinds() != kinds:
        case.problems.append(f"expected {kinds}, got {case.delivered_at}")
