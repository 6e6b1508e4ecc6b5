"""Shared test helpers: real child processes that hold real locks, and the real CLI.

Every process a test starts is registered with `children` and killed by its PID at teardown.
A missing tool skips a test on a developer's machine and fails it under CI=true.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
REPORT_SCHEMA = Path(__file__).resolve().parents[1] / "schema" / "report-v2.schema.json"
REPORT_COMMANDS = frozenset({"--once", "inspect", "discover"})


# The shipped units (tests/integration/test_systemd_units.py, tests/hung/test_service_unit.py).
SYSTEM_UNITS = Path(__file__).resolve().parents[1] / "systemd"
USER_UNITS = SYSTEM_UNITS / "user"


def unit_directives(path: Path) -> dict[str, list[str]]:
    """`Key=value` lines of a unit file, every value of a repeated key kept in order."""
    directives: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            directives.setdefault(key.strip(), []).append(value.strip())
    return directives


@pytest.fixture(autouse=True, scope="session")
def _private_runtime_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a run remembers in its runtime directory (notify checks, degraded notices) goes to
    the session's own temporary directory, never to the host's /run/lockwarden: through
    $RUNTIME_DIRECTORY, as the unit's RuntimeDirectory= gives it, for in-process code and every
    command a test starts (cli_env copies the environment)."""
    runtime = tmp_path_factory.mktemp("runtime") / "lockwarden"  # its name, as the unit's
    runtime.mkdir(mode=0o700)
    os.environ["RUNTIME_DIRECTORY"] = str(runtime)
    # No credentials given (set, but empty): check-config and notify-test never read this
    # host's /etc/credstore (commands.the_units_credential); a test gives its own.
    os.environ.setdefault("CREDENTIALS_DIRECTORY", "")


def require_tool(name: str) -> str:
    """The path of a real program the test needs; under CI=true its absence is a failure."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (tests/debian-packages.txt installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def pid_namespace_command() -> list[str]:
    """`unshare` for a PID namespace of its own with its own /proc, as a container has (a user
    namespace too, -U -r, when not root); its PID 1 is killed when unshare is. A kernel that
    refuses one fails the test under CI=true and skips it, saying why, elsewhere."""
    unshare = require_tool("unshare")
    user = [] if os.geteuid() == 0 else ["-U", "-r"]
    command = [unshare, *user, "--fork", "--pid", "--mount-proc", "--kill-child"]
    probe = subprocess.run([*command, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        reason = f"this kernel refuses a private PID namespace: {probe.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return command


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def run_cli(*args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the real `lockwarden` command (as `python -m lockwarden`, the installed package).
    Every report it prints as JSON (`--once`, `inspect`, `discover`) is checked against the
    JSON Schema in schema/: a document the schema does not describe fails the test."""
    completed = subprocess.run(
        [sys.executable, "-m", "lockwarden", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(**env),
        check=False,
    )
    command = args[: args.index("--")] if "--" in args else args
    if "--json" in command and REPORT_COMMANDS & set(command) and completed.stdout.strip():
        validate_report(json.loads(completed.stdout))
    if "--json" in command and "why" in command and completed.stdout.strip():
        validate_why(json.loads(completed.stdout))
    return completed


@functools.cache
def _report_validator() -> Any:
    import jsonschema  # a test dependency only (pyproject's test extra)

    schema = json.loads(REPORT_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@functools.cache
def _why_validator() -> Any:
    import jsonschema

    schema = json.loads(REPORT_SCHEMA.read_text())
    return jsonschema.Draft202012Validator({"$ref": "#/$defs/why", "$defs": schema["$defs"]})


def validate_why(document: dict[str, Any]) -> dict[str, Any]:
    """Fail unless `document` is what schema/report-v2.schema.json's `why` says."""
    errors = sorted(_why_validator().iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, error.path))}: {error.message}" for error in errors[:10]
    )
    return document


def validate_report(document: dict[str, Any]) -> dict[str, Any]:
    """Fail unless `document` is a version 2 report as schema/report-v2.schema.json says."""
    errors = sorted(_report_validator().iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, error.path))}: {error.message}" for error in errors[:10]
    )
    return document


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `python -c code args...` with this checkout's lockwarden importable."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        check=False,
    )


def run_json(*args: str, **env: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    completed = run_cli(*args, "--json", **env)
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: with the PID, the identity of one process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2 :].split()[19])


def proc_locks_pid(path: Path) -> int | None:
    """The PID /proc/locks prints for the lock on `path`, None when it prints no line."""
    status = path.stat()
    suffix = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if parts[-3] == suffix and parts[1] != "->":
            return int(parts[4])
    return None


@dataclass
class Children:
    """Processes started by a test, killed by PID at teardown.

    Popen children are killed only while unreaped (their PID cannot be reused before we wait);
    other tracked PIDs only while their start ticks still match, so a reused PID is never hit.
    """

    tracked: list[tuple[int, int | None]] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def python(self, code: str, *args: str, ready: str = "ready") -> subprocess.Popen[str]:
        """Start `python -c code args...` and wait until it prints `ready` (its lock is held)."""
        return self.start([sys.executable, "-c", textwrap.dedent(code), *args], ready=ready)

    def start(
        self, argv: list[str], ready: str | None = None, **kwargs: object
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(  # type: ignore[call-overload]
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
        )
        self.procs.append(proc)
        if ready is not None:
            line = proc.stdout.readline().strip()
            if line != ready:
                proc.kill()
                raise AssertionError(f"{argv[:3]} did not get ready: {line!r} {proc.stderr.read()}")
        return proc

    def track(self, pid: int) -> int:
        """Remember a process this test caused but did not start directly (a grandchild)."""
        self.tracked.append((pid, start_ticks(pid)))
        return pid

    def end(self, pid: int) -> None:
        """SIGKILL a tracked process if it still runs: one that has ended (a shell whose child
        was killed, reaped by the namespace's init) is left alone, and so is its reused PID."""
        for tracked, ticks in self.tracked:
            if tracked == pid and ticks is not None and start_ticks(pid) == ticks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def cleanup(self) -> None:
        for pid, _ticks in reversed(self.tracked):
            self.end(pid)
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def children() -> Iterator[Children]:
    tracker = Children()
    try:
        yield tracker
    finally:
        tracker.cleanup()


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.02) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# The exit code of each severity, and their order: the worst finding decides the code.
SEVERITY_CODES = {"ok": 0, "warning": 1, "unknown": 3, "critical": 2}
CODE_RANK = (0, 1, 3, 2)


def foreign_blocked(document: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """The blocked writers of a `--once --json` report that the test did not make: a writer
    waiting on a lock outside `root`, anywhere on the host ([host] blocked_writers is on by
    default). A test asserts only on what it created."""
    return [
        lock
        for lock in document["locks"]
        if lock["name"].startswith("blocked:") and not Path(lock["path"]).is_relative_to(root)
    ]


def expected_code(own: int, document: dict[str, Any], root: Path) -> int:
    """The exit code of a run whose own locks give `own`: a blocked writer elsewhere on the
    host (see foreign_blocked) may only make it worse, by its own severity."""
    codes = [own, *(SEVERITY_CODES[lock["severity"]] for lock in foreign_blocked(document, root))]
    return max(codes, key=CODE_RANK.index)


def write_config(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


# Child programs that hold real locks. Each prints "ready" once its lock is taken.

MKDIR_HOLDER = """
import json, os, socket, sys, time
lock, role, started = sys.argv[1], sys.argv[2], sys.argv[3]
os.mkdir(lock)
record = {"pid": os.getpid(), "role": role, "host": socket.gethostname(), "startedAt": started}
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump(record, handle)
print("ready", flush=True)
time.sleep(120)
"""

FLOCK_HOLDER = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""

OFD_HOLDER = """
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
print("ready", flush=True)
time.sleep(120)
"""


POSIX_HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.lockf(handle, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""
