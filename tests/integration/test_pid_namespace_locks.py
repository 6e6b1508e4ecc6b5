"""Kernel locks seen from inside a PID namespace of its own, as lockwarden runs in a container.

There /proc/locks leaves out a lock whose taker has exited while another process still holds it
(the kernel's locks_show() skips a lock whose owner's PID does not translate into the reader's
namespace): flock(1)'s `( flock -n 9 || exit 1; job ) 9>FILE` idiom once read `free` for as long
as the job ran. A differential: tests/integration/pidns_kernel_scenarios.py runs as PID 1 of a
fresh namespace, arranges real holders at random (seeded; the seed is in the test id) and
compares `lockwarden inspect --json`, run inside, with the holders it started.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Children, cli_env, pid_namespace_command, require_tool

SCENARIOS = Path(__file__).with_name("pidns_kernel_scenarios.py")
SEEDS = range(8)


def run_inside(children: Children, *argv: str, timeout: float = 120) -> list[str]:
    """Run argv as PID 1 of a new PID namespace; its stdout lines. The namespace ends with it."""
    process = children.start([*pid_namespace_command(), *argv], env=cli_env())
    try:
        output, errors = process.communicate(timeout=timeout)
    finally:
        process.kill()
    assert process.returncode == 0, errors
    return [line for line in output.splitlines() if line.strip()]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_kernel_lock_inside_a_pid_namespace_names_exactly_its_holders(
    seed: int, tmp_path: Path, children: Children
) -> None:
    require_tool("flock")
    lines = run_inside(children, sys.executable, str(SCENARIOS), str(seed), str(tmp_path))
    results = [json.loads(line) for line in lines]
    assert results, "the scenario judged no lock"
    wrong = [
        result
        for result in results
        if (result["state"], result["holders"])
        != (result["expected_state"], result["expected_holders"])
    ]
    assert wrong == [], json.dumps(wrong, indent=1)


DISCOVER = """
import json, subprocess, sys
lock = sys.argv[1]
shell = subprocess.Popen(
    ["sh", "-c", f"( flock -n 9 || exit 1; exec sleep 120 ) 9>'{lock}' & echo $!; wait"],
    stdout=subprocess.PIPE, text=True,
)
holder = int(shell.stdout.readline())
import os, time
def locked():  # a descriptor of the subshell may close between the listing and its read
    for fd in os.listdir(f"/proc/{holder}/fdinfo"):
        try:
            if "lock:" in open(f"/proc/{holder}/fdinfo/{fd}").read():
                return True
        except FileNotFoundError:
            pass
    return False
for _ in range(500):
    if locked():
        break
    time.sleep(0.02)
proc_locks = open("/proc/locks").read()
found = subprocess.run(
    [sys.executable, "-m", "lockwarden", "discover", "--json"],
    capture_output=True, text=True, timeout=60,
)
report = json.loads(found.stdout)
print(json.dumps({"holder": holder, "proc_locks": proc_locks, "discover": report}))
"""


def test_discover_inside_a_pid_namespace_finds_a_lock_proc_locks_leaves_out(
    tmp_path: Path, children: Children
) -> None:
    require_tool("flock")
    lock = tmp_path / "job.lock"
    [line] = run_inside(children, sys.executable, "-c", textwrap.dedent(DISCOVER), str(lock))
    seen = json.loads(line)
    assert str(lock.stat().st_ino) not in seen["proc_locks"]  # the kernel leaves it out here
    [finding] = [found for found in seen["discover"]["locks"] if found["path"] == str(lock)]
    assert finding["state"] == "held"
    assert [holder["pid"] for holder in finding["holders"]] == [seen["holder"]]
