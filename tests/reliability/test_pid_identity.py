"""Row 7: PID identity. In a private PID namespace, real processes are put at chosen PIDs
(through /proc/sys/kernel/ns_last_pid) to stage every way a recorded PID can lie: reused by
another program (or by a daemon's first process, since gone, whose daemon carries the PID as
its session and group), from another boot, a zombie whose thread still runs, an exited holder,
and a holder in a nested namespace whose PID means something else here. lockwarden's real pipeline
judges each lock inside that namespace (tests/reliability/pid_namespace_scenarios.py); the
target is 0 false `stale` and 0 false `held`.

Where the kernel does not allow the namespace, the test says why: it fails under CI=true and
skips, with the reason, on a developer's machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import SRC, pid_namespace_command
from reliability.support import Figures

SCENARIOS = Path(__file__).with_name("pid_namespace_scenarios.py")
EXPECTED_SCENARIOS = 10


def test_no_false_stale_and_no_false_held_for_lying_pids(tmp_path: Path, figures: Figures) -> None:
    command = pid_namespace_command()
    environment = {**os.environ, "PYTHONPATH": SRC}
    started = time.perf_counter()
    completed = subprocess.run(
        [*command, sys.executable, str(SCENARIOS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    elapsed = time.perf_counter() - started
    assert completed.returncode == 0, completed.stderr
    results = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    figure = figures.row("7 PID identity")
    wrong = [result for result in results if result["state"] not in result["allowed"]]
    for result in results:
        figure.count(elapsed / max(len(results), 1), failed=result in wrong)
    false_stale = sum(1 for result in wrong if result["state"] == "stale")
    false_held = sum(1 for result in wrong if result["state"] in ("held", "held_too_long"))
    figure.notes.append(f"false stale {false_stale}, false held {false_held}")
    assert len(results) == EXPECTED_SCENARIOS, completed.stdout + completed.stderr
    assert not wrong, json.dumps(wrong, indent=2)
    zombie = next(result for result in results if "zombie main thread" in result["scenario"])
    assert zombie["facts"] == {"state": "Z", "threads": 2}, "the zombie-with-thread was not staged"
