"""Records that name their PID namespace, judged from a namespace entered without a /proc of its
own (`unshare --pid --fork`, `nsenter --pid`): the /proc read there is its parent's, whose PIDs
are other processes than the record's.

Mercurial (`HOST/PIDNS:PID`) and py-filelock 4.x (`HOST?pidns-HEX`) record the namespace of the
PID they write. lockwarden in that same namespace once took the record's namespace for the one
its /proc numbers, and looked the PID up there: a live hg's lock read `stale` (with the
command that frees it) when no process had that number in the parent's /proc, and `held` by an
innocent one that had it. The namespace a record's PID is compared with is now the one the
/proc read shows, so such a lock is `unknown` (`other_pid_namespace`).

A differential, in an isolated PID namespace with a /proc of its own (the parent): its decoy
`sleep`s, then a namespace below it without one, where real holders (`hg debuglocks`, a
SoftFileLock of the installed filelock) are each given, through ns_last_pid, a decoy's number or
one nobody has in the parent, and lockwarden inspects each lock from there. A live holder's lock
is never stale nor free, and no process but the holder is named.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import SRC, Children, pid_namespace_command, require_tool

SEEDS = range(4)
LOCKS_PER_SEED = 3
DECOYS = 3

# Runs in the namespace without a /proc of its own: argv is the seed, the directory, and the
# decoys' PIDs (in the parent, the /proc read here). Prints one JSON line per lock.
DRIVER = r"""
import json, os, random, subprocess, sys, time

seed, directory, decoys = int(sys.argv[1]), sys.argv[2], [int(p) for p in sys.argv[3:]]
chooser = random.Random(seed)
HG_ENV = {**os.environ, "HGPLAIN": "1", "HGRCPATH": os.devnull}
SOFT = "import filelock, sys, time\nlock = filelock.SoftFileLock(sys.argv[1])\nlock.acquire()\n"
SOFT += "time.sleep(600)\n"  # the lock object kept: a collected one lets go


def start_at(pid, argv, **options):
    # The next PID this namespace gives is the one after ns_last_pid.
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(pid - 1))
    return subprocess.Popen(argv, stdin=subprocess.PIPE, **options)


def parent_pid(inner):
    # The holder's number in the parent's /proc, the one lockwarden names.
    own = os.readlink("/proc/self/ns/pid")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != own:
                continue
            with open(f"/proc/{entry}/status") as status:
                line = next(line for line in status if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if line.split()[-1] == str(inner):
            return int(entry)
    return None


def hold(number, target):
    kind = chooser.choice(["hg-wlock", "hg-store", "soft"])
    if kind == "soft":
        path = os.path.join(directory, f"soft-{number}.lock")
        holder = start_at(target, [sys.executable, "-c", SOFT, path])
    else:
        repository = os.path.join(directory, f"repo-{number}")
        subprocess.run(["hg", "init", repository], check=True, env=HG_ENV)
        wlock = kind == "hg-wlock"
        flag, lock = ("--set-wlock", "wlock") if wlock else ("--set-lock", "store/lock")
        path = os.path.join(repository, ".hg", lock)
        holder = start_at(target, ["hg", "debuglocks", flag], cwd=repository, env=HG_ENV)
    deadline = time.monotonic() + 20
    while not os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return kind, path, holder


targets = chooser.sample(decoys, k=chooser.randint(0, len(decoys)))
targets += [chooser.randrange(2000, 30000) for _ in range(3 - len(targets))]
chooser.shuffle(targets)
for number, target in enumerate(targets):
    kind, path, holder = hold(number, target)
    if os.environ.get("DECLARE") == "1":
        os.environ["LOCKWARDEN_PID_NAMESPACE"] = "complete"
    inspected = subprocess.run(
        [sys.executable, "-m", "lockwarden", "inspect", path, "--json"],
        capture_output=True, text=True, timeout=120,
    )
    print(json.dumps({
        "kind": kind, "target": target, "pid": holder.pid, "outer": parent_pid(holder.pid),
        "alive": holder.poll() is None, "exists": os.path.lexists(path),
        "report": inspected.stdout, "errors": inspected.stderr[-2000:],
    }), flush=True)
    holder.kill()
    holder.wait()
"""


def run_seed(children: Children, directory: Path, seed: int) -> list[dict[str, Any]]:
    """The driver run below a namespace of its own with its decoys; one result per lock."""
    require_tool("hg")
    declare = "1" if random.Random(seed).random() < 0.5 else "0"
    env = {**os.environ, "PYTHONPATH": SRC, "DECLARE": declare}
    env.pop("LOCKWARDEN_PID_NAMESPACE", None)
    # The decoys get numbers above the few the namespace below gives first; bash is its init,
    # which reaps what lockwarden's runs leave (an unreaped zombie keeps its number).
    script = (
        "echo 1000 > /proc/sys/kernel/ns_last_pid; "
        f'for i in $(seq {DECOYS}); do sleep 600 & decoys="$decoys $!"; done; '
        "unshare --pid --fork --kill-child bash -c '\"$@\"; exit $?' driver "
        '"$0" -c "$1" "$2" "$3" $decoys; status=$?; kill $decoys; exit $status'
    )
    command = [*pid_namespace_command(), "bash", "-c", script]
    parent = children.start(
        [*command, sys.executable, DRIVER, str(seed), str(directory)], env=env, cwd=directory
    )
    try:
        output, errors = parent.communicate(timeout=300)
    finally:
        parent.kill()
    results = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert len(results) == LOCKS_PER_SEED, (seed, output[-2000:], errors[-2000:])
    return results


@pytest.mark.parametrize("seed", SEEDS)
def test_a_live_holder_in_a_namespace_without_its_own_proc_is_never_stale_nor_another(
    seed: int, tmp_path: Path, children: Children
) -> None:
    for result in run_seed(children, tmp_path, seed):
        assert result["alive"] and result["exists"], (seed, result)
        assert result["pid"] == result["target"], (seed, result)  # placed where it was meant
        finding = json.loads(result["report"])["locks"][0]
        named = [holder["pid"] for holder in finding["holders"]]
        context = (seed, result["kind"], result["target"], finding["state"], finding["reason"])
        assert finding["state"] not in ("stale", "free"), context
        assert named in ([], [result["outer"]]), (context, named)
