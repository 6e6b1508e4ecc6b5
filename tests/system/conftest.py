"""The live-systemd tests' figures (boot and boot-to-verdict times, exposure scores), printed at
the end of the pytest output next to the verdict."""

from __future__ import annotations

import pytest

FIGURES = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def system_figures(request: pytest.FixtureRequest) -> list[str]:
    return request.config.stash.setdefault(FIGURES, [])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    lines = config.stash.get(FIGURES, None)
    if lines:
        terminalreporter.section("live systemd figures")
        for line in lines:
            terminalreporter.write_line(line)
