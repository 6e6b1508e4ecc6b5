"""Soft (existence) locks made by the real PyPI packages in child processes.

py-filelock's SoftFileLock changed what it writes: empty up to 3.21, `pid\\nhost\\n` in
3.22-3.29, `pid\\nhost\\ntoken\\n` from 3.30. The installed filelock (the test extra) gives the
newest layout; 3.21.0, 3.29.0 and 4.3.1 (for its MarkerSoftFileLock) are installed with pip
into a per-user cache directory the first time (so these tests need PyPI once), and each child
imports the version it is given.
lockfile (0.12) gives LinkLockFile, MkdirLockFile and PIDLockFile.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from buildenv import build_environment
from conftest import run_json
from factories import capture_host
from format_helpers import inspect, unrelated_process
from lockwarden.formats.filelock_soft import decode_start_token, parse_link_name, pid_readings
from lockwarden.model import State, UnknownCause

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lockwarden-tests"
HOUR = 3600

SOFT_HOLDER = """
import sys, time
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
import filelock
lock = filelock.SoftFileLock(sys.argv[1])
lock.acquire()
print("ready", flush=True)
time.sleep(120)
"""

LOCKFILE_HOLDER = """
import sys, time
from lockfile.linklockfile import LinkLockFile
from lockfile.mkdirlockfile import MkdirLockFile
from lockfile.pidlockfile import PIDLockFile
kinds = {"link": LinkLockFile, "mkdir": MkdirLockFile, "pid": PIDLockFile}
kinds[sys.argv[2]](sys.argv[1]).acquire()
print("ready", flush=True)
time.sleep(120)
"""


def filelock_path(version: str | None) -> str:
    """Where `filelock==version` is importable from ('' for the installed one)."""
    if version is None:
        return ""
    target = CACHE / f"filelock-{version}"
    if not (target / "filelock").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        completed = subprocess.run(
            [*pip, "--no-deps", "--target", str(target), f"filelock=={version}"],
            capture_output=True,
            text=True,
            env=build_environment(pip=True),
            check=False,
        )
        if completed.returncode != 0:
            message = f"cannot install filelock=={version}: {completed.stderr[-300:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    return str(target)


def hold_soft_lock(children, lock: Path, version: str | None) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    return children.python(SOFT_HOLDER, str(lock), filelock_path(version))


def hold_lockfile(children, path: Path, kind: str) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("lockfile") is None:  # the test extra installs it
        if os.environ.get("CI") == "true":
            pytest.fail("lockfile is not installed")
        pytest.skip("lockfile is not installed")
    return children.python(LOCKFILE_HOLDER, str(path), kind)


def every_descriptor_readable() -> bool:
    return capture_host(scan_keys=((0, 0),)).unreadable_pids == 0


@pytest.mark.parametrize(
    ("version", "content"),
    [("3.29.0", "pid-host"), (None, "pid-host-token")],
    ids=["3.22-3.29", "installed>=3.30"],
)
def test_soft_lock_with_a_pid_is_held_then_stale_when_killed(children, tmp_path, version, content):
    lock = tmp_path / "data.lock"
    holder = hold_soft_lock(children, lock, version)
    lines = lock.read_text().splitlines()
    assert len(lines) == (2 if content == "pid-host" else 3)

    finding = inspect(str(lock))
    assert finding.format == "filelock-soft"
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == holder.pid

    holder.kill()
    holder.wait(timeout=5)
    finding = inspect(str(lock))
    assert finding.state is State.STALE, finding.reason
    assert f"PID {holder.pid} is not running" in (finding.proof or "")
    assert finding.action == f"rm -- {lock}"


MARKER_HOLDER = SOFT_HOLDER.replace("filelock.SoftFileLock", "filelock.MarkerSoftFileLock")


def test_filelock_4_marker_lock_is_held_then_stale_when_killed(children, tmp_path):
    lock = tmp_path / "data.lock"
    holder = children.python(MARKER_HOLDER, str(lock), filelock_path("4.3.1"))
    assert lock.read_text().startswith("filelock/2\n")

    finding = inspect(str(lock))
    assert finding.format == "filelock-soft"
    assert finding.holder is not None and finding.holder.pid == holder.pid
    assert "filelock/2 marker (exclusive mode)" in (finding.note or "")

    holder.kill()
    holder.wait(timeout=5)
    assert inspect(str(lock)).state is State.STALE


def test_empty_soft_lock_of_filelock_3_21_is_held_by_the_process_that_has_it_open(
    children, tmp_path
):
    lock = tmp_path / "data.lock"
    holder = hold_soft_lock(children, lock, "3.21.0")
    assert lock.read_bytes() == b""

    finding = inspect(str(lock), "filelock-soft")
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == holder.pid

    holder.kill()
    holder.wait(timeout=5)
    finding = inspect(str(lock), "filelock-soft")
    if every_descriptor_readable():
        assert finding.state is State.STALE, finding.reason
        assert "keeps its lock file open" in (finding.proof or "")
    else:  # some process's descriptors are hidden even from root: no proof, so never stale
        assert finding.state is State.UNKNOWN, finding.reason
        assert finding.unknown_cause is UnknownCause.MISSING_RIGHT


def test_auto_reads_an_empty_lock_file_as_a_kernel_lock_file(tmp_path):
    """An empty `X.lock` is also what FileLock (flock) leaves behind; auto cannot tell them
    apart, so it takes the reading that never calls a lock stale."""
    lock = tmp_path / "data.lock"
    lock.write_text("")
    finding = inspect(str(lock))
    assert finding.format == "kernel"
    assert finding.state is State.FREE


def test_token_is_decoded_to_this_boot_and_the_holder_s_start_ticks(children, tmp_path):
    lock = tmp_path / "data.lock"
    holder = hold_soft_lock(children, lock, None)
    boot_id, ticks = decode_start_token(int(lock.read_text().splitlines()[2]))
    snapshot = capture_host(pids=(holder.pid,))
    process = snapshot.process(holder.pid)
    assert process is not None
    assert boot_id == snapshot.boot_id
    assert ticks == process.start_ticks


def test_a_reused_pid_in_a_token_record_is_never_the_holder(children, tmp_path):
    reused = unrelated_process(children)
    snapshot = capture_host(pids=(reused,))
    process = snapshot.process(reused)
    assert process is not None
    token = uuid.UUID(snapshot.boot_id).int << 64 | (process.start_ticks - 1)
    lock = tmp_path / "data.lock"
    lock.write_text(f"{reused}\n{socket.gethostname()}\n{token}\n")

    finding = inspect(str(lock))

    assert finding.state is State.STALE, finding.reason
    assert finding.holder is None
    assert "the record says tick" in (finding.proof or "")


def test_a_reused_pid_in_a_pid_host_record_is_never_the_holder(children, tmp_path):
    reused = unrelated_process(children)
    lock = tmp_path / "data.lock"
    lock.write_text(f"{reused}\n{socket.gethostname()}\n")
    taken = time.time() - HOUR  # the record was written an hour before PID was reused
    os.utime(lock, (taken, taken))

    finding = inspect(str(lock))

    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.holder is None


def test_a_token_from_another_boot_is_stale(tmp_path):
    lock = tmp_path / "data.lock"
    other_boot = uuid.uuid4().int << 64 | 12345
    lock.write_text(f"{os.getpid()}\n{socket.gethostname()}\n{other_boot}\n")
    finding = inspect(str(lock))
    assert finding.state is State.STALE
    assert "another boot" in (finding.proof or "")


def test_a_record_from_another_host_is_unknown(tmp_path):
    lock = tmp_path / "data.lock"
    lock.write_text(f"{os.getpid()}\nsome-other-host\n")
    finding = inspect(str(lock))
    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.OTHER_HOST


@pytest.mark.parametrize("kind", ["link", "mkdir", "pid"])
def test_lockfile_locks_are_held_then_stale_when_killed(children, tmp_path, kind):
    target = tmp_path / "data"
    holder = hold_lockfile(children, target if kind != "pid" else tmp_path / "data.pid", kind)
    lock = tmp_path / ("data.pid" if kind == "pid" else "data.lock")

    code, document = run_json("inspect", str(lock))
    finding = document["locks"][0]
    assert finding["state"] == "held", finding
    assert finding["holders"][0]["pid"] == holder.pid
    assert code == 0

    holder.kill()
    holder.wait(timeout=5)
    stale = inspect(str(lock), "filelock-soft")
    assert stale.state is State.STALE, stale.reason
    assert str(holder.pid) in (stale.proof or "")


def test_auto_picks_filelock_soft_for_lockfile_s_link_and_mkdir_locks(children, tmp_path):
    hold_lockfile(children, tmp_path / "one", "link")
    hold_lockfile(children, tmp_path / "two", "mkdir")
    assert inspect(str(tmp_path / "one.lock")).format == "filelock-soft"
    assert inspect(str(tmp_path / "two.lock")).format == "filelock-soft"


def test_a_reused_pid_in_a_mkdir_lock_name_is_never_the_holder(children, tmp_path):
    reused = unrelated_process(children)
    lock = tmp_path / "data.lock"
    lock.mkdir()
    name = lock / f"{socket.gethostname()}.{reused}"
    name.write_text("")
    taken = time.time() - HOUR
    os.utime(name, (taken, taken))

    finding = inspect(str(lock))

    assert finding.format == "filelock-soft"
    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.holder is None
    assert finding.action is None


def test_link_lock_names_are_read_as_every_pid_they_can_mean():
    owner = parse_link_name("web-1-fe482b80.134837184853718716805601", 4194304)
    assert owner is not None and owner.host == "web-1"
    assert owner.candidates == (13483, 134837, 1348371)
    negative = parse_link_name("web.4242-7184853718716805601", 4194304)
    assert negative is not None and negative.pid == 4242
    assert pid_readings("120", 4194304, 19) == (12,)


def test_a_hard_linked_lock_whose_other_name_is_unreadable_is_unknown(tmp_path):
    """Never read a LinkLockFile as an empty SoftFileLock (whose proof is "nobody has it open",
    which a LinkLockFile holder never does)."""
    lock = tmp_path / "data.lock"
    lock.write_text("")
    os.link(lock, tmp_path / "not-a-lockfile-name")
    finding = inspect(str(lock), "filelock-soft")
    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.UNREADABLE_RECORD  # its other name was not found
