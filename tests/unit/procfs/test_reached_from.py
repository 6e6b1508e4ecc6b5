"""reached_from: where a process that runs in a root of its own (a container's) may work, as it
sees the file system. A real process is started in its own root (chroot in a mount namespace,
with the host's /usr bound in), and the path it names goes through an absolute symlink of that
root: the symlink means the process's own directory, never the host's."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from conftest import Children, require_tool, wait_until
from lockwarden.procfs.snapshot import reached_from


def key(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_dev, status.st_ino


def start_in_own_root(children: Children, root: Path) -> subprocess.Popen[str]:
    """`sleep` with `root` as its root: /usr bound in, the usr-merged links beside it."""
    if os.geteuid() != 0:
        reason = "a root of its own (chroot in a mount namespace) needs root"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    (root / "usr").mkdir()
    for name in ("bin", "lib", "lib64", "sbin"):
        (root / name).symlink_to(f"usr/{name}")
    script = 'mount --bind /usr "$1/usr" && exec chroot "$1" /usr/bin/sleep 60'
    process = children.start(
        [require_tool("unshare"), "--mount", "--propagation", "private", "sh", "-c", script,
         "sh", str(root)]
    )  # fmt: skip
    assert wait_until(lambda: os.readlink(f"/proc/{process.pid}/root") == str(root), timeout=10)
    return process


def test_an_absolute_symlink_in_a_process_root_means_its_own_directory(
    tmp_path: Path, children: Children
) -> None:
    root = tmp_path / "root"
    own = f"lw-{secrets.token_hex(6)}"  # no such directory on the host
    assert not Path("/", own).exists()
    repository = root / own / "repo.git"
    repository.mkdir(parents=True)
    (root / "link").symlink_to(f"/{own}")
    process = start_in_own_root(children, root)

    reached = reached_from("/proc", process.pid, ["/link/repo.git"], ())

    assert key(repository) in reached
    assert key(root / own) in reached
    loop = root / "loop"
    loop.symlink_to("/loop")
    with pytest.raises(OSError, match="too many symlinks"):
        reached_from("/proc", process.pid, ["/loop/x"], ())
