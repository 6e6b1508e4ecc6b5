"""PostgreSQL's postmaster.pid written by a real server (Debian's postgresql), started with
initdb + postgres in a throwaway data directory as the `postgres` user."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from buildenv import build_environment
from conftest import run_json, wait_until
from format_helpers import inspect, unrelated_process
from lockwarden.model import State, UnknownCause


def postgres_bin() -> Path:
    """Debian installs each major version's programs under /usr/lib/postgresql/N/bin."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return versions[-1] if versions else Path("/usr/lib/postgresql/15/bin")


def postgres_program(name: str) -> str:
    found = postgres_bin() / name
    if not found.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{found} is missing (tests/debian-packages.txt installs postgresql)")
        pytest.skip(f"{found} is missing")
    return str(found)


def server_user() -> dict[str, str]:
    """postgres refuses to run as root: as root, run it as the package's `postgres` user."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@pytest.fixture
def data_directory() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="lockwarden-pg-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    options = ["-A", "trust", "-U", "postgres", "--no-sync", "--no-instructions", "-E", "UTF8"]
    subprocess.run(
        [postgres_program("initdb"), "-D", str(data), *options],
        check=True,
        capture_output=True,
        env=build_environment(),
        **server_user(),  # type: ignore[arg-type]
    )
    yield data
    shutil.rmtree(base, ignore_errors=True)


def start_server(children, data: Path) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    argv = [postgres_program("postgres"), "-D", str(data), "-k", str(data.parent)]
    argv += ["-c", "listen_addresses=", "-p", "54329"]
    server = children.start(argv, **server_user())
    pid_file = data / "postmaster.pid"
    assert wait_until(lambda: _status(pid_file) == "ready", timeout=20), server.stderr
    for backend in psutil.Process(server.pid).children():
        children.track(backend.pid)
    return server


def _status(pid_file: Path) -> str | None:
    try:
        lines = pid_file.read_text().split("\n")
    except FileNotFoundError:
        return None
    return lines[7].strip() if len(lines) > 7 else None


def test_real_server_holds_its_data_directory_then_is_stale_when_killed(children, data_directory):
    server = start_server(children, data_directory)

    finding = inspect(str(data_directory), "postgres")
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == server.pid
    assert finding.holder.role == "postgres (port 54329, ready)"
    assert finding.action is None  # held within its budget: nothing to do yet

    server.kill()
    server.wait(timeout=5)
    pid_file = data_directory / "postmaster.pid"
    assert pid_file.exists(), "a killed postmaster leaves postmaster.pid behind"
    # Its backends notice the postmaster's death and exit; until then they still hold it.
    assert wait_until(lambda: inspect(str(pid_file)).state is State.STALE, timeout=10)
    finding = inspect(str(pid_file))
    assert f"PID {server.pid} is not running" in (finding.proof or "")
    assert "no postgres/postmaster process works in" in finding.proof
    # The data directory is the postgres user's, who could swap what is in it: the manual
    # removal runs as that user (formats/trust.py), so it can do nothing she could not.
    owner = data_directory.stat()
    assert finding.action == (
        f"setpriv --reuid={owner.st_uid} --regid={owner.st_gid} --clear-groups -- rm -- {pid_file}"
    )
    subprocess.run(shlex.split(finding.action), check=True, timeout=30)
    assert not pid_file.exists()


def test_auto_picks_postgres_for_the_data_directory(children, data_directory):
    server = start_server(children, data_directory)
    code, document = run_json("inspect", str(data_directory))
    finding = document["locks"][0]
    assert finding["format"] == "postgres"
    assert finding["holders"][0]["pid"] == server.pid
    assert inspect(str(data_directory / "postmaster.pid")).format == "postgres"
    assert code == 0


def write_pid_file(data: Path, pid: int, started: float) -> Path:
    data.mkdir(exist_ok=True)
    pid_file = data / "postmaster.pid"
    lines = [str(pid), str(data), str(int(started)), "5432", "/var/run/postgresql", "*"]
    pid_file.write_text("\n".join([*lines, "  1234567         4", "ready   ", ""]))
    return pid_file


def test_a_pid_reused_by_a_later_process_is_never_the_holder(children, tmp_path):
    reused = unrelated_process(children)
    pid_file = write_pid_file(tmp_path / "data", reused, time.time() - 3600)
    finding = inspect(str(pid_file), "postgres")
    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.holder is None
    assert finding.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED


def test_a_pid_of_a_process_older_than_the_server_is_never_the_holder(children, tmp_path):
    """The recorded start is the postmaster's own, so a process that started long before it
    is not it either: here the record says the server started an hour after this process."""
    older = unrelated_process(children)
    pid_file = write_pid_file(tmp_path / "data", older, time.time() + 3600)
    finding = inspect(str(pid_file), "postgres")
    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.holder is None
    assert finding.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED  # it started long before


def test_orphaned_backends_still_hold_the_data_directory(children, tmp_path):
    """A dead postmaster whose backend still runs in the data directory is not stale. The
    backend is a real process named `postgres` (a copy of sleep) working in that directory."""
    data = tmp_path / "data"
    dead = children.start(["true"])
    dead.wait(timeout=5)
    pid_file = write_pid_file(data, dead.pid, time.time())
    backend_program = tmp_path / "postgres"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", backend_program)
    backend = children.start([str(backend_program), "120"], cwd=data)
    assert wait_until(lambda: psutil.Process(backend.pid).name() == "postgres")

    finding = inspect(str(pid_file), "postgres")

    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == backend.pid
    assert f"PID {dead.pid} is gone" in finding.reason
