"""What the security tests share: a real unprivileged local user (the attacker of
docs/security.md), commands run as that user, and real cgroups made for a test and removed
after it.

Everything here is real: the user is made with `useradd`, commands drop to it with util-linux's
`setpriv`, and a cgroup is a directory of the host's cgroup v2 hierarchy, owned by the user when
the test says it was delegated to them (as systemd delegates `user@UID.service`). These tests
need root; under CI=true its absence is a failure, elsewhere a skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import require_tool

ATTACKER = "lw-mallory"
_USERS_LOCK = Path("/run/lockwarden-tests-users.lock")


def _need_root() -> None:
    if os.geteuid() != 0:
        reason = "the security tests make a real unprivileged user and cgroups: run as root"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def command(self, *argv: str) -> list[str]:
        """`argv` run as this user, with no capability and no supplementary group of root."""
        setpriv = require_tool("setpriv")
        return [
            setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--init-groups",
            "--reset-env",
            "--",
            *argv,
        ]


def ensure_user(name: str) -> User:
    """The local user `name`, made once for the machine (the suite's parts run side by side,
    so the check and the `useradd` happen under one lock)."""
    _need_root()
    require_tool("useradd")
    with open(_USERS_LOCK, "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
                timeout=60,
            )
            entry = pwd.getpwnam(name)
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


@pytest.fixture(scope="session")
def attacker() -> User:
    """The local attacker: an ordinary user with no right beyond their own files."""
    return ensure_user(ATTACKER)


@pytest.fixture
def attackers_dir(attacker: User) -> Iterator[Path]:
    """A directory the attacker owns and can reach (pytest's own is root's, mode 0700),
    removed after the test."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="lw-mallory-"))
    os.chmod(path, 0o755)
    os.chown(path, attacker.uid, attacker.gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


CGROUP_ROOT = Path("/sys/fs/cgroup/unified")


def cgroup_root() -> Path:
    """The cgroup v2 hierarchy: /sys/fs/cgroup itself on a unified host, its `unified` mount on
    a hybrid one."""
    for candidate in (Path("/sys/fs/cgroup"), CGROUP_ROOT):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    reason = "no cgroup v2 hierarchy is mounted"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass
class Cgroups:
    """cgroup v2 directories a test made, each removed (deepest first) after the processes
    the test put in them are ended."""

    root: Path
    made: list[Path] = field(default_factory=list)
    members: list[int] = field(default_factory=list)

    def make(self, relative: str, owner: User | None = None) -> Path:
        """Make `relative` (and its missing parents) below the hierarchy's root; `owner`
        gets every directory from the first one this call made down, as a delegation gives it."""
        path = self.root / relative
        missing = [parent for parent in (path, *path.parents) if not parent.exists()]
        for directory in reversed(missing):
            directory.mkdir()
            self.made.append(directory)
            if owner is not None:
                for name in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
                    with contextlib.suppress(FileNotFoundError):
                        os.chown(directory / name if name else directory, owner.uid, owner.gid)
        return path

    def move(self, pid: int, cgroup: Path) -> None:
        (cgroup / "cgroup.procs").write_text(str(pid))
        self.members.append(pid)

    def cleanup(self) -> None:
        for pid in self.members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for directory in sorted(self.made, key=lambda p: len(p.parts), reverse=True):
            for _ in range(50):  # a killed process leaves its cgroup once it is reaped
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    _need_root()
    made = Cgroups(cgroup_root())
    try:
        yield made
    finally:
        made.cleanup()
