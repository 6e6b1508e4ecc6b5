"""A minutely `--once` (simulated with `--now`) over a kernel lock: a brief lock inside a
long-lived process never warns, a lock held continuously by the same process escalates on
schedule. The sighting memory lives in the state journal, alerting on or off."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, run_json, write_config

# A long-lived process that takes and drops a flock when told: `lock` / `unlock` on stdin.
ON_COMMAND = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
for line in sys.stdin:
    fcntl.flock(handle, fcntl.LOCK_EX if line.strip() == "lock" else fcntl.LOCK_UN)
    print("ok", flush=True)
"""

RUNS = 10


def tell(process: subprocess.Popen[str], command: str) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "ok"


def config(tmp_path: Path, alerting: bool) -> str:
    notify = '[notify]\nurls = ["json://127.0.0.1:9"]\n' if alerting else ""
    text = (
        '[defaults]\nwarn_after = "3m"\ncritical_after = "5m"\n\n'
        f'[[lock]]\nname = "store"\npath = "{tmp_path / "store.lock"}"\nformat = "kernel"\n\n'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n{notify}'
    )
    path = write_config(tmp_path / "config.toml", text)
    Path(path).chmod(0o600)
    return path


def minutely_runs(
    tmp_path: Path, children: Children, held_at: set[int], alerting: bool
) -> list[tuple[int, dict[str, Any]]]:
    """RUNS runs a minute apart; the process holds the lock during the runs in `held_at`
    only (taken just before the run, dropped just after)."""
    path = config(tmp_path, alerting)
    holder = children.python(ON_COMMAND, str(tmp_path / "store.lock"))
    start = datetime.now(UTC) + timedelta(minutes=1)
    results = []
    for run in range(RUNS):
        if run in held_at and run - 1 not in held_at:
            tell(holder, "lock")
        if run not in held_at and run - 1 in held_at:
            tell(holder, "unlock")
        now = (start + timedelta(minutes=run)).strftime("%Y-%m-%dT%H:%M:%SZ")
        code, document = run_json("--once", "--config", path, "--now", now)
        results.append((code, document["locks"][0]))
    return results


@pytest.fixture
def controlled(children: Children) -> Children:
    """children.python, with a stdin pipe for the holder's commands."""
    original = children.start

    def start(argv: list[str], ready: str | None = None, **kwargs: object) -> Any:
        return original(argv, ready=ready, stdin=subprocess.PIPE, **kwargs)

    children.start = start  # type: ignore[method-assign]
    return children


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_brief_locks_in_a_long_lived_process_never_warn(
    tmp_path: Path, controlled: Children, alerting: bool
) -> None:
    """Held at runs 1-2, 4-5 and 7-8, free in between: the holder has run for up to 9
    minutes (past critical_after), but no run saw the lock held for 3 minutes."""
    results = minutely_runs(tmp_path, controlled, {1, 2, 4, 5, 7, 8}, alerting)
    assert [code for code, _ in results] == [0] * RUNS
    held = [finding for _, finding in results if finding["state"] != "free"]
    assert {finding["state"] for finding in held} == {"held"}
    # First sighting of each series: the running time, an upper bound; the next: at least 1m.
    assert [finding["held"]["bound"] for finding in held] == ["at_most", "at_least"] * 3
    assert all(f["held"]["seconds"] == 60 for f in held if f["held"]["bound"] == "at_least")


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_a_lock_held_continuously_escalates_on_schedule(
    tmp_path: Path, controlled: Children, alerting: bool
) -> None:
    """Taken at run 2 and kept: at least 3 minutes at run 5 (warning), 5 at run 7 (critical)."""
    results = minutely_runs(tmp_path, controlled, set(range(2, RUNS)), alerting)
    assert [code for code, _ in results] == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2]
    states = [finding["state"] for _, finding in results]
    assert states == ["free"] * 2 + ["held"] * 3 + ["held_too_long"] * 5
    at_least = [finding["held"]["seconds"] for _, finding in results[3:]]
    assert at_least == [60.0 * minutes for minutes in range(1, RUNS - 2)]
    assert (results[7][1]["held"]["bound"], results[7][1]["held"]["seconds"]) == ("at_least", 300)
