"""`lockwarden hold` in a PID namespace entered without a /proc of its own (`unshare --pid
--fork` without `--mount-proc`, `nsenter --pid`): the /proc it reads numbers processes as the
namespace above does, so its own PID there names another process. It wrote that process's PID
and start ticks into the lock's record: an innocent process, which `inspect` names as the
holder once the supervisor is gone. It must refuse, take nothing and run nothing.

Seeded: the test starts innocent processes, and makes the hold's PID in its namespace equal to
one of theirs (ns_last_pid, written in that namespace; the test parts run as root in a PID
namespace of their own, where nothing else takes PIDs meanwhile)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Children, cli_env, require_tool
from lockwarden.support.exit_codes import EXIT_HOLD_OS_ERROR

# argv: NS_LAST_PID LOCK COPY PYTHON [--file]: sets the namespace's last PID, then holds LOCK
# with a command that copies the record it wrote.
SCRIPT = """
echo "$1" > /proc/sys/kernel/ns_last_pid
"$4" -m lockwarden hold "$2" --role migration $5 -- \
    sh -c 'cp "$0/owner.json" "$1" 2>/dev/null || cp "$0" "$1"' "$2" "$3"
echo "rc=$?"
"""


@pytest.mark.parametrize("seed", range(4))
def test_hold_without_a_proc_of_its_namespace_refuses_to_record_another_process(
    seed: int, tmp_path: Path, children: Children
) -> None:
    rng = random.Random(seed)
    innocents = [children.start([require_tool("sleep"), "120"]) for _ in range(3)]
    innocent = rng.choice(innocents)
    as_file = rng.choice(["", "--file"])
    lock, copy = tmp_path / "LOCK", tmp_path / "record.json"
    argv = [require_tool("unshare"), "--pid", "--fork", require_tool("sh"), "-c", SCRIPT, "sh"]
    argv += [str(innocent.pid - 1), str(lock), str(copy), sys.executable, as_file]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env())
    context = f"seed {seed}: innocent PID {innocent.pid}, {as_file or 'a directory'}"
    if copy.exists():
        written = json.loads(copy.read_text())
        pytest.fail(f"{context}: it held the lock, recording PID {written['pid']}: {written}")
    assert f"rc={EXIT_HOLD_OS_ERROR}" in done.stdout, f"{context}: {done.stdout} {done.stderr}"
    assert "--mount-proc" in done.stderr, f"{context}: {done.stderr}"
    assert not lock.exists(), context
