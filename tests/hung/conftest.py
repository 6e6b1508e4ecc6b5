"""Real FUSE mounts that stop answering (hangfs.py, run by Debian's python3 with
python3-fusepy) or whose directories cannot be synced (syncfailfs.py), each cleaned up by
aborting its connection and unmounting, and a way to see and reap the reading processes a run
abandons on them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alerts.helpers import receiver
from conftest import Children

HANGFS = str(Path(__file__).with_name("hangfs.py"))
SYNCFAILFS = str(Path(__file__).with_name("syncfailfs.py"))
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's interpreter, where python3-fusepy installs
CONNECTIONS = "/sys/fs/fuse/connections"
PR_SET_CHILD_SUBREAPER = 36
WORKER_NAME = "lockwarden-fs"


def _missing(message: str) -> None:
    """A missing piece of the FUSE setup fails the test under CI=true, else skips it."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        _missing("/dev/fuse is missing: these tests need a real FUSE file system")
    probe = subprocess.run(
        [DEBIAN_PYTHON, "-c", "import fusepy"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        _missing("python3-fusepy is not installed (tests/debian-packages.txt installs it)")
    if not _fusectl_mounted():
        done = subprocess.run(
            ["mount", "-t", "fusectl", "fusectl", CONNECTIONS], capture_output=True, check=False
        )
        if done.returncode != 0:
            _missing(f"cannot mount fusectl on {CONNECTIONS}: {done.stderr.decode().strip()}")


def _mountinfo() -> list[list[str]]:
    with open("/proc/self/mountinfo") as handle:
        return [line.split() for line in handle]


def _fusectl_mounted() -> bool:
    return any(fields[fields.index("-", 6) + 1] == "fusectl" for fields in _mountinfo())


def _connection(mountpoint: Path) -> str | None:
    """The FUSE connection of a mount: its device's minor number (the major is 0)."""
    for fields in _mountinfo():
        if fields[4] == str(mountpoint):
            return fields[2].split(":")[1]
    return None


class HangingMounts:
    """Mounts hangfs.py in a mode (`hang`, `slow`); `abort(mount)` ends one as an admin
    would: abort the connection (every waiting request fails), then unmount."""

    def __init__(self, base: Path, children: Children) -> None:
        self.base = base
        self.children = children
        self.servers: dict[Path, subprocess.Popen[str]] = {}

    def mount(
        self, mode: str, name: str = "share", record_pid: int = 1, flag: Path | None = None
    ) -> Path:
        """Mount hangfs; its `store/LOCK` record names `record_pid`; `flag`: the file whose
        existence makes mode `hang-when-flagged` hang."""
        require_fuse()
        mountpoint = self.base / name
        mountpoint.mkdir(parents=True)
        argv = [DEBIAN_PYTHON, HANGFS, str(mountpoint), mode, str(record_pid)]
        if flag is not None:
            argv.append(str(flag))
        server = self.children.start(argv, ready="ready")
        self.servers[mountpoint] = server
        return mountpoint

    def mount_syncfail(self, name: str = "syncfail") -> Path:
        """Mount syncfailfs.py: a writable directory whose fsync fails with EIO."""
        require_fuse()
        mountpoint = self.base / name
        mountpoint.mkdir(parents=True)
        argv = [DEBIAN_PYTHON, SYNCFAILFS, str(mountpoint)]
        self.servers[mountpoint] = self.children.start(argv, ready="ready")
        return mountpoint

    def abort(self, mountpoint: Path) -> None:
        connection = _connection(mountpoint)
        if connection is not None:
            with contextlib.suppress(OSError):
                Path(CONNECTIONS, connection, "abort").write_text("1")
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
        server = self.servers.pop(mountpoint, None)
        if server is not None:  # its request threads still wait on the hung ones: kill it
            server.kill()
            server.wait(timeout=5)

    def abort_all(self) -> None:
        for mountpoint in list(self.servers):
            self.abort(mountpoint)


@pytest.fixture
def hanging(tmp_path: Path, children: Children) -> Iterator[HangingMounts]:
    mounts = HangingMounts(tmp_path / "mnt", children)
    try:
        yield mounts
    finally:
        mounts.abort_all()


class Orphans:
    """While active, this test process is a child subreaper: a reading process the CLI
    abandoned on a hung mount is reparented here (not to init), so the test can see it, and
    see it end once the mount is aborted."""

    def __init__(self) -> None:
        self._prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl

    def set(self, on: bool) -> None:
        if self._prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            _missing(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")

    def workers(self, running_only: bool = True) -> list[int]:
        """Our adopted children that are lockwarden's reading processes, still running."""
        pids: list[int] = []
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/self/task/{task}/children").read_text()
                pids.extend(int(pid) for pid in text.split())
        return [
            pid for pid in pids if _comm(pid) == WORKER_NAME and not (running_only and _zombie(pid))
        ]

    def reap(self, pids: list[int], timeout: float = 10.0) -> list[int]:
        """Wait for these children to end; return those still running after `timeout`."""
        deadline = time.monotonic() + timeout
        left = list(pids)
        while left and time.monotonic() < deadline:
            for pid in list(left):
                with contextlib.suppress(ChildProcessError):
                    done, _status = os.waitpid(pid, os.WNOHANG)
                    if not done:
                        continue
                left.remove(pid)
            time.sleep(0.05)
        return left


def _zombie(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rfind(")") + 2] == "Z"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def orphans() -> Iterator[Orphans]:
    adopted = Orphans()
    adopted.set(True)
    try:
        yield adopted
    finally:
        adopted.set(False)
        leftover = adopted.workers(running_only=False)
        for pid in leftover:  # should be none running by now; never leave one unreaped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        adopted.reap(leftover, timeout=5)


__all__ = ["HangingMounts", "Orphans", "hanging", "orphans", "receiver"]
