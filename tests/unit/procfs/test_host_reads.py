"""One run reads /proc/locks, the process table and each fdinfo entry once, however many locks
it checks, and reads process details (stat, status, cmdline, cgroup) only for the processes
that hold or are named by a lock. Observed with an audit hook on open() in a fresh interpreter
running the real CLI, while real children hold real locks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from conftest import MKDIR_HOLDER, Children, cli_env, run_json, write_config

FLOCK_SEVERAL = """
import fcntl, sys, time
handles = [open(path, "a") for path in sys.argv[1:]]
for handle in handles:
    fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""

AUDITED_RUN = """
import json, sys, threading
opened, listed = [], []
directories = {}  # the /proc directory each thread opened last, to name what it opens in it

def audit(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith("/proc"):
        opened.append(args[0])
        directories[threading.get_ident()] = args[0]
    elif event == "open" and isinstance(args[0], str) and args[0].isdigit():
        # an fdinfo entry opened by its name in its /proc/PID/fdinfo directory (the audit
        # event carries no dir_fd; each walking thread opens its entries in the directory
        # it opened last)
        opened.append(directories.get(threading.get_ident(), "?") + "/" + args[0])
    elif event == "os.listdir" and isinstance(args[0], str | bytes):  # psutil lists bytes
        listed.append(args[0] if isinstance(args[0], str) else args[0].decode())

sys.addaudithook(audit)
from lockwarden.cli.commands import main
code = main(["--once", "--json", "--config", sys.argv[1]])
with open(sys.argv[2], "w") as handle:
    json.dump({"code": code, "opened": opened, "listed": listed}, handle)
"""

DETAIL = re.compile(r"^/proc/(\d+)/(stat|status|cmdline|cgroup)$")
FDINFO = re.compile(r"^/proc/\d+/fdinfo/\d+$")


def test_five_held_locks_cost_one_scan_and_details_only_of_their_holders(
    tmp_path: Path, children: Children
) -> None:
    files = [tmp_path / f"store-{number}.lock" for number in range(5)]
    for path in files:
        path.touch()
    flock_holder = children.python(FLOCK_SEVERAL, *map(str, files))
    record = tmp_path / "wa" / "LOCK"
    record.parent.mkdir()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record_holder = children.python(MKDIR_HOLDER, str(record), "maintenance-job", started)
    tables = "".join(
        f'[[lock]]\nname = "store-{n}"\npath = "{path}"\nformat = "kernel"\n\n'
        for n, path in enumerate(files)
    )
    config = write_config(
        tmp_path / "config.toml", tables + f'[[lock]]\nname = "wa"\npath = "{record}"\n'
    )
    audit_file = tmp_path / "audit.json"
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(AUDITED_RUN), config, str(audit_file)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout)
    assert [lock["state"] for lock in document["locks"]] == ["held"] * 6
    audit = json.loads(audit_file.read_text())
    opened = Counter(audit["opened"])

    assert opened["/proc/locks"] == 1
    assert audit["listed"].count("/proc") == 1  # the process table, once
    fdinfo = {path: count for path, count in opened.items() if FDINFO.match(path)}
    assert fdinfo, "the descriptor scan did not run"
    assert max(fdinfo.values()) == 1, "an fdinfo entry was read more than once"
    # Pipes, sockets and /dev/null are passed over on their link alone; lock files are read.
    links = {
        fd: os.readlink(f"/proc/{flock_holder.pid}/fd/{fd}")
        for fd in os.listdir(f"/proc/{flock_holder.pid}/fd")
    }
    pseudo = [fd for fd, target in links.items() if target.startswith(("pipe:", "socket:"))]
    lock_fds = [fd for fd, target in links.items() if target in set(map(str, files))]
    assert pseudo and len(lock_fds) == 5, links
    assert not [fd for fd in pseudo if f"/proc/{flock_holder.pid}/fdinfo/{fd}" in opened]
    assert all(f"/proc/{flock_holder.pid}/fdinfo/{fd}" in opened for fd in lock_fds)

    details = [match for match in map(DETAIL.match, audit["opened"]) if match]
    # The owner record's PID is checked against nested PID namespaces: a process whose
    # namespace link cannot be read (this sandbox's PID 1 hides it even from root) has its
    # status read instead; every other process costs one readlink, no open.
    hidden = {pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _ns_hidden(pid)}
    named = {int(match.group(1)) for match in details}
    # A process that exited while the run looked at it (other work on a busy host) cannot
    # have its namespace link read either: it counts with the hidden ones.
    gone = {pid for pid in named if not os.path.exists(f"/proc/{pid}")}
    # Processes of containers running beside the test live in nested PID namespaces: the
    # record's PID is looked up among them by design (a "namespace twin").
    nested = {pid for pid in named - gone if _in_nested_namespace(pid)}
    ours = {flock_holder.pid, record_holder.pid}
    assert named - hidden - gone - (nested - ours) == ours, sorted(named)
    reads = Counter(match.group(0) for match in details)
    # Each holder's status, cmdline and cgroup once; its stat three times: psutil reads it when
    # it makes the Process (create_time) and again in oneshot (status), and the snapshot reads
    # the kernel's start ticks and name from it (psutil has neither in that form).
    assert {path.rpartition("/")[2]: count for path, count in reads.items()} == {
        "stat": 3,
        "status": 1,
        "cmdline": 1,
        "cgroup": 1,
    }, reads


def _in_nested_namespace(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return len(line.split()) > 2
    except OSError:
        return False
    return False


def _ns_hidden(pid: int) -> bool:
    try:
        os.readlink(f"/proc/{pid}/ns/pid")
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def test_a_lock_held_through_another_name_of_the_file_is_still_found(
    tmp_path: Path, children: Children
) -> None:
    """The scan matches inodes, never paths: a holder that opened a hard link of the lock
    file (or the same file through a bind mount, or in another mount namespace) shows another
    path in /proc/PID/fd, and must still be named."""
    lock = tmp_path / "store.lock"
    lock.touch()
    alias = tmp_path / "elsewhere.lock"
    os.link(lock, alias)
    holder = children.python(FLOCK_SEVERAL, str(alias))
    config = write_config(
        tmp_path / "config.toml", f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
    )
    code, document = run_json("--once", "--config", config)
    assert code == 0, document
    (finding,) = document["locks"]
    assert finding["state"] == "held"
    assert finding["holders"][0]["pid"] == holder.pid
