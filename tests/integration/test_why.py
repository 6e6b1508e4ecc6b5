"""`lockwarden why PID`, from the blocked side: real processes blocked in flock(2), in
fcntl(F_SETLKW) and in an OFD wait, a chain of two locks, a two-process deadlock, and processes
stuck on something else; each judged by the real CLI against what the test started."""

from __future__ import annotations

import json
import math
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    FLOCK_HOLDER,
    OFD_HOLDER,
    POSIX_HOLDER,
    Children,
    require_tool,
    run_cli,
    wait_until,
)

# Take a lock of one style on argv[1] and wait for it: flock, POSIX (lockf) or OFD.
WAITER = """
import fcntl, struct, sys
handle = open(sys.argv[1], "r+")
print("ready", flush=True)
style = sys.argv[2]
if style == "flock":
    fcntl.flock(handle, fcntl.LOCK_EX)
elif style == "posix":
    fcntl.lockf(handle, fcntl.LOCK_EX)
else:
    fcntl.fcntl(handle, fcntl.F_OFD_SETLKW, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
import time; time.sleep(120)
"""
# A holder of each style (tests/conftest.py).
HOLDERS = {"flock": FLOCK_HOLDER, "posix": POSIX_HOLDER, "ofd": OFD_HOLDER}

# Hold argv[1] (flock), then wait for argv[2] (flock): one link of a chain or a deadlock.
HOLD_THEN_WAIT = """
import fcntl, sys, time
held = open(sys.argv[1], "a")
fcntl.flock(held, fcntl.LOCK_EX)
print("ready", flush=True)
sys.stdin.readline()  # the test says when to go on
wanted = open(sys.argv[2], "a")
fcntl.flock(wanted, fcntl.LOCK_EX)
time.sleep(120)
"""


def blocked_in_lock_call(pid: int) -> bool:
    """The test's own view, from the kernel's wait channel: a thread of `pid` sleeps in a lock
    wait (flock's `locks_lock_inode_wait`, fcntl's `fcntl_setlk`)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        wchan = (task / "wchan").read_text() if (task / "wchan").exists() else ""
        if "lock" in wchan or "setlk" in wchan:
            return True
    return False


def why(*args: str) -> tuple[int, dict[str, Any]]:
    completed = run_cli("why", "--json", *args)
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def _asked_while_blocked(
    waiter: subprocess.Popen[str], truth: set[int], context: str
) -> tuple[int, dict[str, Any]] | None:
    """With no holder in its way (`truth` empty), the waiter gets its lock: None. Else, once it
    blocks in its lock call, why's exit code and its one wait."""
    assert waiter.stdout is not None
    if not truth:
        assert waiter.stdout.readline().strip() == "got", context
        return None
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10), context
    code, document = why(str(waiter.pid))
    [process] = document["processes"]
    [wait] = process["waits"]
    return code, wait


def holder_pids(wait: dict[str, Any]) -> set[int]:
    return {holder["pid"] for holder in wait["lock"]["holders"]}


@pytest.mark.parametrize("style", ["flock", "posix", "ofd"])
def test_a_writer_blocked_on_a_kernel_lock_is_followed_to_its_holder(
    style: str, tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(HOLDERS[style], str(lock))
    started = time.monotonic()
    waiter = children.python(WAITER, str(lock), style)
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)

    code, document = why(str(waiter.pid))
    [process] = document["processes"]
    assert process["blocked"] and code == 0, process  # within the default budgets
    [wait] = process["waits"]
    assert wait["path"] == str(lock)
    assert holder_pids(wait) == {holder.pid}
    assert waiter.pid not in holder_pids(wait)
    # within its budget the lock has no action, but the person whose command waits is told
    # what would free it now: the action it would get past its budget
    assert wait["lock"]["action"] is None and wait["to_free_it"] == f"kill {holder.pid}", wait
    within = run_cli("why", str(waiter.pid)).stdout
    assert f"to free it now: kill {holder.pid} (no action is due yet" in within, within
    # Held up to longer than a budget it is not known to be past: no action is due, and it is
    # not said to be within the budget either (a new user was told so of a 16 s hold and 5 s).
    time.sleep(max(0.0, 1.2 - (time.monotonic() - started)))
    unsure = run_cli("why", str(waiter.pid), "--warn-after", "1s", "--critical-after", "1h")
    assert unsure.returncode == 0, unsure.stdout
    assert "within its" not in unsure.stdout and "no action is due yet" in unsure.stdout

    text = run_cli("why", str(waiter.pid), "--warn-after", "0s", "--critical-after", "0s")
    assert text.returncode == 2, text.stdout  # a budget of 0: any hold is past it
    assert f"PID {waiter.pid} (" in text.stdout and f"by PID {holder.pid} (" in text.stdout
    assert str(lock) in text.stdout and f"kill {holder.pid}" in text.stdout


def go_on(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("\n")
    process.stdin.flush()


def test_a_chain_of_two_locks_is_followed_to_its_end(tmp_path: Path, children: Children) -> None:
    first, second = tmp_path / "first.lock", tmp_path / "second.lock"
    root = children.python(FLOCK_HOLDER, str(first))
    middle = children.start(
        [*python(), HOLD_THEN_WAIT, str(second), str(first)], ready="ready", stdin=subprocess.PIPE
    )
    go_on(middle)
    waiter = children.python(WAITER, str(second), "flock")
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    assert wait_until(lambda: blocked_in_lock_call(middle.pid), timeout=10)

    _code, document = why(str(waiter.pid))
    [process] = document["processes"]
    [wait] = process["waits"]
    assert (wait["path"], holder_pids(wait)) == (str(second), {middle.pid})
    [behind] = wait["behind"]
    assert behind["pid"] == middle.pid and not behind["deadlock"]
    [next_wait] = behind["waits"]
    assert (next_wait["path"], holder_pids(next_wait)) == (str(first), {root.pid})
    assert next_wait["behind"] == []


def test_two_processes_waiting_on_each_other_are_a_deadlock(
    tmp_path: Path, children: Children
) -> None:
    first, second = tmp_path / "first.lock", tmp_path / "second.lock"
    one = children.start(
        [*python(), HOLD_THEN_WAIT, str(first), str(second)], ready="ready", stdin=subprocess.PIPE
    )
    two = children.start(
        [*python(), HOLD_THEN_WAIT, str(second), str(first)], ready="ready", stdin=subprocess.PIPE
    )
    go_on(one)
    go_on(two)
    assert wait_until(lambda: blocked_in_lock_call(one.pid) and blocked_in_lock_call(two.pid))

    code, document = why(str(one.pid))
    [process] = document["processes"]
    [behind] = process["waits"][0]["behind"]
    assert behind["pid"] == two.pid
    assert behind["waits"][0]["behind"][0] == {**behind["waits"][0]["behind"][0], "deadlock": True}
    assert code == 2  # a deadlock never ends by itself
    text = run_cli("why", str(one.pid))
    assert "a deadlock" in text.stdout


@pytest.mark.parametrize("stuck", ["sleep", "pipe"])
def test_a_process_stuck_on_something_else_is_said_not_to_wait_on_a_lock(
    stuck: str, children: Children
) -> None:
    argv = ["sleep", "120"] if stuck == "sleep" else ["cat"]
    process = children.start(argv, stdin=subprocess.PIPE)
    assert wait_until(lambda: Path(f"/proc/{process.pid}/wchan").read_text() not in ("", "0"))
    code, document = why(str(process.pid))
    [answer] = document["processes"]
    assert (code, answer["blocked"], answer["waits"]) == (0, False, [])
    assert "sleeping" in answer["doing"], answer
    text = run_cli("why", str(process.pid))
    assert "is not waiting on any lock lockwarden can see" in text.stdout


def test_without_a_pid_every_process_the_kernel_lists_as_waiting_is_answered(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    waiters = [children.python(WAITER, str(lock), "flock") for _ in range(2)]
    assert wait_until(lambda: all(blocked_in_lock_call(w.pid) for w in waiters), timeout=10)
    _code, document = why()
    ours = {p["pid"]: p for p in document["processes"] if p["pid"] in {w.pid for w in waiters}}
    assert set(ours) == {w.pid for w in waiters}  # other waiters on the host are not ours
    assert all(holder_pids(p["waits"][0]) == {holder.pid} for p in ours.values())


def test_a_pid_that_is_not_running_cannot_be_told(tmp_path: Path) -> None:
    require_tool("true")
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    code, document = why(gone.stdout.strip())
    assert code == 3 and "no process" in document["processes"][0]["problem"]


def python() -> list[str]:
    import sys

    return [sys.executable, "-c"]


RANGE_HOLDER = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "r+")
fcntl.lockf(handle, fcntl.LOCK_EX, 10, int(sys.argv[2]), os.SEEK_SET)
print("ready", flush=True)
if len(sys.argv) > 3:  # then wait for more bytes: a waiter of its own
    fcntl.lockf(handle, fcntl.LOCK_EX, 10, int(sys.argv[3]), os.SEEK_SET)
time.sleep(120)
"""


def test_a_posix_lock_on_other_bytes_is_not_what_the_writer_waits_for(
    tmp_path: Path, children: Children
) -> None:
    """Two POSIX locks on different bytes of one file: the writer waiting for bytes 100-109 is
    blocked by their holder alone, not by the holder of bytes 0-9 (SQLite's byte locks)."""
    lock = tmp_path / "db"
    lock.write_bytes(b"\0" * 200)
    low = children.python(RANGE_HOLDER, str(lock), "0")
    high = children.python(RANGE_HOLDER, str(lock), "100")
    waiter = children.start([*python(), RANGE_HOLDER, str(lock), "50", "100"], ready="ready")
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    _code, document = why(str(waiter.pid))
    [wait] = document["processes"][0]["waits"]
    named = {holder["pid"] for holder in wait["lock"]["holders"]}
    assert {low.pid, high.pid} <= named  # the file's holders, as inspect lists them
    assert wait["blocked_by"] == [high.pid]  # bytes 0-9 block nobody waiting for 100-109
    assert wait["to_free_it"] == f"kill {high.pid}", wait  # not the holder of bytes 0-9
    text = run_cli("why", str(waiter.pid)).stdout
    assert f"by PID {high.pid} (" in text and f"PID {low.pid} (" not in text, text
    assert wait["behind"] == []


def test_an_sqlite_writer_retrying_in_its_busy_handler_is_pointed_at_the_holder(
    tmp_path: Path, children: Children
) -> None:
    """sqlite3 with `.timeout` does not wait in a lock call: its busy handler sleeps and tries
    again. why says it waits on no lock (true), and that a file it has open, the database, is
    held by the writer in its way, with what would free it; a candidate, not a claimed wait."""
    sqlite3 = require_tool("sqlite3")
    database = tmp_path / "store.db"
    subprocess.run([sqlite3, str(database), "CREATE TABLE t(a);"], check=True, timeout=30)
    holder = children.start([sqlite3, str(database)], stdin=subprocess.PIPE)
    retrying = children.start([sqlite3, str(database)], stdin=subprocess.PIPE)
    assert holder.stdin is not None and retrying.stdin is not None
    holder.stdin.write("BEGIN IMMEDIATE; INSERT INTO t VALUES (1);\n")
    holder.stdin.flush()
    assert wait_until(lambda: f":{database.stat().st_ino} " in Path("/proc/locks").read_text())
    retrying.stdin.write(".timeout 60000\nBEGIN IMMEDIATE;\n")
    retrying.stdin.flush()

    def pointed() -> dict[str, Any] | None:
        [process] = why(str(retrying.pid))[1]["processes"]
        return process if process["locked_open"] else None

    assert wait_until(lambda: pointed() is not None, timeout=10)
    process = pointed()
    assert process is not None and not process["blocked"], process
    [candidate] = process["locked_open"]
    assert candidate["path"] == str(database) and candidate["held_by"] == [holder.pid], candidate
    assert candidate["to_free_it"] == f"kill {holder.pid}", candidate
    text = run_cli("why", str(retrying.pid)).stdout
    assert f"by PID {holder.pid} (" in text and "busy timeout" in text, text


RETRIES_ON = """
import sys, time
handle = open(sys.argv[1], "a")  # tries, now and then, to take it: never waits in the kernel
print("ready", flush=True)
time.sleep(120)
"""


def test_a_file_named_like_sqlites_shm_beside_no_database_is_a_lock_of_its_own(
    tmp_path: Path, children: Children
) -> None:
    """Only beside an SQLite database is `NAME-shm` judged with it; beside a plain file it is
    a lock of its own, and a process retrying on it is pointed at its holder."""
    (tmp_path / "queue").write_text("not a database\n")
    lock = tmp_path / "queue-shm"
    holder = children.python(FLOCK_HOLDER, str(lock))
    retrying = children.python(RETRIES_ON, str(lock))
    [process] = why(str(retrying.pid))[1]["processes"]
    [candidate] = process["locked_open"]
    assert candidate["path"] == str(lock) and candidate["held_by"] == [holder.pid], candidate


# Take each `STYLE:MODE:START:LENGTH` lock on argv[1] without waiting (flock, POSIX or OFD;
# `sh` or `ex`; LENGTH 0: to the end of the file) and say which it got: a holder of several.
TAKES = """
import fcntl, json, struct, sys, time
handle = open(sys.argv[1], "r+")
got = []
for spec in sys.argv[2:]:
    style, mode, start, length = spec.split(":")
    try:
        if style == "flock":
            fcntl.flock(handle, (fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        elif style == "posix":
            kind = fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH
            fcntl.lockf(handle, kind | fcntl.LOCK_NB, int(length), int(start))
        else:
            kind = fcntl.F_WRLCK if mode == "ex" else fcntl.F_RDLCK
            flock = struct.pack("hhqqi4x", kind, 0, int(start), int(length), 0)
            fcntl.fcntl(handle, fcntl.F_OFD_SETLK, flock)
        got.append(spec)
    except OSError:
        pass
print(json.dumps(got), flush=True)
time.sleep(120)
"""
# Wait for one `STYLE:MODE:START:LENGTH` lock on argv[1] (flock or POSIX: /proc/locks names
# the request of either), then say so.
WAITS_FOR = """
import fcntl, sys, time
handle = open(sys.argv[1], "r+")
style, mode, start, length = sys.argv[2].split(":")
print("ready", flush=True)
if style == "flock":
    fcntl.flock(handle, fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH)
else:
    fcntl.lockf(handle, fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH, int(length), int(start))
print("got", flush=True)
time.sleep(120)
"""


def conflict(held: str, wanted: str) -> bool:
    """The kernel's rule, as the test knows it: flock(2) and fcntl locks never meet, two read
    locks never conflict, and byte ranges must overlap (a flock covers the whole file)."""
    (style, mode, start, length), (w_style, w_mode, w_start, w_length) = (
        spec.split(":") for spec in (held, wanted)
    )
    if (style == "flock") != (w_style == "flock") or mode == w_mode == "sh":
        return False
    if style == "flock":
        return True
    end = int(start) + int(length) if int(length) else math.inf
    w_end = int(w_start) + int(w_length) if int(w_length) else math.inf
    return int(start) < w_end and int(w_start) < end


def random_lock(rng: random.Random, styles: tuple[str, ...]) -> str:
    start, length = rng.randrange(0, 40), rng.choice([0, rng.randrange(1, 20)])
    return f"{rng.choice(styles)}:{rng.choice(['sh', 'ex'])}:{start}:{length}"


@pytest.mark.parametrize("seed", range(12))
def test_why_names_as_blockers_exactly_the_holders_whose_locks_conflict(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """A randomized differential: holders of random flock, POSIX and OFD locks (some several)
    on one file, and a writer waiting for a random flock or POSIX lock on it. `why` names as
    blocking it exactly the holders the kernel's rules say it waits for: a flock waits on no
    POSIX lock, a read lock on no read lock. Naming the others named an innocent process to
    kill, and a holder waiting on its own unrelated lock made a false deadlock."""
    rng = random.Random(seed)
    lock = tmp_path / "shared"
    lock.write_bytes(b"\0" * 64)
    held: dict[int, list[str]] = {}
    for _ in range(rng.randrange(2, 5)):
        specs = [random_lock(rng, ("flock", "posix", "ofd")) for _ in range(rng.randrange(1, 3))]
        holder = children.start([*python(), TAKES, str(lock), *specs])
        assert holder.stdout is not None
        held[holder.pid] = json.loads(holder.stdout.readline())
    wanted = random_lock(rng, ("flock", "posix"))
    truth = {pid for pid, specs in held.items() if any(conflict(s, wanted) for s in specs)}
    context = f"seed {seed}: held {held}, wanted {wanted}"
    waiter = children.python(WAITS_FOR, str(lock), wanted)
    assert waiter.stdout is not None
    asked = _asked_while_blocked(waiter, truth, context)
    if asked is None:
        return
    _code, wait = asked
    assert set(wait["blocked_by"]) == truth, context
    assert all(not behind["deadlock"] for behind in wait["behind"]), context
    assert wait["to_free_it"] == "kill " + " ".join(map(str, wait["blocked_by"])), context


# Hold a POSIX read lock on argv[1], then wait for a flock on argv[2].
POSIX_THEN_FLOCK = """
import fcntl, sys, time
held = open(sys.argv[1], "r+")
fcntl.lockf(held, fcntl.LOCK_SH)
print("ready", flush=True)
wanted = open(sys.argv[2], "r+")
fcntl.flock(wanted, fcntl.LOCK_EX)
time.sleep(120)
"""


def test_a_holders_lock_the_chain_does_not_wait_for_makes_no_deadlock(
    tmp_path: Path, children: Children
) -> None:
    """One waits (flock) on a lock held by another, which waits (flock) on a file the first
    holds a POSIX lock on and a third a flock: the POSIX lock blocks no flock, so the third
    is the end of the chain, not a deadlock that never ends by itself."""
    first, second = tmp_path / "first.lock", tmp_path / "second.lock"
    first.touch()
    second.touch()
    third = children.python(FLOCK_HOLDER, str(second))
    two = children.start(
        [*python(), HOLD_THEN_WAIT, str(first), str(second)], ready="ready", stdin=subprocess.PIPE
    )
    one = children.python(POSIX_THEN_FLOCK, str(second), str(first))
    go_on(two)
    assert wait_until(lambda: blocked_in_lock_call(one.pid) and blocked_in_lock_call(two.pid))
    code, document = why(str(one.pid))
    [process] = document["processes"]
    [behind] = process["waits"][0]["behind"]
    assert behind["pid"] == two.pid
    [next_wait] = behind["waits"]
    assert next_wait["blocked_by"] == [third.pid] and next_wait["behind"] == [], next_wait
    assert code == 0  # within the default budgets, and no deadlock


# Hold argv[1] through one open, then wait for it through a second: flock(2) locks belong to
# open file descriptions, so the process waits on itself.
SELF_DEADLOCK = """
import fcntl, sys
first, second = open(sys.argv[1], "w"), open(sys.argv[1], "w")
fcntl.flock(first, fcntl.LOCK_EX)
print("ready", flush=True)
fcntl.flock(second, fcntl.LOCK_EX)
"""


def test_a_process_waiting_for_its_own_flock_is_a_deadlock(
    tmp_path: Path, children: Children
) -> None:
    """It holds a flock through one open and waits for it through another: no other process
    will ever let go. It was said to wait 'within its budget' (exit 0), its own PID dropped
    from the holders; a POSIX lock, which a process never waits on itself for, is not so."""
    lock = tmp_path / "self.lock"
    stuck = children.start([*python(), SELF_DEADLOCK, str(lock)], ready="ready")
    assert wait_until(lambda: blocked_in_lock_call(stuck.pid))
    code, document = why(str(stuck.pid))
    [process] = document["processes"]
    [wait] = process["waits"]
    assert wait["blocked_by"] == [stuck.pid], wait
    assert [behind["deadlock"] for behind in wait["behind"]] == [True], wait
    assert code == 2, document  # a deadlock never ends by itself
    told = run_cli("why", str(stuck.pid)).stdout  # and the text says so, not "may end"
    assert "a deadlock never ends by itself" in told and "may end by itself" not in told, told


# Hold the `STYLE:MODE:START:LENGTH` locks of argv[2] (comma-separated) through an open of
# argv[1] of its own, and the OFD locks of argv[3] through the open it then waits through;
# fork a child that shares only the latter; say what it got; then wait for the OFD or POSIX
# lock argv[4] (F_OFD_SETLKW, F_SETLKW) through that open, and say when it has it.
FCNTL_WAITER = """
import fcntl, json, os, struct, sys, time
path, mine, through, wanted = sys.argv[1:5]
def take(fd, spec, wait=False):
    style, mode, start, length = spec.split(":")
    try:
        if style == "flock":
            fcntl.flock(fd, (fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        elif style == "posix":
            kind = fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH
            fcntl.lockf(fd, kind if wait else kind | fcntl.LOCK_NB, int(length), int(start))
        else:
            kind = fcntl.F_WRLCK if mode == "ex" else fcntl.F_RDLCK
            flock = struct.pack("hhqqi4x", kind, 0, int(start), int(length), 0)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, flock)
        return True
    except OSError:
        return False
other, waiting = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
got_other = [spec for spec in mine.split(",") if spec and take(other, spec)]
got_through = [spec for spec in through.split(",") if spec and take(waiting, spec)]
ended, alive = os.pipe()
child = os.fork()
if child == 0:  # shares the open it waits through, and ends when it ends
    os.close(other)
    os.close(alive)
    os.read(ended, 1)
    os._exit(0)
os.close(ended)
print(json.dumps({"other": got_other, "through": got_through, "child": child}), flush=True)
take(waiting, wanted, wait=True)
print("got", flush=True)
time.sleep(120)
"""


def few_bytes_lock(rng: random.Random, styles: tuple[str, ...]) -> str:
    """A random lock, mostly on a few bytes (a lock to the end of the file meets all)."""
    length = 0 if rng.random() < 0.15 else rng.randrange(1, 12)
    return f"{rng.choice(styles)}:{rng.choice(['sh', 'ex'])}:{rng.randrange(0, 60)}:{length}"


def few_bytes_locks(rng: random.Random, styles: tuple[str, ...], most: int) -> list[str]:
    return [few_bytes_lock(rng, styles) for _ in range(rng.randrange(0, most + 1))]


@pytest.mark.parametrize("seed", range(32))
def test_an_fcntl_waiter_is_blocked_by_exactly_the_holders_whose_locks_conflict(
    seed: int, tmp_path: Path, children: Children
) -> None:
    """A randomized differential for fcntl waits: holders of random flock, POSIX and OFD locks
    on one file; a process that holds random locks of its own through another open, and (when
    it waits for an OFD lock) OFD locks through the open it waits through, which a forked child
    shares; it waits for a random OFD or POSIX lock. /proc/locks shows an OFD request with no
    PID, so its bytes and mode were taken as unknown: why named every fcntl holder of the file
    (other bytes, a reader when a reader waits, the child sharing the waiter's own open) as
    what it waits for, and to kill. And its own process's locks were never what it waits for,
    though its POSIX lock blocks its OFD request, and its OFD lock through another open either
    request, for ever (the kernel reports no deadlock between them)."""
    rng = random.Random(seed)
    lock = tmp_path / "shared"
    lock.write_bytes(b"\0" * 64)
    wanted = few_bytes_lock(rng, ("ofd", "ofd", "posix"))
    _style, _mode, start, length = wanted.split(":")
    # one holder's lock is on some of those bytes (unless another holder's is in its way)
    first = int(start) + rng.randrange(int(length) or 9)
    in_the_way = f"{rng.choice(['posix', 'ofd'])}:ex:{first}:2"
    held: dict[int, list[str]] = {}
    for number in range(rng.randrange(2, 5)):
        specs = few_bytes_locks(rng, ("flock", "posix", "ofd"), 3) + [in_the_way] * (number == 0)
        holder = children.start([*python(), TAKES, str(lock), *specs])
        assert holder.stdout is not None
        held[holder.pid] = json.loads(holder.stdout.readline())
    mine = few_bytes_locks(rng, ("flock", "posix", "ofd"), 3)
    # a POSIX request conflicts with the OFD locks of the open it is made through: kept apart
    through = few_bytes_locks(rng, ("ofd",), 3)
    through = through if wanted.startswith("ofd") else []
    waiter = children.start(
        [*python(), FCNTL_WAITER, str(lock), ",".join(mine), ",".join(through), wanted]
    )
    assert waiter.stdout is not None
    got = json.loads(waiter.stdout.readline())
    child = children.track(got["child"])
    # its own POSIX locks are never in the way of its POSIX request
    same_owner = "posix:" if wanted.startswith("posix") else "none"
    held[waiter.pid] = [spec for spec in got["other"] if not spec.startswith(same_owner)]
    truth = {pid for pid, specs in held.items() if any(conflict(s, wanted) for s in specs)}
    context = f"seed {seed}: held {held}, through its waiting open {got['through']}, wants {wanted}"
    asked = _asked_while_blocked(waiter, truth, context)
    if asked is None:
        return
    code, wait = asked
    assert wait["call"] == ("OFD fcntl" if wanted.startswith("ofd") else "fcntl"), context
    assert set(wait["blocked_by"]) == truth and child not in wait["blocked_by"], context
    deadlock = [behind["pid"] for behind in wait["behind"] if behind["deadlock"]]
    assert deadlock == ([waiter.pid] if waiter.pid in truth else []), context
    assert code == (2 if waiter.pid in truth else 0), context  # a deadlock never ends by itself
