"""Locks held from outside lockwarden's PID namespace, seen from inside it, as lockwarden runs in
a container whose store another container (or the host) writes.

Inside a PID namespace with a /proc of its own, /proc/locks leaves out a POSIX lock whose owner
lives outside, and no descriptor the namespace can read carries it: an SQLite writer in another
container read `free`. lockwarden asks the kernel itself (F_OFD_GETLK, formats/hidden.py) and
reads such a lock `unknown` (held, by a holder it cannot name or time). A differential: this
test starts real holders in a random arrangement (seeded; the seed is in the test id) in its
own namespace, runs `lockwarden --once --json` as PID 1 of a new one beneath it, and compares
each lock with the holder it started.

A flock(2) held from outside is not seen at all (flock has no question the kernel answers
without taking the lock), so a lock that may be one (the `kernel` format's) is never read free
there: held from outside or not, it is `unknown` unless the namespace is declared to hold every
taker (LOCKWARDEN_PID_NAMESPACE=complete). It once read `free` while a flock was held outside.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, cli_env, pid_namespace_command, require_tool, wait_until

SEEDS = range(6)


def container_env() -> dict[str, str]:
    """What lockwarden runs with inside these namespaces: a container that does not hold every
    holder, so no declaration that it does (scripts/in-pid-namespace.sh makes one for the
    test parts, whose holders are all inside)."""
    env = cli_env()
    env.pop("LOCKWARDEN_PID_NAMESPACE", None)
    return env


def write_config(directory: Path, tables: str) -> str:
    """A config of these `[[lock]]` tables with a state journal of its own, judging only them
    (no host-wide blocked writers)."""
    (directory / "state").mkdir(mode=0o700)
    config = directory / "lockwarden.toml"
    config.write_text(
        f'[state]\npath = "{directory / "state" / "state.jsonl"}"\n\n[host]\n'
        f"blocked_writers = false\n\n{tables}"
    )
    config.chmod(0o600)
    return str(config)


def once_inside(
    children: Children, config: str, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The findings of `lockwarden --once --json` run as PID 1 of a new PID namespace."""
    command = [sys.executable, "-m", "lockwarden", "--once", "--config", config, "--json"]
    inside = children.start([*pid_namespace_command(), *command], env=env or container_env())
    try:
        output, errors = inside.communicate(timeout=120)
    finally:
        inside.kill()
    assert output.strip(), errors
    locks: list[dict[str, Any]] = json.loads(output)["locks"]
    return locks


LOCKS_PER_SEED = 6
OUTSIDE = "other_pid_namespace"

POSIX_HOLDER = """
import fcntl, struct, sys, time
style = sys.argv[2]
handle = open(sys.argv[1], "r+")
if style == "posix_write":
    fcntl.lockf(handle, fcntl.LOCK_EX)
elif style == "posix_read":
    fcntl.lockf(handle, fcntl.LOCK_SH)
elif style == "posix_range":  # one byte far into the file, as a database locks a page
    fcntl.lockf(handle, fcntl.LOCK_EX, 1, 4096)
elif style == "ofd":
    fcntl.fcntl(handle, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
elif style == "flock":
    fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""

# What lockwarden must say of each arrangement: (state, unknown cause).
EXPECTED = {
    "free": ("unknown", OUTSIDE),  # a flock held outside would look the same: not proven free
    "flock": ("unknown", OUTSIDE),
    "posix_write": ("unknown", OUTSIDE),
    "posix_read": ("unknown", OUTSIDE),  # any kernel lock on a plain lock file blocks writers
    "posix_range": ("unknown", OUTSIDE),
    "ofd": ("unknown", OUTSIDE),  # /proc/locks lists OFD locks (PID -1); nobody here holds it
    "sqlite_writer": ("unknown", OUTSIDE),
    "sqlite_reader": ("unknown", OUTSIDE),  # a rollback reader keeps writers from committing
    "sqlite_wal_writer": ("unknown", OUTSIDE),
    "sqlite_wal_reader": ("free", None),
}
KERNEL_CASES = ("free", "flock", "posix_write", "posix_read", "posix_range", "ofd")


def locked_inodes() -> set[tuple[int, int, int]]:
    """(major, minor, inode) of every file /proc/locks lists here (this test's namespace: its
    own holders are seen)."""
    found = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] != "->":
            major, minor, inode = fields[5].split(":")
            found.add((int(major, 16), int(minor, 16), int(inode)))
    return found


def locked(path: Path) -> bool:
    status = path.stat()
    device = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    return device in locked_inodes()


def hold_sqlite(children: Children, database: Path, case: str) -> None:
    """A real sqlite3 shell left inside a transaction, its lock taken before this returns."""
    sqlite3 = require_tool("sqlite3")
    wal = "_wal_" in case
    subprocess.run(
        [
            sqlite3,
            str(database),
            f"PRAGMA journal_mode={'WAL' if wal else 'DELETE'};"
            "CREATE TABLE t(a); INSERT INTO t VALUES (1);",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    shell = children.start([sqlite3, str(database)], stdin=subprocess.PIPE)
    assert shell.stdin is not None
    writes = case.endswith("writer")
    shell.stdin.write(
        "BEGIN IMMEDIATE; INSERT INTO t VALUES (2);\n" if writes else "BEGIN; SELECT a FROM t;\n"
    )
    shell.stdin.flush()
    watched = Path(f"{database}-shm") if wal else database
    assert wait_until(lambda: watched.exists() and locked(watched), timeout=20), (
        f"sqlite3 did not lock {watched}"
    )


def arrange(children: Children, directory: Path, seed: int) -> tuple[str, dict[str, str]]:
    """Holders at random: the config's locks, and each lock's case."""
    chooser = random.Random(seed)
    tables: list[str] = []
    cases: dict[str, str] = {}
    for number in range(LOCKS_PER_SEED):
        case = chooser.choice(list(EXPECTED))
        name = f"lock-{number}"
        cases[name] = case
        if case in KERNEL_CASES:
            path = directory / f"{name}.lock"
            path.write_bytes(b"\0" * 8192)
            if case != "free":
                children.python(POSIX_HOLDER, str(path), case)
            lock_format = "kernel"
        else:
            path = directory / f"{name}.db"
            hold_sqlite(children, path, case)
            lock_format = "sqlite"
        tables.append(f'\n[[lock]]\nname = "{name}"\npath = "{path}"\nformat = "{lock_format}"\n')
    return write_config(directory, "".join(tables)), cases


@pytest.mark.parametrize("seed", SEEDS)
def test_a_lock_held_from_outside_the_namespace_is_never_read_free(
    seed: int, tmp_path: Path, children: Children
) -> None:
    config, cases = arrange(children, tmp_path, seed)
    findings = {found["name"]: found for found in once_inside(children, config)}
    said = {name: (findings[name]["state"], findings[name]["unknown_cause"]) for name in cases}
    wanted = {name: EXPECTED[case] for name, case in cases.items()}
    assert said == wanted, json.dumps(
        {
            name: [cases[name], findings[name]["reason"]]
            for name in cases
            if said[name] != wanted[name]
        },
        indent=1,
    )
    for name, case in cases.items():
        if EXPECTED[case][1] == OUTSIDE:  # never a name it cannot prove, never OK
            assert findings[name]["holders"] == [], findings[name]
            assert findings[name]["severity"] != "ok", findings[name]


def test_a_namespace_declared_to_hold_every_taker_reads_a_free_lock_free(
    tmp_path: Path, children: Children
) -> None:
    """The operator's declaration that only this namespace's processes take its locks makes a
    kernel lock no process here holds free again; one held here is still named."""
    free, held = tmp_path / "free.lock", tmp_path / "held.lock"
    free.write_bytes(b"")
    held.write_bytes(b"")
    config = write_config(
        tmp_path,
        "".join(
            f'\n[[lock]]\nname = "{path.stem}"\npath = "{path}"\nformat = "kernel"\n'
            for path in (free, held)
        ),
    )
    script = (
        f"{require_tool('flock')} {held} sleep 60 & sleep 0.5; "
        f"{sys.executable} -m lockwarden --once --json --config {config}; kill $!"
    )
    declared = {**container_env(), "LOCKWARDEN_PID_NAMESPACE": "complete"}
    inside = children.start(
        [*pid_namespace_command(), require_tool("sh"), "-c", script], env=declared
    )
    try:
        output, errors = inside.communicate(timeout=120)
    finally:
        inside.kill()
    assert output.strip(), errors
    found = {lock["name"]: lock for lock in json.loads(output)["locks"]}
    assert found["free"]["state"] == "free", found["free"]["reason"]
    assert found["held"]["state"] == "held", found["held"]["reason"]
    assert found["held"]["holders"][0]["name"] == "flock"


PROBE = """
import json, os, subprocess, sys
from lockwarden.formats.hidden import hidden_locks
inside, outside, holder = sys.argv[1], sys.argv[2], sys.argv[3]
shell = subprocess.Popen([sys.executable, "-c", holder, inside, "posix_write"],
                         stdout=subprocess.PIPE, text=True)
assert shell.stdout.readline().strip() == "ready"
def key(path):
    status = os.stat(path)
    return (status.st_dev, status.st_ino)
found = {path: [lock._asdict() for lock in hidden_locks([(path, key(path))])]
         for path in (inside, outside)}
print(json.dumps(found))
"""


def test_only_a_lock_whose_owner_is_outside_is_reported_left_out(
    tmp_path: Path, children: Children
) -> None:
    """Asked from inside a namespace: a POSIX lock its own process holds is listed in
    /proc/locks there (the kernel gives its owner a PID), so it is not reported; the one this
    test holds, outside, is, as PID 0 on the byte range it locked."""
    inside, outside = tmp_path / "inside.lock", tmp_path / "outside.lock"
    inside.write_bytes(b"")
    outside.write_bytes(b"\0" * 8192)
    children.python(POSIX_HOLDER, str(outside), "posix_range")
    process = children.start(
        [
            *pid_namespace_command(),
            sys.executable,
            "-c",
            PROBE,
            str(inside),
            str(outside),
            POSIX_HOLDER,
        ],
        env=container_env(),
    )
    try:
        output, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    found = json.loads(output.strip().splitlines()[-1]) if output.strip() else errors
    status = outside.stat()
    assert found == {
        str(inside): [],
        str(outside): [
            {
                "number": 0,
                "kind": "POSIX",
                "mode": "WRITE",
                "pid": 0,
                "key": [status.st_dev, status.st_ino],
                "start": 4096,
                "end": 4096,
                "waiting": False,
            }
        ],
    }, errors


BEHIND_A_READER = """
import fcntl, json, os, subprocess, sys, time
lock, go, config = sys.argv[1], sys.argv[2], sys.argv[3]
reader = subprocess.Popen([sys.executable, "-c", sys.argv[4], lock, "posix_read_first"],
                          stdout=subprocess.PIPE, text=True)
assert reader.stdout.readline().strip() == "ready"
print("inside ready", flush=True)
for _ in range(1000):  # the test takes the outside WRITE lock, then says go
    if os.path.exists(go):
        break
    time.sleep(0.01)
run = subprocess.run([sys.executable, "-m", "lockwarden", "--once", "--config", config, "--json"],
                     capture_output=True, text=True, timeout=60)
print(json.dumps({"reader": reader.pid, "report": json.loads(run.stdout)}), flush=True)
"""

READER_THEN_WRITER = """
import fcntl, sys, time
handle = open(sys.argv[1], "r+")
if sys.argv[2] == "posix_read_first":
    fcntl.lockf(handle, fcntl.LOCK_SH, 1, 0)  # byte 0, first in the file's lock list
else:
    fcntl.lockf(handle, fcntl.LOCK_EX, 1, 100)  # byte 100, behind it
print("ready", flush=True)
time.sleep(120)
"""


def test_a_writer_outside_behind_a_reader_inside_is_found_and_never_ok(
    tmp_path: Path, children: Children
) -> None:
    """The kernel answers F_OFD_GETLK with the first lock in the way: here a reader inside the
    namespace, which /proc/locks lists there. The range beside it is asked again, so the
    writer outside is found; a young reader here neither times nor frees the lock, so the
    lock is `unknown`, not held within budget."""
    lock, go = tmp_path / "store.lock", tmp_path / "go"
    lock.write_bytes(b"\0" * 4096)
    config = write_config(
        tmp_path, f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
    )
    inside = children.start(
        [
            *pid_namespace_command(),
            sys.executable,
            "-c",
            BEHIND_A_READER,
            str(lock),
            str(go),
            config,
            READER_THEN_WRITER,
        ],
        ready="inside ready",
        env=container_env(),
    )
    children.python(READER_THEN_WRITER, str(lock), "posix_write_behind")
    go.touch()
    try:
        output, errors = inside.communicate(timeout=120)
    finally:
        inside.kill()
    seen = json.loads(output.strip().splitlines()[-1]) if output.strip() else errors
    [finding] = seen["report"]["locks"]
    assert (finding["state"], finding["unknown_cause"]) == ("unknown", OUTSIDE), finding
    assert finding["action"] is None or "kill" not in json.dumps(finding["action"]), finding
    assert f"PID {seen['reader']}" in finding["reason"], finding["reason"]


FIFO_WRITER = """
import os, sys
descriptor = os.open(sys.argv[1], os.O_WRONLY)  # blocks until some process opens it to read
print("woken", flush=True)
"""


def test_a_symlink_to_a_fifo_where_a_state_file_should_be_wakes_no_writer(
    tmp_path: Path, children: Children
) -> None:
    """terraform's state file read from inside a namespace: a symlink to a FIFO is never
    opened for reading (which would wake a writer blocked opening it), only looked at."""
    fifo, state = tmp_path / "fifo", tmp_path / "terraform.tfstate"
    os.mkfifo(fifo)
    os.symlink(fifo, state)
    writer = children.start([sys.executable, "-c", FIFO_WRITER, str(fifo)])
    tables = f'[[lock]]\nname = "tf"\npath = "{tmp_path}"\nformat = "terraform"\n'
    [finding] = once_inside(children, write_config(tmp_path, tables))
    assert finding["name"] == "tf", finding
    assert writer.poll() is None, "the FIFO's writer was woken: something opened it to read"


SLEEPER = """
import time
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("declared", [False, True])
def test_a_pidfile_naming_a_process_of_another_namespace_is_never_stale_there(
    tmp_path: Path, children: Children, declared: bool
) -> None:
    """A pidfile names a live process outside lockwarden's namespace: there its PID is not
    running, which proves nothing, so the lock is `unknown` and `remove_stale` removes nothing
    (a new user's trial once saw it removed). Where the operator says the namespace holds every
    holder (LOCKWARDEN_PID_NAMESPACE=complete), the absence is taken as proof, as on the host."""
    holder = children.python(SLEEPER)
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text(f"{holder.pid}\n")
    config = write_config(
        tmp_path,
        f'[[lock]]\nname = "daemon"\npath = "{pidfile}"\nformat = "pidfile"\n'
        'remove_stale = true\nstale_confirm = "1s"\n',
    )
    env = container_env()
    if declared:
        env["LOCKWARDEN_PID_NAMESPACE"] = "complete"
    findings = []
    for _ in range(2):  # a removal takes two sightings, stale_confirm apart
        [finding] = once_inside(children, config, env)
        findings.append(finding)
        time.sleep(1.2)
    if declared:  # the PID is not running in a namespace said to hold every holder
        assert findings[0]["state"] == "stale", findings[0]
    else:
        assert [(f["state"], f["unknown_cause"]) for f in findings] == [
            ("unknown", OUTSIDE),
            ("unknown", OUTSIDE),
        ], findings
        assert pidfile.exists(), "a live process's pidfile was removed"
    assert holder.poll() is None


def test_why_inside_says_the_waiters_behind_a_lock_held_outside_are_not_listed(
    tmp_path: Path, children: Children
) -> None:
    """A writer inside the namespace blocks on a flock held outside it: /proc/locks there
    drops the holder's line and the waiter's with it, so `why` finds no waiter to list. It
    says so, instead of leaving 'no process waits' as the whole truth; `why PID` still follows
    that writer."""
    lock = tmp_path / "store.lock"
    lock.write_bytes(b"")
    children.start([require_tool("flock"), str(lock), "sleep", "60"])
    assert wait_until(lambda: locked(lock), timeout=10)
    lockwarden = f"{sys.executable} -m lockwarden"
    script = (
        f"{require_tool('flock')} {lock} true & sleep 1; {lockwarden} why; "
        f'echo "== $!"; {lockwarden} why $!; kill $!'
    )
    inside = children.start([*pid_namespace_command(), "sh", "-c", script], env=container_env())
    try:
        output, errors = inside.communicate(timeout=120)
    finally:
        inside.kill()
    listed, _, asked = output.partition("== ")
    assert listed == "no process waits on a kernel lock here\n", output
    assert "leaves out every lock held from outside it" in errors, errors
    assert "waits in flock for a lock on" in asked and str(lock) in asked, asked
