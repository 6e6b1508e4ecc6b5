"""Run inside a private PID namespace (`unshare -fp --mount-proc`): stage the PID traps with real
processes at chosen PIDs (through /proc/sys/kernel/ns_last_pid), let lockwarden's real pipeline
judge each lock, and print one JSON line per scenario for test_pid_identity.py to check.

This script is PID 1 of its namespace: it reaps what it starts and kills it all at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

from lockwarden.pipeline import inspect_path

ANOTHER_BOOT = "00000000-0000-4000-8000-000000000000"
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)
THREAD_OUTLIVES_MAIN = f"""
import ctypes, sys, threading, time
threading.Thread(target=time.sleep, args=(120,)).start()
print("ready", flush=True)
sys.stdout.close()
ctypes.CDLL(None).syscall({SYS_EXIT}, 0)  # only the main thread exits; its sibling runs on
"""
NESTED_HOLDER = """
import json, os, sys, time
lock, pid = sys.argv[1], int(sys.argv[2])
with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
    handle.write(str(pid - 1))
child = os.fork()
if child == 0:
    os.mkdir(lock)
    with open(os.path.join(lock, "owner.json"), "w") as handle:
        json.dump({"pid": os.getpid(), "role": "container-job"}, handle)
    print("ready", os.getpid(), flush=True)
    time.sleep(120)
    os._exit(0)
os.waitpid(child, 0)
"""

Started = list[subprocess.Popen[bytes]]


def spawn_at(
    started: Started, pid: int, argv: list[str], **options: object
) -> subprocess.Popen[bytes]:
    """Start argv so that it gets exactly `pid` in this namespace."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
        handle.write(str(pid - 1))
    process = subprocess.Popen(argv, **options)  # type: ignore[call-overload]
    started.append(process)
    if process.pid != pid:
        raise SystemExit(f"wanted PID {pid}, got {process.pid}")
    return process


def start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        text = handle.read()
    return int(text[text.rfind(")") + 2 :].split()[19])


def status_of(pid: int) -> tuple[str, int]:
    with open(f"/proc/{pid}/status") as handle:
        fields = dict(line.split(":\t", 1) for line in handle.read().splitlines())
    return fields["State"].split()[0], int(fields["Threads"])


def mkdir_lock(path: str, record: dict[str, object]) -> str:
    os.mkdir(path)
    with open(os.path.join(path, "owner.json"), "w") as handle:
        json.dump(record, handle)
    return path


def judge(scenario: str, path: str, allowed: list[str], **facts: object) -> None:
    finding = inspect_path(path, datetime.now(UTC)).findings[0]
    print(
        json.dumps(
            {
                "scenario": scenario,
                "state": finding.state.value,
                "reason": finding.reason,
                "proof": finding.proof,
                "allowed": allowed,
                "facts": facts,
            }
        ),
        flush=True,
    )


def reused_pid_with_start_ticks(root: str, started: Started) -> None:
    first = spawn_at(started, 500, ["sleep", "120"])
    lock = mkdir_lock(f"{root}/ticks", {"pid": 500, "start_ticks": start_ticks(500)})
    first.kill()
    first.wait()
    time.sleep(0.05)  # so the next process's start tick differs
    spawn_at(started, 500, ["sleep", "120"])
    judge("recorded PID reused by another program (record has start ticks)", lock, ["stale"])


def reused_pid_bare_pidfile(root: str, started: Started) -> None:
    first = spawn_at(started, 510, ["sleep", "120"])
    pidfile = f"{root}/daemon.pid"
    with open(pidfile, "w") as handle:
        handle.write("510\n")
    written = time.time() - 60  # the daemon wrote it a minute ago, then died
    os.utime(pidfile, (written, written))
    first.kill()
    first.wait()
    spawn_at(started, 510, ["sleep", "120"])
    judge("recorded PID reused by another program (bare pidfile)", pidfile, ["unknown"])


def start_daemon_at(started: Started, pid: int) -> int:
    """An unrelated program's daemon, started the classic way: its first process, at `pid`,
    starts a session, forks the daemon and exits, so the daemon is in the session and process
    group of a PID that is gone. Returns the daemon's PID."""
    first = spawn_at(
        started,
        pid,
        ["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert first.stdout is not None
    daemon = int(first.stdout.readline())
    first.wait()
    return daemon


def reused_pid_as_a_gone_session_leader(root: str, started: Started) -> None:
    """The recorded holder died; later its PID came round to an unrelated daemon's first
    process, which has exited too. The daemon carries that PID as its session and group, but
    it is no work of the holder's: it may not be named as the lock's holder."""
    first = spawn_at(started, 550, ["sleep", "120"])
    pidfile = f"{root}/job.pid"
    with open(pidfile, "w") as handle:
        handle.write("550\n")
    written = time.time() - 60  # the job wrote it a minute ago, then died
    os.utime(pidfile, (written, written))
    first.kill()
    first.wait()
    daemon = start_daemon_at(started, 550)
    judge(
        "recorded PID reused by a daemon's gone session leader (bare pidfile)",
        pidfile,
        ["stale", "unknown"],
        daemon=daemon,
    )
    os.kill(daemon, signal.SIGKILL)
    first = spawn_at(started, 560, ["sleep", "120"])
    lock = mkdir_lock(f"{root}/ticks-session", {"pid": 560, "start_ticks": start_ticks(560)})
    first.kill()
    first.wait()
    daemon = start_daemon_at(started, 560)
    judge(
        "recorded PID reused by a daemon's gone session leader (record has start ticks)",
        lock,
        ["stale", "unknown"],
        daemon=daemon,
    )
    os.kill(daemon, signal.SIGKILL)


def foreign_boot_id(root: str, started: Started) -> None:
    spawn_at(started, 520, ["sleep", "120"])
    lock = mkdir_lock(f"{root}/boot", {"pid": 520, "boot_id": ANOTHER_BOOT})
    judge("record from another boot naming a PID now live here", lock, ["stale"])


def zombie_with_live_thread(root: str, started: Started) -> None:
    holder = spawn_at(
        started, 530, [sys.executable, "-c", THREAD_OUTLIVES_MAIN], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None
    holder.stdout.readline()
    lock = mkdir_lock(f"{root}/zombie-thread", {"pid": 530, "start_ticks": start_ticks(530)})
    for _ in range(100):
        state, threads = status_of(530)
        if state == "Z":
            break
        time.sleep(0.02)
    judge("zombie main thread, another thread alive", lock, ["held"], state=state, threads=threads)


def exited_holders(root: str, started: Started) -> None:
    unreaped = spawn_at(started, 540, ["true"])
    lock = mkdir_lock(f"{root}/unreaped", {"pid": 540, "start_ticks": start_ticks(540)})
    for _ in range(100):
        if status_of(540)[0] == "Z":
            break
        time.sleep(0.02)
    judge("holder exited, not yet reaped (zombie)", lock, ["stale"], state=status_of(540))
    unreaped.wait()
    judge("holder exited and reaped", lock, ["stale"])


def holder_in_nested_namespace(root: str, started: Started) -> None:
    """A container's job records its PID as the container sees it (700, 701). Here, 700 is an
    unrelated live program and 701 is nobody: neither may decide the verdict."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
        handle.write("5000")  # keep this namespace's own PIDs for the nested ones well away
    for inner, name in ((700, "nested-live-twin"), (701, "nested-no-twin")):
        nested = subprocess.Popen(
            [
                "unshare",
                "-fp",
                "--mount-proc",
                sys.executable,
                "-c",
                NESTED_HOLDER,
                f"{root}/{name}",
                str(inner),
            ],
            stdout=subprocess.PIPE,
        )
        started.append(nested)
        assert nested.stdout is not None
        nested.stdout.readline()
    spawn_at(started, 700, ["sleep", "120"])
    judge(
        "holder in a nested PID namespace; its PID is live here",
        f"{root}/nested-live-twin",
        ["unknown"],
    )
    judge(
        "holder in a nested PID namespace; its PID is free here",
        f"{root}/nested-no-twin",
        ["unknown"],
    )


def main() -> None:
    root = sys.argv[1]
    started: Started = []
    try:
        for scenario in (
            reused_pid_with_start_ticks,
            reused_pid_bare_pidfile,
            reused_pid_as_a_gone_session_leader,
            foreign_boot_id,
            zombie_with_live_thread,
            exited_holders,
            holder_in_nested_namespace,
        ):
            scenario(root, started)
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        for process in started:
            process.wait()


if __name__ == "__main__":
    main()
