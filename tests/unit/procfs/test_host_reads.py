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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    MKDIR_HOLDER,
    Children,
    cli_env,
    run_json,
    wait_until,
    write_config,
)
from integration.test_why import HOLDERS, WAITER, blocked_in_lock_call

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
code = main(["--once", "--json", "--config", sys.argv[1], *sys.argv[3:]])
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
    # A writer blocked elsewhere on the host would be judged in a capture of its own (the
    # next test): not this test's to count.
    config = write_config(
        tmp_path / "config.toml",
        "[host]\nblocked_writers = false\n"
        + tables
        + f'[[lock]]\nname = "wa"\npath = "{record}"\n',
    )
    code, document, audit = audited_run(config, tmp_path / "audit.json")
    assert code == 0, document
    assert [lock["state"] for lock in document["locks"]] == ["held"] * 6
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
    # Each holder's status, stat, cmdline and cgroup once: its state, threads, user and
    # credentials come from the one status read, its start ticks and name from the stat.
    assert {path.rpartition("/")[2]: count for path, count in reads.items()} == {
        "stat": 1,
        "status": 1,
        "cmdline": 1,
        "cgroup": 1,
    }, reads


def audited_run(
    config: str, audit_file: Path, *arguments: str
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """`lockwarden --once --json --config CONFIG ARGUMENTS` in a fresh interpreter with the
    audit hook: its exit code, its JSON, and what it opened and listed under /proc."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(AUDITED_RUN), config, str(audit_file), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.stdout, completed.stderr
    audit = json.loads(audit_file.read_text())
    return completed.returncode, json.loads(completed.stdout), audit


@pytest.mark.parametrize("style", ["flock", "posix", "ofd"])
def test_a_blocked_writer_costs_no_walk_beyond_its_own_lock_judged(
    tmp_path: Path, children: Children, style: str
) -> None:
    """A writer blocked on a file nobody configured is found in the run's one descriptor walk
    (the file it waits on is named by its own descriptor, an OFD waiter's by any descriptor on
    the inode), and its lock is then judged like any lock, in a capture of its own: /proc/locks
    read twice and each fdinfo entry at most twice, once per capture. Each waiting style, since
    each is named another way (an OFD wait shows no PID in /proc/locks)."""
    quiet = tmp_path / "quiet.lock"
    quiet.touch()
    orders = tmp_path / "orders.lock"
    orders.touch()
    holder = children.python(HOLDERS[style], str(orders))
    waiter = children.python(WAITER, str(orders), style)
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        '[host]\nblocked_after = "1m"\nblocked_critical_after = "1h"\n'
        f'[[lock]]\nname = "quiet"\npath = "{quiet}"\nformat = "kernel"\n',
    )
    start = datetime.now(UTC)
    for seconds in (0, 50):  # the first run starts counting; a break under the budget
        at = (start + timedelta(seconds=seconds)).isoformat()
        audited_run(config, tmp_path / f"run-{seconds}.json", "--now", at)
    later = (start + timedelta(seconds=100)).isoformat()  # blocked at least 100 s: past 1 m
    _, document, audit = audited_run(config, tmp_path / "audit.json", "--now", later)

    found = {
        lock["path"]: lock for lock in document["locks"] if lock["name"].startswith("blocked:")
    }
    assert str(orders) in found, document
    assert [w["pid"] for w in found[str(orders)]["waiters"]] == [waiter.pid]
    assert [h["pid"] for h in found[str(orders)]["holders"]] == [holder.pid]
    opened = Counter(audit["opened"])
    assert opened["/proc/locks"] == 2  # the run's capture, then the blocked lock's
    fdinfo = {path: count for path, count in opened.items() if FDINFO.match(path)}
    assert any(path.startswith(f"/proc/{waiter.pid}/fdinfo/") for path in fdinfo), fdinfo
    assert max(fdinfo.values()) == 2, "an fdinfo entry was read more than once per capture"


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
