"""A shell holds a flock on its own descriptor (`exec 9>>FILE`), taken by `flock 9` children.
Taken afresh before every run, the runs must not chain those holds into one long one (it paged
critical by run 7); taken once and kept, it escalates as any hold does. The taker /proc/locks
names tells the holds apart, and only the host's PID namespace shows a taker that has exited
(docs/design.md, "Where /proc/locks leaves locks out"), so this file runs in the host part
(scripts/test-parts.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sighting_memory import RUNS, controlled, minutely_runs

from conftest import Children, require_tool

__all__ = ["controlled"]  # the fixture, used by its name


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_a_shell_that_retakes_its_lock_before_every_run_never_warns(
    tmp_path: Path, controlled: Children, alerting: bool
) -> None:
    require_tool("flock")
    results = minutely_runs(
        tmp_path, controlled, set(range(1, RUNS)), alerting, shell=True, retake=True
    )
    assert [code for code, _ in results] == [0] * RUNS
    held = [finding for _, finding in results[1:]]
    assert {finding["state"] for finding in held} == {"held"}
    assert {finding["held"]["bound"] for finding in held} == {"unknown"}  # its taker is gone
    assert len({finding["holders"][0]["pid"] for finding in held}) == 1  # the one shell


def test_a_shell_that_keeps_its_lock_escalates_on_schedule(
    tmp_path: Path, controlled: Children
) -> None:
    """Taken at run 2 and kept: one taker, one series; at least 3 minutes at run 5."""
    require_tool("flock")
    results = minutely_runs(tmp_path, controlled, set(range(2, RUNS)), False, shell=True)
    assert [code for code, _ in results] == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2]
    at_least = [finding["held"]["seconds"] for _, finding in results[3:]]
    assert at_least == [60.0 * minutes for minutes in range(1, RUNS - 2)]
