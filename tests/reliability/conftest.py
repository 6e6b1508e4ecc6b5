"""Figures for the reliability suite: each module records one line per row (cases tried,
failures, duplicates, worst time) and the terminal summary prints them all."""

from __future__ import annotations

import pytest

from .figures_faults import FIGURES


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = []


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> list[str]:
    return request.config.stash[FIGURES]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("reliability figures")
        for line in lines:
            terminalreporter.write_line(line)
