"""`lockwarden hold` and `lockwarden.hold()`: real commands, real processes, real signals.

Every hold runs as `python -m lockwarden hold` in its own session (so a test can send the
terminal's Ctrl-C to its whole foreground group with killpg), and its COMMAND prints `ready`
once it runs, which is after the lock and its record exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

import lockwarden
from conftest import Children, cli_env, run_cli, run_json, wait_until
from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import Evidence
from lockwarden.formats import FORMATS
from lockwarden.formats.record import RecordProblem, parse_record
from lockwarden.holding import hold as holding
from lockwarden.model import Claim, Finding, Process, Severity
from lockwarden.support.durations import format_limit, parse_duration
from lockwarden.support.safe_read import UnsafeRecord

EXIT_HELD = 73
EXIT_STALE = 74
READY_THEN_SLEEP = ["sh", "-c", "echo ready; exec sleep 60"]


def default_interrupt() -> None:
    """Children get SIGINT's default action even when pytest runs as a background job (which
    a shell starts with SIGINT ignored, and ignored signals stay ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_hold(
    children: Children, lock: Path, role: str, command: list[str], *options: str
) -> tuple[subprocess.Popen[str], int]:
    """A running `lockwarden hold`, and the PID of its COMMAND (both killed at teardown)."""
    argv = [sys.executable, "-m", "lockwarden", "hold", str(lock), "--role", role, *options]
    holder = children.start(
        [*argv, "--", *command],
        ready="ready",
        env=cli_env(),
        start_new_session=True,
        preexec_fn=default_interrupt,
    )
    command_pid = children.track(psutil.Process(holder.pid).children()[0].pid)
    return holder, command_pid


def finish(holder: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for a hold to end; its exit code and what it printed on stderr."""
    returncode = holder.wait(timeout=15)
    assert holder.stderr is not None
    return returncode, holder.stderr.read()


def record_of(lock: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((lock / "owner.json").read_text())


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def blocks(pid: int, number: int) -> bool:
    """Whether the process has blocked this signal (to collect it with sigtimedwait)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    return bool(int(mask, 16) >> (number - 1) & 1)


def start_ticks_of(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2 :].split()[19])


# The command line.


def test_a_hold_blocks_a_second_hold_which_names_the_first_pid_and_role(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    first, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)
    marker = tmp_path / "second-ran"

    second = run_cli("hold", str(lock), "--role", "migration", "--", "touch", str(marker))

    assert second.returncode == EXIT_HELD, second.stderr
    assert f"held (FLOCK WRITE) by PID {first.pid} (re-sync)" in second.stderr
    # the hold leads its process group (its COMMAND is in it): the whole group is stopped
    assert f"stop it with: kill -TERM -- -{first.pid}" in second.stderr
    assert not marker.exists()
    assert record_of(lock)["pid"] == first.pid


def test_inspect_on_a_held_lock_names_the_role_and_the_holding_supervisor(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    holder, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)

    code, document = run_json("inspect", str(lock))

    finding = document["locks"][0]
    assert (code, finding["state"]) == (0, "held")
    assert finding["holders"][0]["pid"] == holder.pid
    assert finding["holders"][0]["role"] == "re-sync"
    assert finding["action"] is None  # within its budget: no action is advised


def test_the_record_carries_identity_and_the_owner_record_reader_fills_the_claim(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    holder, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP, "--max-hold", "30m")
    record = record_of(lock)

    claim = FORMATS["owner-record"].read(str(lock), 4194304)

    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    namespace = int(os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]"))
    assert record["command"] == READY_THEN_SLEEP
    assert record["max_hold"] == "30m"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["started_at"])
    assert (claim.pid, claim.role, claim.user) == (holder.pid, "re-sync", record["user"])
    assert (claim.boot_id, claim.start_ticks) == (boot_id, start_ticks_of(holder.pid))
    assert (claim.pid_namespace, claim.max_hold_s) == (namespace, 1800.0)
    assert claim.problem is None


@pytest.mark.parametrize(
    ("change", "proof"),
    [
        ({"start_ticks": 1}, "the record says tick 1"),
        ({"boot_id": "00000000-0000-4000-8000-000000000000"}, "taken in another boot"),
    ],
)
def test_start_ticks_and_boot_id_of_a_hold_record_prove_pid_reuse_and_reboots(
    children: Children, tmp_path: Path, change: dict[str, object], proof: str
) -> None:
    """The live holder's own record, with one identity field changed, is proven stale: the
    classifier reads exactly the fields hold writes."""
    lock = tmp_path / "LOCK"
    start_hold(children, lock, "re-sync", READY_THEN_SLEEP)
    copy = tmp_path / "COPY.lock"
    copy.mkdir()
    (copy / "owner.json").write_text(json.dumps({**record_of(lock), **change}))

    code, document = run_json("inspect", str(copy))

    finding = document["locks"][0]
    assert (code, finding["state"]) == (2, "stale")
    assert proof in finding["proof"]


@pytest.mark.parametrize(
    ("send", "expected"),
    [
        (lambda holder: os.kill(holder.pid, signal.SIGTERM), 128 + signal.SIGTERM),
        (lambda holder: os.kill(holder.pid, signal.SIGINT), 128 + signal.SIGINT),
        (lambda holder: os.killpg(holder.pid, signal.SIGINT), 128 + signal.SIGINT),  # Ctrl-C
    ],
    ids=["kill-TERM-supervisor", "kill-INT-supervisor", "ctrl-c-foreground-group"],
)
def test_a_signal_stops_the_command_and_leaves_no_lock(
    children: Children,
    tmp_path: Path,
    send: Callable[[subprocess.Popen[str]], None],
    expected: int,
) -> None:
    lock = tmp_path / "LOCK"
    holder, command_pid = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)

    send(holder)
    returncode, stderr = finish(holder)

    assert returncode == expected, stderr
    assert not lock.exists()
    assert gone(command_pid)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["sh", "-c", 'test -d "$0" && exit 7', "LOCK_PATH"], 7),
        (["sh", "-c", 'test -d "$0"', "LOCK_PATH"], 0),
        (["sh", "-c", "kill -KILL $$"], 128 + signal.SIGKILL),
        (["no-such-command-anywhere"], 127),
    ],
    ids=["fails-7", "succeeds", "killed-by-signal", "not-found"],
)
def test_the_hold_exits_with_the_command_code_and_leaves_no_lock(
    tmp_path: Path, command: list[str], expected: int
) -> None:
    lock = tmp_path / "LOCK"
    argv = [str(lock) if part == "LOCK_PATH" else part for part in command]

    completed = run_cli("hold", str(lock), "--role", "job", "--", *argv)

    assert completed.returncode == expected, completed.stderr
    assert os.listdir(tmp_path) == []


def test_kill_9_of_the_holder_leaves_a_stale_lock_refused_until_broken(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    holder, command_pid = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)
    marker = tmp_path / "ran"

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=5)
    assert wait_until(lambda: gone(command_pid)), "COMMAND outlived its killed supervisor"
    code, document = run_json("inspect", str(lock))
    refused = run_cli("hold", str(lock), "--role", "next", "--", "touch", str(marker))

    finding = document["locks"][0]
    assert (code, finding["state"]) == (2, "stale")
    assert f"PID {holder.pid} is not running on this host" in finding["proof"]
    assert refused.returncode == EXIT_STALE, refused.stderr
    assert f"rm -r -- {lock}" in refused.stderr
    assert "--break-stale" in refused.stderr
    assert not marker.exists()

    taken = run_cli(
        "hold", str(lock), "--role", "next", "--break-stale", "--", "touch", str(marker)
    )

    assert taken.returncode == 0, taken.stderr
    assert "broke the stale lock" in taken.stderr
    assert sorted(os.listdir(tmp_path)) == ["ran"]  # no quarantined copy left behind


def test_two_holds_breaking_the_same_stale_lock_never_run_together(
    children: Children, tmp_path: Path
) -> None:
    """Both break or wait, one after the other: COMMAND fails (9) if the other one is inside."""
    lock = tmp_path / "LOCK"
    holder = start_api_holder(children, lock)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=5)
    inside = tmp_path / "inside"
    exclusive = 'mkdir "$0" || exit 9; sleep 0.3; rmdir "$0"'
    argv = [sys.executable, "-m", "lockwarden", "hold", str(lock), "--role", "next"]
    argv += ["--break-stale", "--wait", "10s", "--", "sh", "-c", exclusive, str(inside)]

    racers = [children.start(argv, env=cli_env()) for _ in range(2)]
    results = [finish(racer) for racer in racers]

    assert [code for code, _ in results] == [0, 0], results
    assert sum("broke the stale lock" in stderr for _, stderr in results) == 1
    assert os.listdir(tmp_path) == []


def test_a_breaker_leaves_the_lock_a_racing_breaker_took_in_its_place(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving the race above can hit, made certain: while this hold judges the stale
    lock, another one breaks it and takes the path. On ext4 the new lock gets the freed inode
    number, so only the inode's mtime tells the two apart. The interleaving is injected by
    wrapping the real judge; the locks, the processes and the file system are real."""
    lock = tmp_path / "LOCK"
    holder = start_api_holder(children, lock)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=5)
    real_judge = holding.judge
    racer: list[holding.TakenLock] = []

    def judge_while_another_hold_takes_it(path: str) -> Finding:
        finding = real_judge(path)
        monkeypatch.setattr(holding, "judge", real_judge)
        os.rename(lock, tmp_path / "broken-by-the-racer")
        shutil.rmtree(tmp_path / "broken-by-the-racer")
        taken = holding.try_create(path, holding.record_for("racer", ["true"]), as_file=False)
        assert taken is not None
        racer.append(taken)
        return finding

    monkeypatch.setattr(holding, "judge", judge_while_another_hold_takes_it)
    holding.break_stale_lock(str(lock))
    survived = record_of(lock)["role"]
    left = sorted(os.listdir(tmp_path))
    holding.release(racer[0])

    assert survived == "racer"
    assert left == ["LOCK"]
    assert not lock.exists()


def _stale_lock(children: Children, lock: Path) -> None:
    """A real stale lock: an API hold killed with SIGKILL."""
    holder = start_api_holder(children, lock)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=5)


def test_a_breaker_puts_back_a_lock_swapped_in_just_before_its_rename(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other window: the lock is checked unchanged after judging, then replaced before the
    rename. What was moved aside is not what was judged, so it goes back, whole, and the
    break reports it did nothing. The swap is injected at the check; the rest is real."""
    lock = tmp_path / "LOCK"
    _stale_lock(children, lock)
    real_identity = holding._identity
    calls: list[str] = []
    racer: list[holding.TakenLock] = []

    def identity_then_swap(path: str) -> object:
        value = real_identity(path)
        calls.append(path)
        if len(calls) == 2:  # the check after judging: now another hold breaks and takes it
            os.rename(lock, tmp_path / "broken-by-the-racer")
            shutil.rmtree(tmp_path / "broken-by-the-racer")
            taken = holding.try_create(path, holding.record_for("racer", ["true"]), False)
            assert taken is not None
            racer.append(taken)
        return value

    monkeypatch.setattr(holding, "_identity", identity_then_swap)
    broke = holding.break_stale_lock(str(lock))
    survived = record_of(lock)["role"]
    left = sorted(os.listdir(tmp_path))
    released = holding.release(racer[0])

    assert broke is False
    assert len(calls) == 3  # before, after, and the artefact moved aside
    assert survived == "racer"
    assert left == ["LOCK"]
    assert released is True


def test_a_stale_lock_that_keeps_changing_is_given_up_not_looped_on(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time it is judged, something writes in the stale lock (injected: a new mtime), so
    every break is abandoned; acquire gives up after a few, instead of spinning for ever."""
    lock = tmp_path / "LOCK"
    _stale_lock(children, lock)
    real_judge = holding.judge
    judged: list[str] = []

    def judge_and_touch(path: str) -> Finding:
        finding = real_judge(path)
        judged.append(finding.state.value)
        os.utime(path, ns=(len(judged), len(judged)))
        return finding

    monkeypatch.setattr(holding, "judge", judge_and_touch)
    record = holding.record_for("next", ["true"])
    with pytest.raises(holding.LockUnavailable, match="changed each time"):
        holding.acquire(str(lock), record, break_stale=True, sleep=lambda _seconds: None)

    assert set(judged) == {"stale"}
    assert len(judged) == 2 * holding.UNUSABLE_LOOKS  # acquire's look and the break's, each time
    assert record_of(lock)["role"] == "re-sync"  # the stale lock is left in place


def test_a_stale_lock_that_cannot_be_read_whole_is_not_broken(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What cannot be compared is not removed, and the reason is said (injected: the
    artefact's reader refuses, as for a directory of more than 256 entries)."""
    lock = tmp_path / "LOCK"
    _stale_lock(children, lock)

    def refuse(path: str, record_path: str | None = None) -> tuple[str, bytes, os.stat_result]:
        raise UnsafeRecord(f"{path} holds more than 256 entries; not a lock directory")

    monkeypatch.setattr(holding, "read_artefact", refuse)
    with pytest.raises(holding.LockUnavailable, match="cannot read the stale lock to break it"):
        holding.break_stale_lock(str(lock))

    assert record_of(lock)["role"] == "re-sync"
    assert sorted(os.listdir(tmp_path)) == ["LOCK"]


def test_release_leaves_a_lock_made_after_its_own_was_removed(tmp_path: Path) -> None:
    """Someone removed this hold's lock by hand and another hold took the path. On ext4 the new
    lock gets the same inode number; its record is not this holder's, so it is left alone."""
    lock = tmp_path / "LOCK"
    mine = holding.try_create(str(lock), holding.record_for("mine", ["true"]), False)
    assert mine is not None
    shutil.rmtree(lock)
    theirs = holding.try_create(str(lock), holding.record_for("theirs", ["true"]), False)
    assert theirs is not None

    released = holding.release(mine)
    role = record_of(lock)["role"]
    holding.release(theirs)

    assert released is False
    assert role == "theirs"
    assert not lock.exists()


def test_putting_back_never_replaces_a_directory_that_appeared_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rename(2) would silently replace the empty directory a new hold has just made. The
    directory appears after any check could look (injected: every look sees nothing), so
    only the rename itself can refuse."""
    lock, aside = tmp_path / "LOCK", tmp_path / "LOCK.stale-1"
    aside.mkdir()
    (aside / "owner.json").write_text("{}")
    lock.mkdir()  # a new hold's, a moment old
    monkeypatch.setattr(holding, "lstat_or_none", lambda _path: None)

    with pytest.raises(holding.LockUnavailable, match="could not be put back"):
        holding._put_back(str(aside), str(lock), os.lstat(aside))

    assert os.listdir(lock) == []
    assert os.listdir(aside) == ["owner.json"]


def test_max_hold_warns_every_interval_and_inspect_says_past_its_declared_limit(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    command = ["sh", "-c", "echo ready; sleep 2"]
    holder, _ = start_hold(
        children, lock, "re-sync", command, "--max-hold", "1s", "--warn-every", "0.2s"
    )

    started = datetime.fromisoformat(record_of(lock)["started_at"].replace("Z", "+00:00"))

    def inspect_at(seconds_later: float) -> tuple[int, dict]:  # type: ignore[type-arg]
        moment = (started + timedelta(seconds=seconds_later)).isoformat()
        code, document = run_json("inspect", str(lock), "--now", moment)
        return code, document["locks"][0]

    within = inspect_at(0)
    code, past = inspect_at(3)
    returncode, stderr = finish(holder)

    assert within[1]["state"] == "held"
    assert (code, past["state"]) == (1, "held_too_long")
    assert "past its own declared limit of 1s" in past["reason"]
    assert returncode == 0
    assert stderr.count("past its declared --max-hold of 1s") >= 2
    assert not lock.exists()


@pytest.mark.parametrize(
    ("command", "expected", "said"),
    [
        (READY_THEN_SLEEP, 128 + signal.SIGTERM, "sending SIGTERM"),
        (
            ["sh", "-c", "trap '' TERM; echo ready; exec sleep 60"],
            128 + signal.SIGKILL,
            "ignored SIGTERM: sending SIGKILL",
        ),
    ],
    ids=["terminates", "kills-after-grace"],
)
def test_kill_after_stops_the_command(
    children: Children, tmp_path: Path, command: list[str], expected: int, said: str
) -> None:
    lock = tmp_path / "LOCK"
    holder, command_pid = start_hold(
        children, lock, "re-sync", command, "--kill-after", "1s", "--kill-grace", "0.3s"
    )

    returncode, stderr = finish(holder)

    assert returncode == expected, stderr
    assert said in stderr
    assert gone(command_pid)
    assert not lock.exists()


def test_wait_takes_a_lock_released_during_the_wait(children: Children, tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    first, _ = start_hold(children, lock, "re-sync", ["sh", "-c", "echo ready; sleep 0.5"])

    second = run_cli(
        "hold", str(lock), "--role", "next", "--wait", "10s", "--", "cat", str(lock / "owner.json")
    )

    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout)
    assert record["role"] == "next"
    assert record["pid"] != first.pid
    assert not lock.exists()


def test_wait_gives_up_naming_the_holder(children: Children, tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    first, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)

    second = run_cli("hold", str(lock), "--role", "next", "--wait", "300ms", "--", "true")

    assert second.returncode == EXIT_HELD
    assert f"after waiting 300ms: held (FLOCK WRITE) by PID {first.pid} (re-sync)" in second.stderr


def test_file_lock_blocks_is_inspected_and_is_removed(children: Children, tmp_path: Path) -> None:
    lock = tmp_path / "store.lock"
    holder, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP, "--file")

    assert lock.is_file()
    second = run_cli("hold", str(lock), "--file", "--role", "next", "--", "true")
    code, document = run_json("inspect", str(lock))
    os.kill(holder.pid, signal.SIGTERM)
    returncode, _ = finish(holder)

    assert code == 0
    assert second.returncode == EXIT_HELD
    assert f"held (FLOCK WRITE) by PID {holder.pid} (re-sync)" in second.stderr
    assert document["locks"][0]["holders"][0]["pid"] == holder.pid
    assert returncode == 128 + signal.SIGTERM
    assert os.listdir(tmp_path) == []


COUNT_INTERRUPTS = """
import signal, sys, time
received = []
signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
print("ready", flush=True)
while not received:
    time.sleep(0.01)
time.sleep(0.5)  # a second, forwarded copy of Ctrl-C would arrive in this time
sys.exit(len(received))
"""


def test_ctrl_c_on_a_real_terminal_reaches_the_command_once(
    children: Children, tmp_path: Path
) -> None:
    """The terminal driver sends Ctrl-C to the whole foreground group, COMMAND included; the
    supervisor must not forward its own copy (COMMAND exits with the number it received)."""
    lock = tmp_path / "LOCK"
    controller, terminal = os.openpty()
    terminal_name = os.ttyname(terminal)

    def take_the_terminal() -> None:  # session leader opening a tty: it becomes the controlling one
        os.close(os.open(terminal_name, os.O_RDWR))

    argv = ["hold", str(lock), "--role", "debug", "--", sys.executable, "-c", COUNT_INTERRUPTS]
    holder = subprocess.Popen(
        [sys.executable, "-m", "lockwarden", *argv],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=cli_env(),
        start_new_session=True,
        preexec_fn=take_the_terminal,
    )
    children.track(holder.pid)
    os.close(terminal)
    try:
        output = b""
        while b"ready" not in output:
            output += os.read(controller, 1024)
        os.write(controller, b"\x03")  # Ctrl-C typed on the terminal
        returncode = holder.wait(timeout=10)
    finally:
        os.close(controller)

    assert returncode == 1  # exactly one SIGINT reached COMMAND, which then exited 1
    assert not lock.exists()


def test_a_hold_waiting_for_the_lock_gives_up_on_sigterm(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    first, _ = start_hold(children, lock, "re-sync", READY_THEN_SLEEP)
    argv = [sys.executable, "-m", "lockwarden", "hold", str(lock), "--role", "next"]
    waiting = children.start([*argv, "--wait", "60s", "--", "true"], env=cli_env())
    assert wait_until(lambda: blocks(waiting.pid, signal.SIGTERM))  # it is waiting, not starting

    os.kill(waiting.pid, signal.SIGTERM)
    returncode, stderr = finish(waiting)

    assert returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted by SIGTERM" in stderr
    assert record_of(lock)["pid"] == first.pid


def test_a_lock_that_cannot_be_created_is_its_own_exit_code(tmp_path: Path) -> None:
    completed = run_cli("hold", str(tmp_path / "missing" / "LOCK"), "--role", "job", "--", "true")

    assert completed.returncode == 71
    assert "cannot create" in completed.stderr


def test_a_store_directory_is_not_taken_for_its_lock(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "data.db").write_text("rows")

    completed = run_cli("hold", str(store), "--role", "job", "--break-stale", "--", "true")

    assert completed.returncode == 71
    assert f"did you mean {store / 'LOCK'}?" in completed.stderr
    assert sorted(os.listdir(store)) == ["data.db"]


def test_hold_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    completed = run_cli("hold", str(tmp_path / "LOCK"), "--role", "job")

    assert completed.returncode == 64
    assert not (tmp_path / "LOCK").exists()


# The Python API.

API_HOLDER = """
import signal, sys, time
import lockwarden
lock, role, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "handle-term":  # what an application does to clean up on SIGTERM
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
try:
    with lockwarden.hold(lock, role=role, max_hold="30m"):
        print("ready", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def start_api_holder(children: Children, lock: Path, mode: str = "plain") -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", API_HOLDER, str(lock), "re-sync", mode]
    return children.start(argv, ready="ready", env=cli_env(), preexec_fn=default_interrupt)


def test_api_hold_blocks_the_cli_and_the_api_naming_pid_and_role(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    holder = start_api_holder(children, lock)

    cli = run_cli("hold", str(lock), "--role", "next", "--", "true")
    with (
        pytest.raises(
            lockwarden.LockHeld, match=rf"held \(FLOCK WRITE\) by PID {holder.pid} \(re-sync\)"
        ),
        lockwarden.hold(lock, role="next"),
    ):
        pytest.fail("took a held lock")
    code, document = run_json("inspect", str(lock))

    assert code == 0
    assert cli.returncode == EXIT_HELD
    assert f"held (FLOCK WRITE) by PID {holder.pid} (re-sync)" in cli.stderr
    finding = document["locks"][0]
    assert (finding["holders"][0]["pid"], finding["holders"][0]["role"]) == (holder.pid, "re-sync")
    assert record_of(lock)["max_hold"] == "30m"


def test_api_record_names_the_calling_process_and_goes_on_exception(tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"

    with pytest.raises(RuntimeError), lockwarden.hold(lock, role="re-sync") as taken:
        record = record_of(lock)
        raise RuntimeError("the work failed")

    assert record["pid"] == os.getpid() == taken.record.pid
    assert record["start_ticks"] == start_ticks_of(os.getpid())
    assert not lock.exists()


@pytest.mark.parametrize(
    ("mode", "sent", "expected"),
    [("plain", signal.SIGINT, 130), ("handle-term", signal.SIGTERM, 128 + signal.SIGTERM)],
)
def test_api_lock_goes_on_ctrl_c_and_on_a_handled_sigterm(
    children: Children, tmp_path: Path, mode: str, sent: int, expected: int
) -> None:
    lock = tmp_path / "LOCK"
    holder = start_api_holder(children, lock, mode)

    os.kill(holder.pid, sent)

    assert holder.wait(timeout=10) == expected
    assert not lock.exists()


def test_api_kill_9_leaves_a_stale_lock_that_break_stale_takes(
    children: Children, tmp_path: Path
) -> None:
    lock = tmp_path / "LOCK"
    holder = start_api_holder(children, lock)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=5)

    code, document = run_json("inspect", str(lock))
    with (
        pytest.raises(lockwarden.LockStale, match="break_stale=True"),
        lockwarden.hold(lock, role="next"),
    ):
        pytest.fail("took a stale lock without break_stale")
    with lockwarden.hold(lock, role="next", break_stale=True):
        taken_by = record_of(lock)["pid"]

    assert (code, document["locks"][0]["state"]) == (2, "stale")
    assert taken_by == os.getpid()
    assert os.listdir(tmp_path) == []


def test_api_wait_takes_a_lock_released_during_the_wait(children: Children, tmp_path: Path) -> None:
    lock = tmp_path / "LOCK"
    start_hold(children, lock, "re-sync", ["sh", "-c", "echo ready; sleep 0.5"])

    with lockwarden.hold(lock, role="next", wait="10s"):
        assert record_of(lock)["role"] == "next"

    assert not lock.exists()


def test_importing_lockwarden_does_not_load_the_hold_api() -> None:
    code = (
        "import sys, lockwarden; before = 'lockwarden.holding.hold' in sys.modules; "
        "print(before, callable(lockwarden.hold), 'lockwarden.holding.hold' in sys.modules)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True
    )

    assert completed.stdout.split() == ["False", "True", "True"]


# The record field the agent reads.


@pytest.mark.parametrize(
    ("value", "seconds"), [("30m", 1800.0), ("1h30m", 5400.0), (90, 90.0), ("200ms", 0.2)]
)
def test_max_hold_is_read_from_a_record(value: object, seconds: float) -> None:
    record = parse_record(json.dumps({"pid": 42, "max_hold": value}).encode(), 4194304)

    assert record.max_hold_s == seconds
    assert "max_hold" not in record.extra


@pytest.mark.parametrize("value", ["soon", 0, -5, True, "0s"])
def test_a_nonsense_max_hold_makes_the_record_untrusted(value: object) -> None:
    with pytest.raises(RecordProblem, match="max_hold"):
        parse_record(json.dumps({"pid": 42, "max_hold": value}).encode(), 4194304)


@pytest.mark.parametrize("seconds", [1800, 3600, 5400, 90, 0.2, 1.5, 86461])
def test_a_declared_limit_is_written_as_a_person_would_and_reads_back(seconds: float) -> None:
    assert parse_duration(format_limit(seconds)) == pytest.approx(seconds)


def _declared_limit_finding(held_for_s: float, max_hold_s: float | None) -> Finding:
    """classify() on a live holder's claim: a table test of the pure stage, no processes."""
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    started = now - timedelta(seconds=held_for_s)
    process = Process(
        pid=4242, start_ticks=100, state="S", threads=1, uid=0, user="root",
        cmdline=("lockwarden", "hold"), name="python", unit=None, user_unit=False,
        pid_namespace=1, started_at=started,
    )  # fmt: skip
    claim = Claim(
        format="owner-record", path="/s/LOCK", present=True, existence_is_lock=True, pid=4242,
        role="re-sync", host="h", started_at=started, start_ticks=100, boot_id="b",
        pid_namespace=1, max_hold_s=max_hold_s,
    )  # fmt: skip
    evidence = Evidence(
        boot_id="b", hostname="h", booted_at=now - timedelta(days=1), captured_at=now,
        pid_namespace=1, nested_pid_namespace=False, granted=(), kernel_holders=(), waiters=(),
        openers=(), record_process=process, unreadable_pids=0,
    )  # fmt: skip
    return classify("store", claim, evidence, Policy(warn_after=900, critical_after=3600), now)


@pytest.mark.parametrize(
    ("held_for_s", "max_hold_s", "severity", "past_limit"),
    [
        (600, None, Severity.OK, False),
        (600, 1800, Severity.OK, False),
        (600, 300, Severity.WARNING, True),  # within the agent's budget, past its own limit
        (2000, 1800, Severity.WARNING, True),
        (4000, 1800, Severity.CRITICAL, True),  # the configured budget still decides critical
        (4000, None, Severity.CRITICAL, False),
    ],
)
def test_a_holder_past_its_own_declared_limit_is_at_least_a_warning(
    held_for_s: float, max_hold_s: float | None, severity: Severity, past_limit: bool
) -> None:
    finding = _declared_limit_finding(held_for_s, max_hold_s)

    assert finding.severity is severity
    limit = format_limit(max_hold_s or 0)
    assert (f"past its own declared limit of {limit}" in finding.reason) is past_limit


def test_a_file_that_is_no_lock_at_path_is_refused_not_taken(tmp_path: Path) -> None:
    """A flock-style key=value store file at PATH reads "free" but is no lock hold can take:
    after a few looks (another holder may be mid-creation) hold refuses with 71."""
    path = tmp_path / "LOCK"
    path.write_text("pid=4242\nacquired_at=2026-12-02T10:00:00Z\n")
    refused = run_cli("hold", str(path), "--role", "x", "--file", "--", "true")
    assert refused.returncode == 71, refused.stderr
    assert "exists but is not a lock that hold can take" in refused.stderr
    assert path.read_text().startswith("pid=4242")


DAEMON_CLOSING_WHAT_IT_INHERITED = """
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.closerange(3, 65536)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def test_a_daemon_that_closed_what_it_inherited_does_not_keep_the_hold(tmp_path: Path) -> None:
    """COMMAND starts a daemon in a session of its own (gpg-agent for a signed commit, an
    ssh-agent, a build daemon) that closes the descriptors it inherited: it holds nothing of
    the lock, so the hold ends with COMMAND and removes the lock, leaving the daemon be."""
    lock, started = tmp_path / "LOCK", tmp_path / "daemon.pid"
    daemon = f"{sys.executable} -c '{DAEMON_CLOSING_WHAT_IT_INHERITED}' {started}"
    started_yet = f"while [ ! -e {started} ]; do sleep 0.05; done"
    script = f"setsid {daemon} </dev/null >/dev/null 2>&1 & {started_yet}"
    try:
        done = run_cli("hold", str(lock), "--role", "sign", "--", "sh", "-c", script, timeout=20)
        assert done.returncode == 0, done.stderr
        assert not lock.exists()
        assert psutil.pid_exists(int(started.read_text()))  # left be: it was never the lock's
    finally:
        if started.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(started.read_text()), signal.SIGKILL)
