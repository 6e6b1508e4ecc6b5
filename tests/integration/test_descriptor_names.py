"""The descriptor walk passes over a file on its link alone when the link shows none of the
watched inodes' names (snapshot.Names). Every way a holder can reach a watched file under
another name must still be named: randomized real holders, each reaching its lock one way,
judged through the real CLI against the holders the test started.

The ways: the path itself; a file bind mount of it under another name in lockwarden's own
mount namespace; the same in a mount namespace of the holder's own (`unshare -m`); a hard link
removed after it was opened (its link then ends in ` (deleted)`); a temporary name renamed onto
the path after the lock was taken; and a descriptor opened through a bind mount in another
namespace and passed over a unix socket to a process in lockwarden's namespace, whose taker
exited (its link shows a name no mount here has: only the walk made again in full finds it).

Runs in the host's PID namespace (scripts/test-parts.sh, part host): only there does the walk
go by names. Everything runs in a mount namespace the test makes (`unshare -m`), so the bind
mounts never touch the host's."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Children, cli_env, require_tool, write_config

HOLDER = """
import fcntl, os, sys, time
mode, path = sys.argv[1], sys.argv[2]
if mode == "deleted":
    link = path + ".link"
    os.link(path, link)
    descriptor = os.open(link, os.O_RDWR)
    os.unlink(link)
elif mode == "renamed":
    temporary = path + ".tmp"
    descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT, 0o644)
else:
    descriptor = os.open(path, os.O_RDWR)
fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
if mode == "renamed":
    os.rename(temporary, path)
print("ready", flush=True)
time.sleep(300)
"""

# Opens argv[1] (a bind mount in its own namespace), takes the flock, sends the descriptor
# over the socket argv[2] names, and exits.
SENDER = """
import fcntl, os, socket, sys
descriptor = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
channel = socket.socket(fileno=int(sys.argv[2]))
socket.send_fds(channel, [b"lock"], [descriptor])
"""

# Starts the sender in a mount namespace of its own and keeps the descriptor it sends.
RECEIVER = """
import os, socket, subprocess, sys, time
real, alias, sender = sys.argv[1], sys.argv[2], sys.argv[3]
mine, theirs = socket.socketpair()
script = f'mount --bind "$1" "$2" && exec {sys.executable} -c "$3" "$2" {theirs.fileno()}'
subprocess.run(
    ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", real, alias, sender],
    pass_fds=[theirs.fileno()], check=True,
)
_, descriptors, _, _ = socket.recv_fds(mine, 16, 1)
print("ready", flush=True)
time.sleep(300)
"""

MODES = ("path", "alias_here", "alias_elsewhere", "deleted", "renamed", "passed")


@pytest.fixture
def stage(children: Children) -> Iterator[int]:
    """A process holding a private mount namespace of its own: the test's mounts, holders and
    lockwarden runs go into it (`nsenter --mount`); it ends with the test."""
    require_tool("unshare")
    require_tool("nsenter")
    keeper = children.start(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 300"],
        ready="ready",
    )
    yield keeper.pid


def inside(stage: int, *argv: str) -> list[str]:
    return ["nsenter", f"--mount=/proc/{stage}/ns/mnt", *argv]


def start_holder(
    children: Children, stage: int, mode: str, real: Path, alias: Path
) -> subprocess.Popen[str]:
    python = sys.executable
    if mode == "alias_here":
        subprocess.run(inside(stage, "mount", "--bind", str(real), str(alias)), check=True)
        argv = inside(stage, python, "-c", textwrap.dedent(HOLDER), "path", str(alias))
    elif mode == "alias_elsewhere":
        script = 'mount --bind "$1" "$2" && exec "$3" -c "$4" path "$2"'
        argv = inside(
            stage, "unshare", "-m", "--propagation", "private", "sh", "-c", script,
            "sh", str(real), str(alias), python, textwrap.dedent(HOLDER),
        )  # fmt: skip
    elif mode == "passed":
        argv = inside(
            stage, python, "-c", textwrap.dedent(RECEIVER),
            str(real), str(alias), textwrap.dedent(SENDER),
        )  # fmt: skip
    else:
        argv = inside(stage, python, "-c", textwrap.dedent(HOLDER), mode, str(real))
    return children.start(argv, ready="ready")


@pytest.mark.parametrize("seed", range(6))
def test_every_way_to_reach_a_lock_under_another_name_names_its_holder(
    tmp_path: Path, children: Children, stage: int, seed: int
) -> None:
    require_tool("mount")
    chooser = random.Random(seed)
    modes = [chooser.choice(MODES) for _ in range(5)]
    if seed < len(MODES):
        modes[0] = MODES[seed]  # each way at least once across the seeds
    truth: dict[str, int] = {}
    tables = []
    for number, mode in enumerate(modes):
        real = tmp_path / f"store-{number}.lock"
        alias = tmp_path / f"seen-as-{number}.lock"
        alias.touch()  # a mount point for the bind mount
        if mode != "renamed":
            real.touch()
        holder = start_holder(children, stage, mode, real, alias)
        truth[f"lock-{number}"] = holder.pid
        tables.append(f'[[lock]]\nname = "lock-{number}"\npath = "{real}"\nformat = "kernel"\n')
    # A bystander with many files open under other names: the walk by names passes over them.
    bystander = children.start(
        inside(stage, sys.executable, "-c", BYSTANDER, str(tmp_path / "bystander")),
        ready="ready",
    )
    config = write_config(tmp_path / "config.toml", "\n".join(tables))
    audit = tmp_path / "audit.json"
    completed = subprocess.run(
        inside(stage, sys.executable, "-c", textwrap.dedent(AUDITED), config, str(audit)),
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.stdout, completed.stderr
    document = json.loads(completed.stdout)
    named = {lock["name"]: [h["pid"] for h in lock["holders"]] for lock in document["locks"]}
    assert named == {name: [pid] for name, pid in truth.items()}, (modes, document)
    assert all(lock["state"] == "held" for lock in document["locks"]), (modes, document)

    opened = json.loads(audit.read_text())
    bystander_reads = [path for path in opened if path.startswith(f"/proc/{bystander.pid}/")]
    if "passed" in modes:
        # The passed descriptor's lock is found by no name: the walk is made again in full.
        assert bystander_reads, "the full walk after an unmatched lock did not run"
    else:
        assert not bystander_reads, f"files under other names were read: {bystander_reads}"
    shutil.rmtree(tmp_path / "bystander", ignore_errors=True)


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
