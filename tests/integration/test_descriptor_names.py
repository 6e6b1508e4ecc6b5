"""The descriptor walk passes over a file on its link alone when the link shows none of the
watched inodes' names (snapshot.Names). Every way a process can reach a watched file under
another name must still leave it named: randomized real holders and waiters, each reaching its
lock one way, judged through the real CLI against the processes the test started.

The ways: the path itself; a file bind mount of it under another name in lockwarden's own mount
namespace; the same in a mount namespace of the process's own (`unshare -m`); a hard link
removed after it was opened (its link then ends in ` (deleted)`); a bind mount detached after
it was opened (`umount -l`: its link shows only `/`); a temporary name renamed onto the path
after the lock was taken; a descriptor opened through a bind mount in another namespace and
passed over a unix socket to a process here that then makes its lock call (the sender closes
its own and keeps the other namespace: the name is known to no mount here); the same with the
sender keeping its descriptor (it holds the lock too, and is found by its full read, under a
name passed over here: the process here sharing its file is found by a full walk); and, for the
lock itself, a watched path that is the mount point of a file bind-mounted there (reached by
the source's name). The locks: an exclusive flock with one holder; two OFD readers (both show
PID -1 in /proc/locks, so one found by name would pass for the other); an OFD writer with an
OFD waiter (named only by its descriptor).

Runs in the host's PID namespace (scripts/test-parts.sh, part host): only there does the walk
go by names. Everything runs in a mount namespace the test makes (`unshare -m`), so the bind
mounts never touch the host's."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, cli_env, require_tool, wait_until, write_config
from integration.test_why import blocked_in_lock_call

# The lock call `call` (flock, ofd-read, ofd-write; ofd-wait is made after "ready") on
# `descriptor`: the part of PARTY and RECEIVER that takes the lock.
LOCK_CALL = """
import fcntl, struct

def ofd(command, kind):
    fcntl.fcntl(descriptor, command, struct.pack("hhqqi4x", kind, 0, 0, 0, 0))

if call == "flock":
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
elif call == "ofd-read":
    ofd(fcntl.F_OFD_SETLK, fcntl.F_RDLCK)
elif call == "ofd-write":
    ofd(fcntl.F_OFD_SETLK, fcntl.F_WRLCK)
"""

# argv: how (path, deleted, renamed), the lock call (flock, ofd-read, ofd-write, ofd-wait),
# the path. Says "ready" once the lock is held, or just before it blocks (ofd-wait).
PARTY = (
    """
import fcntl, os, struct, sys, time
how, call, path = sys.argv[1], sys.argv[2], sys.argv[3]
if how == "deleted":
    link = f"{path}.link-{os.getpid()}"
    os.link(path, link)
    descriptor = os.open(link, os.O_RDWR)
    os.unlink(link)
elif how == "renamed":
    temporary = f"{path}.tmp-{os.getpid()}"
    descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT, 0o644)
else:
    descriptor = os.open(path, os.O_RDWR)

"""
    + LOCK_CALL
    + """if how == "renamed":
    os.rename(temporary, path)
print("ready", flush=True)
if call == "ofd-wait":
    ofd(fcntl.F_OFD_SETLKW, fcntl.F_WRLCK)
time.sleep(300)
"""
)

# Opens argv[1] (a bind mount in its own namespace), sends the descriptor over the socket
# numbered argv[2] and closes its own unless argv[3] is `keep` (then it shares the lock its
# receiver takes); it stays, keeping its namespace and so the mount the descriptor was opened
# through, until its receiver ends (its stdin, a pipe from there, ends).
SENDER = """
import os, socket, sys
descriptor = os.open(sys.argv[1], os.O_RDWR)
socket.send_fds(socket.socket(fileno=int(sys.argv[2])), [b"file"], [descriptor])
if sys.argv[3] != "keep":
    os.close(descriptor)
sys.stdin.read()
"""

# Starts the sender in a mount namespace of its own (argv[5]: keep or close), and makes the
# lock call argv[3] on the descriptor it sends (as PARTY does); prints "ready", then the
# sender's PID.
RECEIVER = (
    """
import fcntl, socket, struct, subprocess, sys, time
real, alias, call, sender, keep = sys.argv[1:6]
mine, theirs = socket.socketpair()
script = f'mount --bind "$1" "$2" && exec {sys.executable} -c "$3" "$2" {theirs.fileno()} "$4"'
started = subprocess.Popen(
    ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
     "sh", real, alias, sender, keep],
    pass_fds=[theirs.fileno()], stdin=subprocess.PIPE,
)
_, (descriptor,), _, _ = socket.recv_fds(mine, 16, 1)

"""
    + LOCK_CALL
    + """print("ready", flush=True)
print(started.pid, flush=True)
if call == "ofd-wait":
    ofd(fcntl.F_OFD_SETLKW, fcntl.F_WRLCK)
time.sleep(300)
"""
)

# Blocked writers off, in every test that asserts a bystander's fdinfo is passed over: with
# them on, a process waiting for any kernel lock anywhere on the host (another test's, another
# program's) makes the walk a full one, as it must to find what that process waits on.
NO_WAITS = "[host]\nblocked_writers = false\n\n"

BYSTANDER = """
import os, sys, time
directory = sys.argv[1]
os.makedirs(directory, exist_ok=True)
files = [open(os.path.join(directory, f"data-{n}"), "a") for n in range(20)]
print("ready", flush=True)
time.sleep(300)
"""

# The real CLI with an audit hook recording every fdinfo entry it opens (opened by name in
# its /proc/PID/fdinfo directory: the hook names the directory the thread opened last).
AUDITED = """
import json, sys, threading
opened, directories = [], {}

def audit(event, args):
    if event != "open" or not isinstance(args[0], str):
        return
    if args[0].startswith("/proc"):
        directories[threading.get_ident()] = args[0]
        if "/fdinfo/" in args[0]:
            opened.append(args[0])
    elif args[0].isdigit() and directories.get(threading.get_ident(), "").endswith("/fdinfo"):
        opened.append(directories[threading.get_ident()] + "/" + args[0])

sys.addaudithook(audit)
from lockwarden.cli.commands import main
code = main(["--once", "--json", "--config", sys.argv[1]])
with open(sys.argv[2], "w") as handle:
    json.dump(opened, handle)
"""

WAYS = ("path", "alias_here", "alias_elsewhere", "deleted", "detached", "passed", "shared")
LOCKS = {  # the lock calls of its holders, and of its waiter if any
    "flock": (("flock",), None),
    "ofd-shared": (("ofd-read", "ofd-read"), None),
    "ofd-waited": (("ofd-write",), "ofd-wait"),
}


@dataclass
class Stage:
    """A private mount namespace of the test's own, held open by a process: the test's
    mounts, holders and lockwarden runs go into it (`nsenter --mount`)."""

    pid: int
    children: Children
    root: Path
    truth: dict[str, tuple[set[int], set[int]]] = field(default_factory=dict)

    def inside(self, *argv: str) -> list[str]:
        return ["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", *argv]

    def mount(self, source: Path, target: Path) -> None:
        target.touch()
        subprocess.run(self.inside("mount", "--bind", str(source), str(target)), check=True)

    def party(self, way: str, call: str, path: Path, alias: Path) -> list[int]:
        """A process reaching `path` the `way` given and making the lock `call` on it; its PID,
        and (`shared`) that of the process in another namespace that passed it the descriptor
        and keeps it, when it holds the lock too."""
        python, party = sys.executable, textwrap.dedent(PARTY)
        if way in ("alias_here", "detached"):
            self.mount(path, alias)
            argv = self.inside(python, "-c", party, "path", call, str(alias))
        elif way == "alias_elsewhere":
            alias.touch()
            script = 'mount --bind "$1" "$2" && exec "$3" -c "$4" path "$5" "$2"'
            argv = self.inside(
                "unshare", "-m", "--propagation", "private", "sh", "-c", script,
                "sh", str(path), str(alias), python, party, call,
            )  # fmt: skip
        elif way in ("passed", "shared"):
            alias.touch()
            keep = "keep" if way == "shared" else "close"
            argv = self.inside(
                python, "-c", textwrap.dedent(RECEIVER),
                str(path), str(alias), call, textwrap.dedent(SENDER), keep,
            )  # fmt: skip
        else:
            argv = self.inside(python, "-c", party, way, call, str(path))
        process = self.children.start(argv, ready="ready")
        pids = [process.pid]
        if way in ("passed", "shared"):
            assert process.stdout is not None
            sender = int(process.stdout.readline())
            if way == "shared" and call != "ofd-wait":
                pids.append(sender)  # it keeps the descriptor: it holds the lock too
        if call == "ofd-wait":
            assert wait_until(lambda: blocked_in_lock_call(process.pid), timeout=10)
        if way == "detached":
            subprocess.run(self.inside("umount", "-l", str(alias)), check=True)
        return pids

    def lock(self, number: int, kind: str, ways: list[str], mounted: bool, first: str) -> str:
        """One lock of `kind`, its parties reaching it the `ways` given (`first` for the first
        holder); `mounted`: the watched path is the mount point of a file bind-mounted there,
        and a party reaching it by "path" goes by the source's name. Its config table."""
        real = self.root / f"store-{number}.lock"
        reached = real
        if mounted:
            reached = self.root / f"source-{number}.lock"
            reached.touch()
            self.mount(reached, real)
        elif first != "renamed":
            real.touch()
        holders, waiter = LOCKS[kind]
        calls = [*holders, *([waiter] if waiter else [])]
        found: list[list[int]] = []
        for index, (way, call) in enumerate(zip([first, *ways], calls, strict=False)):
            alias = self.root / f"seen-as-{number}-{index}.lock"
            found.append(self.party(way, call, reached, alias))
        name = f"lock-{number}"
        self.truth[name] = (
            {pid for pids in found[: len(holders)] for pid in pids},
            {pid for pids in found[len(holders) :] for pid in pids},
        )
        return f'[[lock]]\nname = "{name}"\npath = "{real}"\nformat = "kernel"\n'


@pytest.fixture
def stage(tmp_path: Path, children: Children) -> Iterator[Stage]:
    for tool in ("unshare", "nsenter", "mount", "umount"):
        require_tool(tool)
    keeper = children.start(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 300"],
        ready="ready",
    )
    yield Stage(keeper.pid, children, tmp_path)


def audited_run(stage: Stage, config: str) -> tuple[dict[str, Any], list[str]]:
    audit = stage.root / "audit.json"
    completed = subprocess.run(
        stage.inside(sys.executable, "-c", textwrap.dedent(AUDITED), config, str(audit)),
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.stdout, completed.stderr
    return json.loads(completed.stdout), json.loads(audit.read_text())


def parties(document: dict[str, Any]) -> dict[str, tuple[set[int], set[int]]]:
    return {
        lock["name"]: ({h["pid"] for h in lock["holders"]}, {w["pid"] for w in lock["waiters"]})
        for lock in document["locks"]
    }


@pytest.mark.parametrize("seed", range(8))
def test_every_way_to_reach_a_lock_under_another_name_leaves_its_processes_named(
    stage: Stage, seed: int
) -> None:
    chooser = random.Random(seed)
    tables = []
    for number in range(4):
        kind = chooser.choice(list(LOCKS))
        mounted = chooser.random() < 0.25
        first = chooser.choice([*WAYS, "renamed"] if kind == "flock" and not mounted else WAYS)
        ways = [chooser.choice(WAYS) for _ in range(2)]
        tables.append(stage.lock(number, kind, ways, mounted, first))
    blocked_writers = chooser.choice(["true", "false"])
    config = write_config(
        stage.root / "config.toml",
        f"[host]\nblocked_writers = {blocked_writers}\n\n" + "\n".join(tables),
    )
    document, _ = audited_run(stage, config)
    assert parties(document) == stage.truth, document
    assert all(lock["state"] == "held" for lock in document["locks"]), document


@pytest.mark.parametrize("unfound_by_name", ["alias_elsewhere", "passed"])
def test_files_under_other_names_are_passed_over_unless_a_holder_may_be_missed(
    stage: Stage, unfound_by_name: str
) -> None:
    """The walk by names reads no fdinfo of a file shown under another name (a bystander's
    twenty data files) while every lock is reached a way that keeps its holder found by name.
    A holder that may have a sharer the names miss sends the walk round again in full: one in
    another mount namespace under a name no mount here has (read in full, it carries the lock
    whoever here shares its file), or a descriptor passed in from there (found by no name:
    its lock is left unmatched)."""
    tables = [
        stage.lock(number, "flock", [], mounted=way == "source", first=way)
        for number, way in enumerate(
            ("path", "alias_here", "deleted", "detached", "renamed", "source")
        )
    ]
    bystander = stage.children.start(
        stage.inside(sys.executable, "-c", BYSTANDER, str(stage.root / "bystander")),
        ready="ready",
    )
    config = write_config(stage.root / "config.toml", NO_WAITS + "\n".join(tables))
    document, opened = audited_run(stage, config)
    assert parties(document) == stage.truth, document
    assert not [path for path in opened if path.startswith(f"/proc/{bystander.pid}/")]

    tables.append(stage.lock(len(tables), "flock", [], mounted=False, first=unfound_by_name))
    config = write_config(stage.root / "config.toml", NO_WAITS + "\n".join(tables))
    document, opened = audited_run(stage, config)
    assert parties(document) == stage.truth, document
    assert [path for path in opened if path.startswith(f"/proc/{bystander.pid}/")]


def test_an_ofd_waiter_known_by_no_name_is_named(stage: Stage) -> None:
    """An OFD waiter shows PID -1 and is named only by its descriptor, and a waiter left
    unfound leaves no granted lock unmatched: with one there, every fdinfo is read. Its
    descriptor here came from another namespace's bind mount (no name here shows it), and
    blocked writers are off, so no wait makes the walk a full one either."""
    table = stage.lock(0, "ofd-waited", ["passed"], mounted=False, first="path")
    config = write_config(stage.root / "config.toml", NO_WAITS + table)
    document, _ = audited_run(stage, config)
    assert parties(document) == stage.truth, document


def test_sqlite_writer_and_readers_are_named_by_a_walk_by_names(stage: Stage) -> None:
    """An SQLite database in WAL mode carries two inodes, the database and its `-shm` file,
    each with its one name: real `sqlite3` shells, a writer in BEGIN IMMEDIATE and two readers
    in open read transactions, are named while a bystander's files are passed over."""
    sqlite3 = require_tool("sqlite3")
    database = stage.root / "app.db"
    subprocess.run(
        [
            sqlite3,
            str(database),
            "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);",
        ],
        check=True,
        capture_output=True,
    )

    def shell(*statements: str) -> int:
        started = stage.children.start(stage.inside(sqlite3, str(database)), stdin=subprocess.PIPE)
        assert started.stdin is not None and started.stdout is not None
        started.stdin.write("".join(f"{s}\n" for s in statements) + ".print ready\n")
        started.stdin.flush()
        while (line := started.stdout.readline()) and line.strip() != "ready":
            pass
        assert line.strip() == "ready"
        return started.pid

    readers = {shell("BEGIN;", "SELECT count(*) FROM t;") for _ in range(2)}
    writer = shell("BEGIN IMMEDIATE;")
    bystander = stage.children.start(
        stage.inside(sys.executable, "-c", BYSTANDER, str(stage.root / "bystander")),
        ready="ready",
    )
    config = write_config(
        stage.root / "config.toml",
        NO_WAITS + f'[[lock]]\nname = "app"\npath = "{database}"\nformat = "sqlite"\n',
    )
    document, opened = audited_run(stage, config)
    (lock,) = document["locks"]
    assert lock["state"] == "held", lock
    assert [holder["pid"] for holder in lock["holders"]] == [writer], lock
    assert {reader["pid"] for reader in lock["readers"]} == readers, lock
    assert not [path for path in opened if path.startswith(f"/proc/{bystander.pid}/")]
