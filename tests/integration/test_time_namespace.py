"""lockwarden in a time namespace that shifts the boot clock (`unshare --time --boottime`, a
container a checkpoint was restored into), judging records written outside it.

The kernel shows a reader in such a namespace every process's start ticks shifted by its
offset. py-filelock's SoftFileLock (>= 3.30) records its holder's start ticks as the host reads
them, so lockwarden there once read a live holder's ticks as another process's and called its
lock `stale` ("PID N now belongs to another process"), removable. Differing ticks are no proof
there: such a lock is `unknown`.

A differential: real SoftFileLock holders (the installed filelock) alive or killed at random,
judged by `lockwarden --once` in a time namespace with a random boot-clock offset, or none.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, cli_env, require_tool, write_config

SEEDS = range(6)
LOCKS_PER_SEED = 3

SOFT_HOLDER = """
import sys, time, filelock
lock = filelock.SoftFileLock(sys.argv[1])
lock.acquire()
print("ready", flush=True)
time.sleep(600)
"""


def in_time_namespace(offset: int) -> list[str]:
    """`unshare` for a time namespace whose boot clock runs `offset` seconds ahead."""
    unshare = require_tool("unshare")
    user = [] if os.geteuid() == 0 else ["-U", "-r"]
    return [unshare, *user, "--time", f"--boottime={offset}", "--fork"]


def once(children: Children, config: str, offset: int) -> dict[str, dict[str, Any]]:
    command = [sys.executable, "-m", "lockwarden", "--once", "--config", config, "--json"]
    looker = children.start([*in_time_namespace(offset), *command], env=cli_env())
    output, errors = looker.communicate(timeout=120)
    assert output.strip(), errors
    return {lock["name"]: lock for lock in json.loads(output)["locks"]}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_live_holder_is_never_stale_from_a_shifted_boot_clock(
    seed: int, tmp_path: Path, children: Children
) -> None:
    chooser = random.Random(seed)
    offset = 0 if chooser.random() < 0.25 else chooser.randrange(1, 10**7)
    alive, tables = {}, []
    for number in range(LOCKS_PER_SEED):
        path = tmp_path / f"soft-{number}.lock"
        holder = children.python(SOFT_HOLDER, str(path))
        if chooser.random() < 0.3:
            holder.kill()
            holder.wait(timeout=10)
        alive[f"lock-{number}"] = holder.pid if holder.poll() is None else None
        tables.append(f'[[lock]]\nname = "lock-{number}"\npath = "{path}"\n')
    (tmp_path / "state").mkdir(mode=0o700)
    config = write_config(
        tmp_path / "lockwarden.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n[host]\n'
        "blocked_writers = false\n\n" + "\n".join(tables),
    )

    findings = once(children, config, offset)

    for name, pid in alive.items():
        finding = findings[name]
        context = (seed, offset, name, pid, finding["state"], finding["reason"])
        named = [holder["pid"] for holder in finding["holders"]]
        if pid is None:
            assert finding["state"] in ("stale", "unknown"), context
        elif offset == 0:
            assert finding["state"] == "held" and named == [pid], context
        else:
            assert finding["state"] in ("held", "unknown") and named in ([], [pid]), context
