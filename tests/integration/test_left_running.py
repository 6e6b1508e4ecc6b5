"""A recorded holder killed while what it started runs on (a migration tool that runs its work
in a child): the lock is not stale while that work runs, and lockwarden names the processes
to stop. Randomized over the record's format, how the holder leads (a session, as a service or
`setsid`; a process group, as a shell job), how deep and how many its workers are, and whether
they outlive it; the test knows which processes it left running.

What a holder that leads neither its group nor its session starts, or a worker that left its
session, cannot be found once the holder is gone, unless an earlier run saw it below the
holder (the sighting memory, docs/design.md): those scenarios are drawn only where a run saw
them first (test_work_seen_below_a_killed_holder_keeps_its_lock_until_it_ends).
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import Children, cli_env, require_tool, run_json, wait_until, write_config

# argv: LOCK FORMAT LEADS DEPTHS... ; writes its record, starts one worker per DEPTH (1: a
# child; 2: a shell's child, the shell waiting; 3: a child in a session of its own, as a
# daemon's), prints its own PID and the workers', then sleeps. LEADS "neither": started as a
# session leader, it forks and the child, which leads nothing, is the holder (a job's step run
# by its script).
HOLDER = """
import json, os, socket, subprocess, sys, time
lock, lock_format, leads = sys.argv[1], sys.argv[2], sys.argv[3]
if leads == "group":
    os.setpgid(0, 0)
if leads == "neither" and os.fork() > 0:
    os.wait()
    sys.exit(0)
if lock_format == "pidfile":
    with open(lock, "w") as handle:
        handle.write(f"{os.getpid()}\\n")
else:
    os.mkdir(lock)
    record = {"pid": os.getpid(), "role": "migration", "host": socket.gethostname()}
    with open(os.path.join(lock, "owner.json"), "w") as handle:
        json.dump(record, handle)
workers = []
for depth in sys.argv[4:]:
    if depth == "1":
        workers.append(subprocess.Popen(["sleep", "120"]).pid)
    elif depth == "3":
        workers.append(subprocess.Popen(["sleep", "120"], start_new_session=True).pid)
    else:
        shell = subprocess.Popen(
            ["sh", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE, text=True
        )
        workers.append(int(shell.stdout.readline()))
        workers.append(shell.pid)
print(" ".join(map(str, [os.getpid(), *workers])), flush=True)
time.sleep(120)
"""

SEEDS = [3, 19, 41, 77, 5, 8, 13, 21]


def inspect(lock: Path, lock_format: str, tmp_path: Path, *options: str) -> dict:  # type: ignore[type-arg]
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "{lock_format}"\n',
    )
    _code, document = run_json("--once", "--config", config, *options)
    [finding] = document["locks"]
    return finding  # type: ignore[no-any-return]


class Job(NamedTuple):
    holder: subprocess.Popen[str]
    """What the test started: the holder, or (leading neither) its parent."""
    holder_pid: int
    workers: set[int]
    lock: Path
    lock_format: str
    context: str
    shells: dict[int, int]
    """A depth-2 worker's sleep -> the shell that waits for it (and ends with it)."""


def start_job(
    seed: int,
    tmp_path: Path,
    children: Children,
    fewest_workers: int,
    leads: tuple[str, ...] = ("session", "group"),
    depths: tuple[str, ...] = ("1", "2"),
) -> Job:
    """A holder of a random format, leading one of `leads`, with workers at random `depths`:
    what the seed draws."""
    rng = random.Random(seed)
    lock_format = rng.choice(["pidfile", "owner-record"])
    leader = rng.choice(leads)
    drawn = [rng.choice(depths) for _ in range(rng.randint(fewest_workers, 3))]
    lock = tmp_path / ("job.pid" if lock_format == "pidfile" else "LOCK")
    holder = children.start(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(lock), lock_format, leader, *drawn],
        start_new_session=leader in ("session", "neither"),
    )
    assert holder.stdout is not None
    holder_pid, *workers = (int(pid) for pid in holder.stdout.readline().split())
    if holder_pid != holder.pid:
        children.track(holder_pid)
    shells, printed = {}, iter(workers)
    for depth in drawn:  # printed in the order drawn: a depth-2 worker as its sleep, its shell
        worker = next(printed)
        if depth == "2":
            shells[worker] = next(printed)
    context = f"seed {seed}: {lock_format}, leads {leader}, workers at depths {drawn}"
    workers_tracked = {children.track(pid) for pid in workers}
    return Job(holder, holder_pid, workers_tracked, lock, lock_format, context, shells)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_holders_workers_hold_its_lock_until_they_end(
    seed: int, tmp_path: Path, children: Children
) -> None:
    job = start_job(seed, tmp_path, children, fewest_workers=0)
    holder, _holder_pid, workers, lock, lock_format, context, _shells = job
    holder.send_signal(signal.SIGKILL)
    holder.wait()

    left = inspect(lock, lock_format, tmp_path)
    if workers:
        assert left["state"] == "unknown", f"{context}: {json.dumps(left, indent=1)}"
        assert left["unknown_cause"] == "ambiguous", context
        assert f"PID {holder.pid} is gone" in left["reason"], context
        assert all(f"PID {pid} " in left["reason"] for pid in workers), context
        assert (left["holders"], left["action"]) == ([], None), context  # none named, none killed
    else:
        assert left["state"] == "stale", context

    for pid in workers:
        children.end(pid)  # a shell ends (and is reaped) once its sleep is killed
    assert wait_until(lambda: not any(_runs(pid) for pid in workers), timeout=10)
    ended = inspect(lock, lock_format, tmp_path)
    assert ended["state"] == "stale", f"{context}: {json.dumps(ended, indent=1)}"
    assert f"PID {holder.pid} is not running" in ended["proof"], context


def _runs(pid: int) -> bool:
    """Alive and not a zombie (a worker whose parent was killed is reaped by the namespace's
    init, or is a zombie until then)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return False
    return text[text.rfind(")") + 2] != "Z"


def test_what_a_later_process_with_the_recorded_pid_left_is_never_named(
    tmp_path: Path, children: Children
) -> None:
    """A stale record whose PID a later process took, called setsid and left a child in its
    session (a daemon's double fork): that child is no holder of the lock. It reads as the
    work of a killed holder would, so it is listed, `unknown`, and never named or killed."""
    leftover = children.start(["setsid", "sh", "-c", "sleep 60 & echo $$ $!"])
    assert leftover.stdout is not None
    leader, child = (int(pid) for pid in leftover.stdout.readline().split())
    children.track(child)
    assert wait_until(lambda: not _runs(leader), timeout=10)
    lock = tmp_path / "app.pid"
    lock.write_text(f"{leader}\n")
    written = time.time() - 7200  # written two hours ago, by the PID's earlier owner
    os.utime(lock, (written, written))
    found = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(0))
    assert found["state"] == "unknown", json.dumps(found, indent=1)
    assert (found["holders"], found["action"]) == ([], None)
    assert f"PID {child} " in found["reason"]


@pytest.mark.parametrize("seed", range(200, 216))
def test_the_advised_action_frees_the_lock_with_what_the_holder_started(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """A live holder past its budget, leading its session, its group or neither, with workers
    at random depths, one maybe in a session of its own: the action lockwarden gives, run as
    given, ends the hold and every worker (`kill PID` alone left them migrating, and the lock
    held by them; a group's kill leaves a worker that left the group)."""
    job = start_job(seed, tmp_path, children, 1, ("session", "group", "neither"), ("1", "2", "3"))
    holder, holder_pid, workers, lock, lock_format, context, _shells = job
    late = inspect(lock, lock_format, tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", context
    [named] = late["holders"]
    assert named["pid"] == holder_pid, context
    assert {below["pid"] for below in named["below"]} == workers, context  # the evidence
    argv = late["action"]["argv"]
    assert argv is not None and argv[0] == "kill", f"{context}: {late['action']}"

    subprocess.run(argv, check=True, timeout=10)
    holder.wait(timeout=10)
    left = [pid for pid in (holder_pid, *workers) if _runs(pid)]
    assert wait_until(lambda: not any(_runs(pid) for pid in left), timeout=10), (
        f"{context}: {argv} left {[pid for pid in left if _runs(pid)]} running"
    )
    after = inspect(lock, lock_format, tmp_path)
    assert after["state"] == "stale", f"{context}: {json.dumps(after, indent=1)}"


def _hours_from_now(hours: int) -> str:
    moment = datetime.now(UTC) + timedelta(hours=hours)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_advised_action_frees_a_lock_an_interactive_shell_holds(
    tmp_path: Path, children: Children
) -> None:
    """A person took the lock at their shell's prompt (`exec 9>F; flock 9`) and left: the
    interactive shell on a real terminal holds it and leads its process group. An interactive
    bash ignores SIGTERM, so the action given past the budget, run as given, must still end
    the hold."""
    lock = tmp_path / "job.lock"
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "kernel"\nwarn_after = "1s"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n',
    )
    controller, terminal = os.openpty()
    terminal_name = os.ttyname(terminal)

    def take_the_terminal() -> None:  # session leader opening a tty: it becomes the controlling one
        os.close(os.open(terminal_name, os.O_RDWR))

    shell = subprocess.Popen(
        [require_tool("bash"), "--norc", "--noprofile", "-i"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
        preexec_fn=take_the_terminal,
    )
    children.track(shell.pid)
    os.close(terminal)
    try:
        os.write(controller, f"exec 9>{lock}; flock 9; echo TAK''EN\n".encode())
        _read_until(controller, b"TAKEN", timeout=10)
        run_json("--once", "--config", config)  # the first run starts the sighting series
        time.sleep(1.5)
        _code, document = run_json("--once", "--config", config)
        [late] = document["locks"]
        assert late["state"] == "held_too_long", json.dumps(late, indent=1)
        assert [holder["pid"] for holder in late["holders"]] == [shell.pid]
        argv = late["action"]["argv"]
        subprocess.run(argv, check=True, timeout=10)
        freed = wait_until(lambda: _flock_is_free(lock), timeout=10)
        assert freed, f"{argv} left the lock held by the shell"
    finally:
        shell.kill()
        shell.wait(timeout=10)
        os.close(controller)


def _flock_is_free(path: Path) -> bool:
    taken = subprocess.run([require_tool("flock"), "-n", str(path), "true"], timeout=10)
    return taken.returncode == 0


def _read_until(descriptor: int, wanted: bytes, timeout: float) -> None:
    """Read a terminal until `wanted` shows, within `timeout` seconds."""
    output, deadline = b"", time.monotonic() + timeout
    while wanted not in output:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([descriptor], [], [], max(left, 0))
        assert ready, f"no {wanted!r} within {timeout}s: {output!r}"
        output += os.read(descriptor, 1024)


def test_lockwarden_run_from_the_holding_shell_is_not_in_its_action(tmp_path: Path) -> None:
    """A person checks the lock from the very shell that holds it: what runs below the holder
    is stopped with it, but never this run (nor whatever started it there)."""
    lock = tmp_path / "job.pid"
    config = write_config(
        tmp_path / "config.toml", f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "pidfile"\n'
    )
    script = (
        f"echo $$ > {lock}; sleep 60 & worker=$!; "
        f'env "$@" --once --json --config {config} --now {_hours_from_now(2)}; '
        'echo "$$ $worker"; kill "$worker"'
    )
    lockwarden = [sys.executable, "-m", "lockwarden"]
    shell = subprocess.run(
        [require_tool("bash"), "-c", script, "bash", *lockwarden],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    *report, pids = shell.stdout.strip().splitlines()
    shell_pid, worker = (int(pid) for pid in pids.split())
    [late] = json.loads("\n".join(report))["locks"]
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    assert [below["pid"] for below in late["holders"][0]["below"]] == [worker]
    assert late["action"]["line"] == f"kill -HUP {shell_pid}; kill {worker}"


PREINST = """#!/bin/sh
echo "$PPID $$" > "$(dirname "$0")/../../running"
read line < "$(dirname "$0")/../../gate"
"""


def _deb_waiting_in_its_preinst(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A package whose preinst tells the PIDs of dpkg and itself, then waits at a gate; the
    private database it is installed into (it has no files: nothing lands on the host)."""
    package = tmp_path / "package"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN/control").write_text(
        "Package: lockwarden-below-test\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Nobody <nobody@example.org>\nDescription: waits in its preinst\n"
    )
    (package / "DEBIAN/preinst").write_text(PREINST)
    (package / "DEBIAN/preinst").chmod(0o755)
    deb = tmp_path / "waits.deb"
    subprocess.run(
        [require_tool("dpkg-deb"), "-b", package, deb], check=True, capture_output=True, timeout=60
    )
    admin = tmp_path / "admin"
    for directory in ("updates", "info"):
        (admin / directory).mkdir(parents=True)
    (admin / "status").write_text("")
    # The preinst runs as <admin>/tmp.ci/preinst: its ../../ is the admin directory's parent.
    os.mkfifo(tmp_path / "gate")
    return deb, admin, tmp_path / "running"


@pytest.mark.parametrize("leads", ["group", "neither"])
def test_a_package_manager_below_the_holder_is_let_finish(
    leads: str, tmp_path: Path, children: Children
) -> None:
    """A deploy script holding its pidfile runs dpkg, which is in its preinst: the action waits
    for dpkg. Its group's kill (the script leads one) cut dpkg off mid-transaction and left the
    package half-installed; the holder's kill with the preinst's (it leads none) failed it."""
    deb, admin, running = _deb_waiting_in_its_preinst(tmp_path)
    lock = tmp_path / "deploy.pid"
    script = 'echo $$ > "$1"; dpkg --admindir="$2" --force-not-root -i "$3"; echo "dpkg: $?"'
    argv = [require_tool("bash"), "-c", script, "deploy", str(lock), str(admin), str(deb)]
    if leads == "neither":  # a step of a script: the session's leader is the script's shell
        argv = [require_tool("sh"), "-c", '"$@"; :', "sh", *argv]
    job = children.start(argv, start_new_session=True)
    assert wait_until(lambda: running.exists() and running.read_text().endswith("\n"), 30)
    dpkg, preinst = (children.track(int(pid)) for pid in running.read_text().split())
    holder = int(lock.read_text())

    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))

    try:
        assert late["state"] == "held_too_long", json.dumps(late, indent=1)
        assert late["reason"].endswith("let it finish"), late["reason"]
        assert late["action"]["line"].startswith(
            f"wait for PID {dpkg} (dpkg), below PID {holder} (bash), to finish"
        ), (preinst, late["action"])
    finally:
        with open(tmp_path / "gate", "w") as gate:
            gate.write("go\n")
    assert job.wait(timeout=60) == 0  # the transaction, let finish, completed
    assert "Status: install ok installed" in (admin / "status").read_text()


@pytest.mark.parametrize("leads", ["session", "neither"])
def test_a_shells_work_that_ignores_a_hangup_is_stopped_with_it(
    leads: str, tmp_path: Path, children: Children
) -> None:
    """A script holding its pidfile started its work with `nohup` (in a session of its own,
    out of the script's group, when the script leads one): the shell's SIGHUP must not be all
    the work gets. `kill -HUP SHELL WORKER` ended the shell and left the worker running, and
    the lock read stale beside it."""
    lock = tmp_path / "job.pid"
    start = "setsid nohup sleep 120" if leads == "session" else "nohup sleep 120"
    script = f'echo $$ > "$1"; {start} >/dev/null 2>&1 & echo $!; wait'
    argv = [require_tool("bash"), "-c", script, "job", str(lock)]
    if leads == "neither":  # a step of a script: the session's leader is the script's shell
        argv = [require_tool("sh"), "-c", '"$@"; :', "sh", *argv]
    job = children.start(argv, start_new_session=True)
    assert job.stdout is not None
    worker = children.track(int(job.stdout.readline()))
    holder = children.track(int(lock.read_text()))

    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    assert [below["pid"] for below in late["holders"][0]["below"]] == [worker]
    line = late["action"]["line"]

    subprocess.run([require_tool("bash"), "-c", line], check=True, timeout=10)
    assert wait_until(lambda: not _runs(holder) and not _runs(worker), timeout=10), (
        f"{line} left {[pid for pid in (holder, worker) if _runs(pid)]} running"
    )
    assert inspect(lock, "pidfile", tmp_path)["state"] == "stale"


CROWD = """
import os, subprocess, sys, time
open(sys.argv[1], "w").write(f"{os.getpid()}\\n")
workers = [subprocess.Popen(["sleep", "120"]).pid for _ in range(int(sys.argv[2]))]
print(" ".join(map(str, workers)), flush=True)
time.sleep(120)
"""


def test_a_holder_with_more_below_it_than_one_command_names_gets_advice_in_words(
    tmp_path: Path, children: Children
) -> None:
    """A build that holds its lock while 70 compilers run below it: a `kill` of the 64
    listed would leave the rest working, and the lock with them."""
    lock = tmp_path / "build.pid"
    holder = children.start([sys.executable, "-c", textwrap.dedent(CROWD), str(lock), "70"])
    assert holder.stdout is not None
    workers = {children.track(int(pid)) for pid in holder.stdout.readline().split()}
    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    [named] = late["holders"]
    assert named["more_below"] is True and len(named["below"]) == 64
    assert {below["pid"] for below in named["below"]} < workers
    assert late["action"]["argv"] is None, late["action"]  # no one command frees it
    assert late["action"]["line"].startswith(f"stop PID {holder.pid} (python"), late["action"]
    assert "more than 64 processes" in late["action"]["line"]


# argv: PIDFILE. A job that ignores SIGTERM, as it was written to, leading its group (run
# as a service's main process is), with a worker in that group that ignores it too: prints
# the worker's PID.
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the worker: ignored there too
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()}\\n")
print(subprocess.Popen(["sleep", "120"]).pid, flush=True)
time.sleep(120)
"""


def test_a_holder_that_ignores_sigterm_is_given_an_action_that_ends_it(
    tmp_path: Path, children: Children
) -> None:
    """Told 'kill -TERM -- -PID' run after run, a job that ignores SIGTERM ran on, and the
    lock with it (a new-user trial): what ignores the signal it would get gets SIGKILL."""
    lock = tmp_path / "job.pid"
    job = children.start(
        [sys.executable, "-c", textwrap.dedent(STUBBORN), str(lock)], start_new_session=True
    )
    assert job.stdout is not None
    worker = children.track(int(job.stdout.readline()))
    assert wait_until(lambda: lock.exists() and lock.read_text().strip() == str(job.pid))
    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    line = late["action"]["line"]
    assert "-KILL" in line, line
    subprocess.run([require_tool("bash"), "-c", line], check=True, timeout=10)
    job.wait(timeout=10)
    assert wait_until(lambda: not _runs(worker), timeout=10), f"{line} left {worker} running"
    assert inspect(lock, "pidfile", tmp_path)["state"] == "stale"


def test_a_shell_started_with_nohup_is_given_sigterm_not_sigkill(
    tmp_path: Path, children: Children
) -> None:
    """A script started with `nohup` ignores SIGHUP, not SIGTERM: it was told
    'kill -HUP -- -PID; kill -KILL PID', and SIGKILL skipped its EXIT trap (its cleanup),
    which SIGTERM runs. It waits in a builtin (`read`), so nothing below it ends it first."""
    lock, cleaned = tmp_path / "job.pid", tmp_path / "cleaned"
    script = 'trap "echo done > \\"$2\\"" EXIT; echo $$ > "$1"; echo ready; read -r _'
    argv = [require_tool("nohup"), require_tool("bash"), "-c", script, "job", str(lock)]
    job = children.start([*argv, str(cleaned)], "ready", start_new_session=True,
                         stdin=subprocess.PIPE)  # fmt: skip
    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    line = late["action"]["line"]
    assert "-KILL" not in line, line
    subprocess.run([require_tool("bash"), "-c", line], check=True, timeout=10)
    job.wait(timeout=10)
    assert cleaned.read_text() == "done\n", f"{line} skipped the shell's EXIT trap"


# argv: PIDFILE UNSHARE. A job that runs its work in a PID namespace of its own (`unshare
# --pid --fork`): the work is that namespace's init, which a signal from outside reaches only
# if it handles it; prints the work's PID (as the job's namespace sees it).
NAMESPACED = """
import os, subprocess, sys, time
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()}\\n")
unshare = subprocess.Popen([sys.argv[2], "--pid", "--fork", "sleep", "120"])
for _ in range(500):
    children = open(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read().split()
    if children:
        break
    time.sleep(0.01)
print(unshare.pid, children[0], flush=True)
time.sleep(120)
"""


def test_work_in_a_pid_namespace_of_its_own_is_stopped_with_its_holder(
    tmp_path: Path, children: Children
) -> None:
    """The init of a PID namespace ignores every signal it has no handler for, SIGKILL aside,
    whatever its ignored set says: `kill -TERM` left a job's `unshare --pid --fork` work
    running (and the lock with it, once a run saw it: a killed holder's work)."""
    lock = tmp_path / "job.pid"
    argv = [sys.executable, "-c", textwrap.dedent(NAMESPACED), str(lock), require_tool("unshare")]
    job = children.start(argv, start_new_session=True)
    assert job.stdout is not None
    unshare, work = (children.track(int(pid)) for pid in job.stdout.readline().split())
    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    assert {below["pid"] for below in late["holders"][0]["below"]} == {unshare, work}
    line = late["action"]["line"]
    assert f"-KILL {work}" in line, line
    subprocess.run([require_tool("bash"), "-c", line], check=True, timeout=10)
    job.wait(timeout=10)
    assert wait_until(lambda: not _runs(work), timeout=10), f"{line} left {work} running"
    assert inspect(lock, "pidfile", tmp_path)["state"] == "stale"


# argv: PIDFILE. A job whose worker, in a session of its own, ends its main thread and works
# on in another (its stat then reads Z): prints the worker's PID.
THREADED_WORKER = """
import os, subprocess, sys, time
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()}\\n")
work = ("import ctypes, threading, time; "
        "threading.Thread(target=time.sleep, args=(120,)).start(); "
        "ctypes.CDLL(None).pthread_exit(None)")
worker = subprocess.Popen([sys.executable, "-c", work], start_new_session=True)
print(worker.pid, flush=True)
time.sleep(120)
"""


def test_a_worker_whose_main_thread_ended_is_stopped_with_its_holder(
    tmp_path: Path, children: Children
) -> None:
    """A worker whose main thread ended while another works on reads as a zombie (Z) in its
    stat, but runs: it was left out of `below`, so the action left it working."""
    lock = tmp_path / "job.pid"
    argv = [sys.executable, "-c", textwrap.dedent(THREADED_WORKER), str(lock)]
    job = children.start(argv, start_new_session=True)
    assert job.stdout is not None
    worker = children.track(int(job.stdout.readline()))
    assert wait_until(lambda: _stat_fields(worker)[:1] == ["Z"], timeout=10)
    late = inspect(lock, "pidfile", tmp_path, "--now", _hours_from_now(2))
    assert late["state"] == "held_too_long", json.dumps(late, indent=1)
    assert worker in {below["pid"] for below in late["holders"][0]["below"]}, late
    line = late["action"]["line"]
    subprocess.run([require_tool("bash"), "-c", line], check=True, timeout=10)
    job.wait(timeout=10)
    ended = wait_until(lambda: len(_stat_fields(worker)) < 18 or _stat_fields(worker)[17] == "1")
    assert ended, f"{line} left {worker} running"


def _stat_fields(pid: int) -> list[str]:
    """Its stat's fields from the state on (none once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text[text.rfind(")") + 2 :].split()


def _watched(lock: Path, lock_format: str, tmp_path: Path) -> Path:
    """A config as the timer's runs have it: a state directory (the sighting memory), and the
    lock removed once proven stale, so a wrong `stale` would delete a lock in use."""
    return write_config(
        tmp_path / "watched.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n\n'
        f'[[lock]]\nname = "job"\npath = "{lock}"\nformat = "{lock_format}"\n'
        'remove_stale = true\nstale_confirm = "1s"\n',
    )


# 319 and 331 draw a session leader whose only workers left its session
@pytest.mark.parametrize("seed", [*range(300, 316), 319, 331])
def test_work_seen_below_a_killed_holder_keeps_its_lock_until_it_ends(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """A run saw the holder with its workers below it; the holder is then killed (`kill -9`).
    A worker in a session of its own (`setsid`, as a daemon's), or one started by a holder
    that leads nothing, is tied to it by nothing the kernel keeps once it is gone: only that
    run's memory knows it was the holder's work. While any worker the run saw still runs, the
    lock is unknown, naming it, and never removed; once they end, it is stale and removed.
    Randomized over the format, how the holder leads, the workers' depths and which of them
    the test ends before the second run; the test knows which still run."""
    (tmp_path / "state").mkdir(mode=0o700)
    job = start_job(seed, tmp_path, children, 1, ("session", "group", "neither"), ("1", "2", "3"))
    _holder, holder_pid, workers, lock, lock_format, context, shells = job
    config = _watched(lock, lock_format, tmp_path)
    _code, document = run_json("--once", "--config", config)
    [seen] = document["locks"]
    assert seen["state"] == "held", f"{context}: {json.dumps(seen, indent=1)}"
    assert {below["pid"] for below in seen["holders"][0]["below"]} == workers, context

    os.kill(holder_pid, signal.SIGKILL)
    assert wait_until(lambda: not _runs(holder_pid), timeout=10), context
    rng = random.Random(seed)
    ended = {pid for pid in sorted(workers) if rng.random() < 0.4}
    for pid in ended:
        children.end(pid)
    ended |= {shell for sleep, shell in shells.items() if sleep in ended}  # its `wait` returns
    assert wait_until(lambda: not any(_runs(pid) for pid in ended), timeout=10), context
    running = workers - ended
    context += f"; ended {sorted(ended)}, running {sorted(running)}"

    for _run in range(2):  # a second run would remove a lock it found stale again
        _code, document = run_json("--once", "--config", config)
        [left] = document["locks"]
        if not running:
            break
        assert left["state"] == "unknown", f"{context}: {json.dumps(left, indent=1)}"
        assert f"PID {holder_pid} is gone" in left["reason"], context
        assert all(f"PID {pid} " in left["reason"] for pid in running), context
        assert not any(f"PID {pid} " in left["reason"] for pid in workers - running), context
        assert (left["holders"], left["action"]) == ([], None), context
        assert lock.exists(), f"{context}: removed while its work ran"
    if running:
        for pid in running:
            children.end(pid)
        assert wait_until(lambda: not any(_runs(pid) for pid in running), timeout=10), context
        _code, document = run_json("--once", "--config", config)
        [left] = document["locks"]
    assert left["state"] == "stale", f"{context}: {json.dumps(left, indent=1)}"
    time.sleep(1.1)  # stale_confirm: the next run removes it
    run_json("--once", "--config", config)
    assert not lock.exists(), f"{context}: a stale lock was kept"


# argv: LOCK FORMAT COUNT ; writes its record (an owner record with its own start ticks, as
# lockwarden's `hold` writes one), starts COUNT shells, each starting a worker in a session of
# its own and then waiting, prints its PID and each shell's and worker's, then sleeps. Once a
# shell ends, its worker is no longer below the holder: nothing the kernel keeps ties them.
DETACHING = """
import json, os, socket, subprocess, sys, time
lock, lock_format, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open("/proc/self/stat") as stat:
    text = stat.read()
ticks = int(text[text.rfind(")") + 2 :].split()[19])
if lock_format == "pidfile":
    with open(lock, "w") as handle:
        handle.write(f"{os.getpid()}\\n")
else:
    os.mkdir(lock)
    record = {"pid": os.getpid(), "role": "migration", "host": socket.gethostname(),
              "start_ticks": ticks}
    with open(os.path.join(lock, "owner.json"), "w") as handle:
        json.dump(record, handle)
pids = []
for _ in range(count):
    shell = subprocess.Popen(
        ["sh", "-c", "setsid sleep 120 & echo $!; exec sleep 120"],
        stdout=subprocess.PIPE, text=True,
    )
    pids += [shell.pid, int(shell.stdout.readline())]
print(" ".join(map(str, [os.getpid(), *pids])), flush=True)
time.sleep(120)
"""


def _spawn_at(pid: int, children: Children) -> int:
    """A process unrelated to the lock given `pid` (through ns_last_pid; the test parts run
    in a PID namespace of their own, where nothing else takes PIDs meanwhile)."""
    for _attempt in range(20):
        with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
            handle.write(str(pid - 1))
        taker = children.start([require_tool("sleep"), "120"])
        if taker.pid == pid:
            return pid
        children.end(children.track(taker.pid))
    pytest.fail(f"could not start a process as PID {pid}")


@pytest.mark.parametrize("seed", range(400, 416))
def test_work_once_below_a_holder_keeps_its_lock_however_the_tie_was_lost(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """A run saw the holder with its workers below it. Then the tie a later run could follow
    is lost: the shell between holder and worker ends (the worker is no longer below the live
    holder, which a second run sees), the holder is killed, and another process may take its
    PID (a record with its start ticks proves the holder gone). While any process a run saw
    below the holder still runs, the lock is unknown, naming it, and never removed; once
    they end, it is stale and removed. Randomized over the format, the number of workers,
    which shells end while the holder lives, whether its PID is taken, and which processes
    end before the last runs; the test knows which still run."""
    rng = random.Random(seed)
    (tmp_path / "state").mkdir(mode=0o700)
    lock_format = rng.choice(["pidfile", "owner-record"])
    lock = tmp_path / ("job.pid" if lock_format == "pidfile" else "LOCK")
    script = textwrap.dedent(DETACHING)
    count = rng.randint(1, 2)  # at most 4 processes: the reason lists 5
    holder = children.start([sys.executable, "-c", script, str(lock), lock_format, str(count)])
    assert holder.stdout is not None
    holder_pid, *below = (int(pid) for pid in holder.stdout.readline().split())
    seen = {children.track(pid) for pid in below}
    config = _watched(lock, lock_format, tmp_path)
    _code, document = run_json("--once", "--config", config)
    [first] = document["locks"]
    assert {each["pid"] for each in first["holders"][0]["below"]} == seen, json.dumps(first)

    shells = set(below[0::2])
    left = {pid for pid in sorted(shells) if rng.random() < 0.6}
    reused = lock_format == "owner-record" and rng.random() < 0.5
    context = f"seed {seed}: {lock_format}, shells {sorted(shells)} ended {sorted(left)}"
    context += f", holder {holder_pid}, its PID {'taken' if reused else 'free'}"
    for pid in left:
        children.end(pid)
    assert wait_until(lambda: not any(_runs(pid) for pid in left), timeout=10), context
    _code, document = run_json("--once", "--config", config)  # the holder lives, its work left
    assert document["locks"][0]["state"] == "held", f"{context}: {json.dumps(document)}"

    holder.kill()
    holder.wait(timeout=10)
    if reused:
        _spawn_at(holder_pid, children)
    ended = {pid for pid in sorted(seen - left) if rng.random() < 0.4}
    for pid in ended:
        children.end(pid)
    assert wait_until(lambda: not any(_runs(pid) for pid in ended), timeout=10), context
    running = {pid for pid in seen if _runs(pid)}  # a shell's own sleep ends it
    context += f"; running {sorted(running)}"
    for _run in range(2 if running else 0):  # a second run would remove a stale lock
        _code, document = run_json("--once", "--config", config)
        [found] = document["locks"]
        assert found["state"] == "unknown", f"{context}: {json.dumps(found, indent=1)}"
        assert all(f"PID {pid} " in found["reason"] for pid in running), context
        assert not any(f"PID {pid} " in found["reason"] for pid in seen - running), context
        assert (found["holders"], found["action"]) == ([], None), context
        assert lock.exists(), f"{context}: removed while its work ran"
        time.sleep(1.1)  # stale_confirm
    for pid in running:
        children.end(pid)
    assert wait_until(lambda: not any(_runs(pid) for pid in running), timeout=10), context
    _code, document = run_json("--once", "--config", config)
    assert document["locks"][0]["state"] == "stale", f"{context}: {json.dumps(document)}"
    time.sleep(1.1)  # stale_confirm: the next run removes it
    run_json("--once", "--config", config)
    assert not lock.exists(), f"{context}: a stale lock was kept"


def test_work_of_a_holder_of_two_locks_is_listed_once_for_each(
    tmp_path: Path, children: Children
) -> None:
    """One holder records itself in two locks, its worker in a session of its own: killed, each
    lock lists the worker once (the capture read it for both)."""
    (tmp_path / "state").mkdir(mode=0o700)
    locks = [tmp_path / "one.pid", tmp_path / "two.pid"]
    code = """
        import os, subprocess, sys, time
        for lock in sys.argv[1:]:
            with open(lock, "w") as handle:
                handle.write(f"{os.getpid()}\\n")
        worker = subprocess.Popen(["sleep", "120"], start_new_session=True).pid
        print(os.getpid(), worker, flush=True)
        time.sleep(120)
    """
    holder = children.start([sys.executable, "-c", textwrap.dedent(code), *map(str, locks)])
    assert holder.stdout is not None
    _holder_pid, worker = (int(pid) for pid in holder.stdout.readline().split())
    children.track(worker)
    config = write_config(
        tmp_path / "two.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        + "".join(
            f'\n[[lock]]\nname = "{lock.stem}"\npath = "{lock}"\nformat = "pidfile"\n'
            for lock in locks
        ),
    )
    _code, document = run_json("--once", "--config", config)
    assert [found["state"] for found in document["locks"]] == ["held", "held"], document
    holder.kill()
    holder.wait(timeout=10)
    _code, document = run_json("--once", "--config", config)
    for found in document["locks"]:
        assert found["state"] == "unknown", json.dumps(found, indent=1)
        assert found["reason"].count(f"PID {worker} ") == 1, found["reason"]


def test_a_killed_holder_with_more_below_it_than_remembered_is_never_stale(
    tmp_path: Path, children: Children
) -> None:
    """A run saw 70 processes below the holder and kept 64 (the limit of what runs below a
    holder). The holder is killed and the 64 end; the six it did not keep run on. Nothing
    tells them from other processes, so the lock stays unknown, saying why and what to do,
    and is never removed: not even once those six end, which no run can know."""
    (tmp_path / "state").mkdir(mode=0o700)
    lock = tmp_path / "build.pid"
    holder = children.start([sys.executable, "-c", textwrap.dedent(CROWD), str(lock), "70"])
    assert holder.stdout is not None
    workers = {children.track(int(pid)) for pid in holder.stdout.readline().split()}
    config = _watched(lock, "pidfile", tmp_path)
    _code, document = run_json("--once", "--config", config)
    [named] = document["locks"][0]["holders"]
    kept = {below["pid"] for below in named["below"]}
    assert named["more_below"] is True and len(kept) == 64, json.dumps(named)

    holder.kill()
    holder.wait(timeout=10)
    for pid in kept:
        children.end(pid)
    assert wait_until(lambda: not any(_runs(pid) for pid in kept), timeout=10)
    for unkept_running in (True, False):
        if not unkept_running:
            for pid in workers - kept:
                children.end(pid)
            assert wait_until(lambda: not any(_runs(pid) for pid in workers), timeout=10)
        for _run in range(2):  # a second run would remove a lock it found stale again
            _code, document = run_json("--once", "--config", config)
            [found] = document["locks"]
            assert found["state"] == "unknown", json.dumps(found, indent=1)
            assert f"PID {holder.pid} is gone" in found["reason"], found["reason"]
            assert "more ran below it" in found["reason"], found["reason"]
            assert lock.exists(), "removed while its work may run"
            time.sleep(1.1)  # stale_confirm
