"""Row 6: lockwarden is never the cause of a failed write.

A writer takes the monitored lock non-blocking in a tight loop (flock, POSIX lockf and mkdir
styles, at least 10,000 attempts each) and releases it after every attempt, while another process
runs the real CLI (`lockwarden --once`, in-process through `cli.main`, over and over) against
the same locks. The writer and lockwarden are the only parties, so every failed attempt would be
lockwarden's doing: the target is 0.

Then a syscall trace (Debian's strace) of a real `lockwarden --once` over flock-, POSIX- and
mkdir-held locks shows no lock call at all and no write-mode open of any monitored path.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import (
    FLOCK_HOLDER,
    MKDIR_HOLDER,
    POSIX_HOLDER,
    Children,
    cli_env,
    require_tool,
    validate_report,
    write_config,
)
from reliability.support import Figures

pytestmark = pytest.mark.slow

ATTEMPTS = 10_000
MIN_INSPECTIONS = 20  # full `--once` runs that must overlap each writer's loop

WRITER = r"""
import fcntl, json, os, sys, time
style, path, attempts_wanted, progress, inspections_wanted = sys.argv[1:6]
attempts_wanted, inspections_wanted = int(attempts_wanted), int(inspections_wanted)

def inspections():
    try:
        with open(progress) as handle:
            return int(handle.read() or 0)
    except (OSError, ValueError):
        return 0

handle = open(path, "a") if style in ("flock", "posix") else None
take = {
    "flock": lambda: fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB),
    "posix": lambda: fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB),
}
give = {
    "flock": lambda: fcntl.flock(handle, fcntl.LOCK_UN),
    "posix": lambda: fcntl.lockf(handle, fcntl.LOCK_UN),
}

def take_mkdir():
    os.mkdir(path)
    with open(os.path.join(path, "owner.json"), "w") as record:
        json.dump({"pid": os.getpid(), "role": "writer"}, record)

def give_mkdir():
    os.unlink(os.path.join(path, "owner.json"))
    os.rmdir(path)

take["mkdir"], give["mkdir"] = take_mkdir, give_mkdir
attempts = failures = 0
errors = {}
seen_inspections = 0
give_up = time.monotonic() + 90
print("ready", flush=True)
while attempts < attempts_wanted or seen_inspections < inspections_wanted:
    attempts += 1
    try:
        take[style]()
    except OSError as error:  # EAGAIN / EEXIST: someone else has it
        failures += 1
        errors[error.strerror] = errors.get(error.strerror, 0) + 1
        continue
    time.sleep(0.0001)  # hold it a moment, so the inspections see it held
    try:
        give[style]()
    except OSError as error:  # ENOTEMPTY: someone put something into our lock directory
        failures += 1
        errors[error.strerror] = errors.get(error.strerror, 0) + 1
    if attempts % 500 == 0:
        seen_inspections = inspections()
        if time.monotonic() > give_up:
            break
print(json.dumps({"attempts": attempts, "failures": failures, "errors": errors,
                  "inspections": seen_inspections}), flush=True)
"""

INSPECTOR = r"""
import contextlib, io, json, os, sys
from lockwarden.cli.commands import main
config, progress, tally = sys.argv[1:4]
runs, states = 0, {}
while not os.path.exists(progress + ".stop"):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        main(["--once", "--config", config, "--json"])
    for lock in json.loads(output.getvalue())["locks"]:
        key = lock["name"] + ":" + lock["state"]
        states[key] = states.get(key, 0) + 1
    runs += 1
    with open(progress + ".new", "w") as handle:
        handle.write(str(runs))
    os.replace(progress + ".new", progress)
with open(tally, "w") as handle:
    json.dump({"runs": runs, "states": states}, handle)
"""


def monitored_config(tmp_path: Path, flock: Path, posix: Path, mkdir: Path) -> str:
    return write_config(
        tmp_path / "config.toml",
        f"""
        [[lock]]
        name = "flock-store"
        path = "{flock}"
        format = "kernel"

        [[lock]]
        name = "posix-store"
        path = "{posix}"
        format = "kernel"

        [[lock]]
        name = "mkdir-store"
        path = "{mkdir}"
        format = "owner-record"

        [state]
        path = "{tmp_path / "state" / "state.jsonl"}"
        """,
    )


def test_writers_never_fail_because_of_lockwarden(
    tmp_path: Path, children: Children, figures: Figures
) -> None:
    flock, posix, mkdir = tmp_path / "flock.lock", tmp_path / "posix.lock", tmp_path / "LOCK"
    flock.touch()
    posix.touch()
    config = monitored_config(tmp_path, flock, posix, mkdir)
    progress, tally = tmp_path / "inspections", tmp_path / "tally.json"
    inspector = children.start(
        [sys.executable, "-c", INSPECTOR, config, str(progress), str(tally)], env=cli_env()
    )
    writers = {
        style: children.start(
            [
                sys.executable,
                "-c",
                WRITER,
                style,
                str(path),
                str(ATTEMPTS),
                str(progress),
                str(MIN_INSPECTIONS),
            ],
            ready="ready",
        )
        for style, path in (("flock", flock), ("posix", posix), ("mkdir", mkdir))
    }
    reports = {}
    for style, writer in writers.items():
        out, err = writer.communicate(timeout=150)
        assert writer.returncode == 0, err
        reports[style] = json.loads(out.strip().splitlines()[-1])
    (tmp_path / "inspections.stop").touch()
    inspector.wait(timeout=60)
    assert inspector.returncode == 0, inspector.stderr.read() if inspector.stderr else ""
    seen = json.loads(tally.read_text())
    for style, report in reports.items():
        figure = figures.row(f"6 writer non-interference ({style})")
        figure.cases += report["attempts"]
        figure.failures += report["failures"]
        figure.notes.append(
            f"{report['inspections']}+ full --once runs overlapped; lockwarden saw it held "
            f"{seen['states'].get(f'{style}-store:held', 0)} times in {seen['runs']} runs"
        )
    for style, report in reports.items():
        assert report["failures"] == 0, f"{style}: {report}"
        assert report["attempts"] >= ATTEMPTS, report
        assert report["inspections"] >= MIN_INSPECTIONS, f"{style}: too little overlap {report}"


INTERLOPER = r"""
import fcntl, os, sys, time
handle = open(sys.argv[1], "a")
print("ready", flush=True)
while not os.path.exists(sys.argv[1] + ".stop"):
    fcntl.flock(handle, fcntl.LOCK_EX)
    time.sleep(0.0005)
    fcntl.flock(handle, fcntl.LOCK_UN)
    time.sleep(0.0005)
"""


def test_the_writer_does_notice_a_party_that_takes_the_lock(
    tmp_path: Path, children: Children
) -> None:
    """Control: an inspector that did take the lock (as a careless one would) makes the writer
    fail, so the zero above is a measurement, not a blind spot."""
    lock = tmp_path / "flock.lock"
    lock.touch()
    progress = tmp_path / "inspections"
    progress.write_text("1")
    children.python(INTERLOPER, str(lock))
    writer = children.start(
        [sys.executable, "-c", WRITER, "flock", str(lock), "2000", str(progress), "0"],
        ready="ready",
    )
    out, _ = writer.communicate(timeout=60)
    (tmp_path / "flock.lock.stop").touch()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["failures"] > 0, report


# ---- the syscall trace ----------------------------------------------------------------------

# F_OFD_GETLK is not among them: it asks which lock would conflict and takes none. lockwarden
# asks it (read-only descriptor, no lock of its own) only inside a PID namespace of its own,
# where /proc/locks leaves out locks held from outside (formats/hidden.py).
LOCK_COMMANDS = re.compile(r"F_SETLKW?|F_GETLK(?:64)?\b|F_OFD_SETLKW?|F_SETLK64|F_SETLKW64")
WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND")


def own_run_lock_descriptors(lines: list[str]) -> set[str]:
    """`PID FD` of each descriptor lockwarden opened on its own run.lock (in its state
    directory, never a monitored lock): its flock there is how runs take turns."""
    found = set()
    for line in lines:
        if "openat(" in line and '/run.lock"' in line and "= " in line:
            result = line.rsplit("= ", 1)[1].split()[0]
            if result.isdigit():
                found.add(f"{line.split()[0]} {result}")
    return found


def is_lock_call(line: str, run_lock: set[str]) -> bool:
    """A flock or a locking fcntl, other than a flock of lockwarden's own run.lock."""
    if "fcntl" in line and LOCK_COMMANDS.search(line):
        return True
    if "flock(" not in line:
        return False
    before, after = line.split("flock(", 1)
    return f"{before.split()[0]} {after.split(',')[0]}" not in run_lock


def test_strace_shows_no_lock_call_and_no_write_open(
    tmp_path: Path, children: Children, figures: Figures
) -> None:
    strace = require_tool("strace")
    flock, posix, mkdir = tmp_path / "flock.lock", tmp_path / "posix.lock", tmp_path / "LOCK"
    children.python(FLOCK_HOLDER, str(flock))
    children.python(POSIX_HOLDER, str(posix))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    children.python(MKDIR_HOLDER, str(mkdir), "maintenance-job", now)
    config = monitored_config(tmp_path, flock, posix, mkdir)
    trace = tmp_path / "trace.txt"
    started = time.perf_counter()
    completed = subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-e",
            "trace=flock,fcntl,openat",
            "-o",
            str(trace),
            sys.executable,
            "-m",
            "lockwarden",
            "--once",
            "--config",
            config,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
    )
    elapsed = time.perf_counter() - started
    document = validate_report(json.loads(completed.stdout))
    states = {lock["name"]: lock["state"] for lock in document["locks"]}
    lines = trace.read_text().splitlines()
    monitored = (str(flock), str(posix), str(mkdir))
    run_lock = own_run_lock_descriptors(lines)
    lock_calls = [line for line in lines if is_lock_call(line, run_lock)]
    writes = [
        line
        for line in lines
        if "openat(" in line
        and any(path in line for path in monitored)
        and WRITE_FLAGS.search(line)
    ]
    reads_of_record = [line for line in lines if "openat(" in line and "owner.json" in line]
    figure = figures.row("6 strace of --once")
    figure.count(elapsed, failed=bool(lock_calls or writes))
    figure.notes.append(
        f"{len(lines)} traced calls, {len(lock_calls)} lock calls, "
        f"{len(writes)} write-mode opens of monitored paths"
    )
    assert states == {"flock-store": "held", "posix-store": "held", "mkdir-store": "held"}, document
    assert reads_of_record, "the trace saw lockwarden read no record: it traced nothing useful"
    assert all("O_RDONLY" in line for line in reads_of_record), reads_of_record
    assert not lock_calls, "\n".join(lock_calls)
    assert not writes, "\n".join(writes)
