"""The reliability suite's shared fixture and the figures it prints.

Every module records, per promise, how many cases it tried, how many failed and the worst time
one case took; `pytest_terminal_summary` prints them at the end of the run, so the figures are
in the CI log next to the verdict.
"""

from __future__ import annotations

import pytest

from reliability.support import FIGURES, Figures


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> Figures:
    return request.config.stash.setdefault(FIGURES, Figures())


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    collected = config.stash.get(FIGURES, None)
    if collected is None or not (collected.by_row or collected.lines):
        return
    terminalreporter.section("reliability figures")
    for name, figure in sorted(collected.by_row.items()):
        line = (
            f"{name}: {figure.cases} cases, {figure.failures} failures, "
            f"worst {figure.worst_s * 1000:.1f} ms"
        )
        terminalreporter.write_line(line)
        for note in figure.notes:
            terminalreporter.write_line(f"    {note}")
    for line in collected.lines:  # rows 2-5, 8, 9 (figures_faults.py) write whole lines
        terminalreporter.write_line(line)
