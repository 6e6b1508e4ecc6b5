"""Run as PID 1 of a PID namespace of its own, with its own /proc (`unshare --pid --fork
--mount-proc`), as lockwarden runs in a container: start kernel-lock holders in a random
arrangement (seeded by argv[1]), judge every lock with the real `lockwarden inspect --json` run
inside the namespace, and print one JSON line per lock with what this script knows (it started
every process and knows which of them holds each lock) and what lockwarden said.

In such a namespace /proc/locks leaves out a lock whose taker has exited while another process
still holds it (flock(1)'s `( flock -n 9 || exit 1; job ) 9>FILE` idiom), so the arrangements mix
those with locks /proc/locks does list, and with files that are open but not locked.

This script is PID 1 of its namespace: when it exits, the kernel ends everything it started.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HOLD = 120

TAKER_EXITS = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
for _ in range(int(sys.argv[2])):
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
os._exit(0)  # the taker exits at once; its children hold the lock
"""

ONE_HOLDER = """
import fcntl, struct, sys, time
style = sys.argv[2]
handle = open(sys.argv[1], "r+")
if style == "posix":
    fcntl.lockf(handle, fcntl.LOCK_EX)
elif style == "ofd":
    fcntl.fcntl(handle, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
elif style == "released":
    fcntl.flock(handle, fcntl.LOCK_EX)
    fcntl.flock(handle, fcntl.LOCK_UN)
elif style == "flock":
    fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""

CASES = (
    "subshell_idiom",  # ( flock -n 9 || exit 1; exec sleep ) 9>FILE: the subshell holds it
    "exec_idiom",  # exec 9>FILE; flock 9; exec sleep: the shell (now sleep) holds it
    "flock_command",  # flock FILE sleep: flock(1) and its command hold it
    "taker_exits",  # a taker forks children and exits: the children hold it
    "flock",
    "posix",
    "ofd",
    "released",  # took and released, still open: free
    "open_unlocked",  # open, never locked: free
    "nobody",  # no process has it open: free
)


def has_lock(pid: int) -> bool:
    """Readiness only (the truth is what this script started): a descriptor of `pid` shows a
    lock in its fdinfo."""
    try:
        names = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return False
    for name in names:
        try:
            if "\nlock:" in Path(f"/proc/{pid}/fdinfo/{name}").read_text():
                return True
        except OSError:
            continue
    return False


def children_of(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def wait_for(probe, what: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.02)
    raise SystemExit(f"not ready: {what}")


def python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, text=True
    )


def arrange(case: str, lock: Path, rng: random.Random) -> set[int]:
    """Start `case` on `lock`; the PIDs (in this namespace) that hold it once it is ready."""
    lock.touch()
    if case == "subshell_idiom":
        shell = subprocess.Popen(
            ["sh", "-c", f"( flock -n 9 || exit 1; exec sleep {HOLD} ) 9>'{lock}' & echo $!; wait"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert shell.stdout is not None
        holder = int(shell.stdout.readline())
        wait_for(lambda: has_lock(holder), case)
        return {holder}
    if case == "exec_idiom":
        shell = subprocess.Popen(["sh", "-c", f"exec 9>'{lock}'; flock 9; exec sleep {HOLD}"])
        wait_for(lambda: has_lock(shell.pid), case)
        return {shell.pid}
    if case == "flock_command":
        flock = subprocess.Popen(["flock", str(lock), "sleep", str(HOLD)])
        [command] = wait_for(lambda: children_of(flock.pid), case)
        return {flock.pid, command}
    if case == "taker_exits":
        count = rng.randint(1, 3)
        taker = python(TAKER_EXITS, str(lock), str(count))
        taker.wait()
        forked = wait_for(lambda: [pid for pid in orphans() if has_lock(pid)] or None, case)
        return set(forked)
    if case in ("flock", "posix", "ofd", "released", "open_unlocked"):
        holder = python(ONE_HOLDER, str(lock), case)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        return set() if case in ("released", "open_unlocked") else {holder.pid}
    return set()  # nobody


ADOPTED: set[int] = set()


def orphans() -> list[int]:
    """Children of this script (PID 1) that it did not start: reparented orphans not yet
    claimed by an earlier arrangement."""
    fresh = [pid for pid in children_of(os.getpid()) if pid not in STARTED and pid not in ADOPTED]
    ADOPTED.update(fresh)
    return fresh


STARTED: set[int] = set()


def inspect(lock: Path) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-m", "lockwarden", "inspect", "--json", str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    [finding] = json.loads(completed.stdout)["locks"]
    return finding  # type: ignore[no-any-return]


def main() -> None:
    seed, directory = int(sys.argv[1]), Path(sys.argv[2])
    assert os.getpid() == 1, "run me as PID 1 of a PID namespace of my own"
    rng = random.Random(seed)
    cases = [rng.choice(CASES) for _ in range(rng.randint(3, 6))]
    truth = {}
    for number, case in enumerate(cases):
        lock = directory / f"{number}-{case}.lock"
        truth[lock] = (case, arrange(case, lock, rng))
        STARTED.update(children_of(os.getpid()))
        time.sleep(rng.uniform(0, 0.05))
    for lock, (case, holders) in truth.items():
        finding = inspect(lock)
        said = {holder["pid"] for holder in finding.get("holders", [])}  # type: ignore[attr-defined]
        print(
            json.dumps(
                {
                    "seed": seed,
                    "lock": lock.name,
                    "case": case,
                    "expected_state": "held" if holders else "free",
                    "expected_holders": sorted(holders),
                    "state": finding["state"],
                    "holders": sorted(said),
                    "reason": finding.get("reason"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
