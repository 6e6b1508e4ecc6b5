"""Holders and waiters in containers of a real runtime: Debian's podman (with runc), running an
image imported here from a root file system made here (busybox, util-linux's flock and the C
library it needs; no registry is reached). The lock file is on a volume the host shares, so
lockwarden on the host sees every container's holders and waiters by their host PIDs.

Each container gets a name of its own, and is removed (`podman rm -f`) and its processes killed
by PID at the end; the host's other containers are never looked at.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import require_tool, run_cli, wait_until
from integration.test_why import blocked_in_lock_call

IMAGE = "localhost/lockwarden-test-flock:1"
PODMAN_OPTIONS = ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
RUN_OPTIONS = ["--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [require_tool("podman"), *PODMAN_OPTIONS, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert completed.returncode == 0, completed.stderr
    return completed


def image_root(root: Path) -> None:
    """busybox for a shell and sleep, flock(1) and the libraries it loads."""
    (root / "bin").mkdir(parents=True)
    for name in ("shared", "tmp", "proc", "dev", "sys", "etc"):
        (root / name).mkdir()
    shutil.copy2(require_tool("busybox"), root / "bin" / "busybox")
    for applet in ("sh", "sleep", "true"):
        (root / "bin" / applet).symlink_to("busybox")
    flock = require_tool("flock")
    shutil.copy2(flock, root / "bin" / "flock")
    listed = subprocess.run(["ldd", flock], capture_output=True, text=True, check=True).stdout
    for library in (word for word in listed.split() if word.startswith("/")):
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(library), target)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_tool("runc")
    root = tmp_path_factory.mktemp("image-root")
    image_root(root)
    archive = root.parent / "image.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    podman("import", str(archive), IMAGE)
    try:
        yield IMAGE
    finally:
        podman("rmi", "-f", IMAGE, check=False)


class Containers:
    """Containers this test started, each removed at the end; their host PIDs killed too."""

    def __init__(self, image: str, shared: Path) -> None:
        self.image = image
        self.shared = shared
        self.names: list[str] = []
        self.pids: list[int] = []

    def run(self, *command: str) -> tuple[str, int]:
        """Start one; its name and the host PID of its own PID 1."""
        name = f"lockwarden-test-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        podman("run", "-d", "--name", name, *RUN_OPTIONS,
               "-v", f"{self.shared}:/shared", self.image, *command)  # fmt: skip
        pid = int(podman("inspect", "-f", "{{.State.Pid}}", name).stdout)
        self.pids.append(pid)
        return name, pid

    def running(self, name: str) -> bool:
        state = podman("inspect", "-f", "{{.State.Running}}", name, check=False)
        return state.stdout.strip() == "true"

    def remove_all(self) -> None:
        for name in self.names:
            podman("rm", "-f", "-t", "0", name, check=False)
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


@pytest.fixture
def containers(image: str, tmp_path: Path) -> Iterator[Containers]:
    shared = tmp_path / "shared"
    shared.mkdir()
    started = Containers(image, shared)
    try:
        yield started
    finally:
        started.remove_all()


def inspect(path: Path) -> tuple[int, dict[str, Any]]:
    completed = run_cli(
        "inspect", str(path), "--json", "--warn-after", "0s", "--critical-after", "0s"
    )
    assert completed.stdout, completed.stderr
    [finding] = json.loads(completed.stdout)["locks"]
    return completed.returncode, finding


def run_action(finding: dict[str, Any]) -> None:
    argv = finding["action"]["argv"]
    assert argv is not None, finding["action"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_a_containers_own_job_holding_the_lock_is_stopped_with_its_container(
    containers: Containers,
) -> None:
    lock = containers.shared / "job.lock"
    name, init = containers.run("/bin/flock", "/shared/job.lock", "/bin/sleep", "600")
    assert wait_until(lambda: _held(lock), timeout=10)
    code, finding = inspect(lock)
    assert code == 2 and finding["state"] == "held_too_long", finding
    holder = finding["holders"][0]
    assert holder["pid"] == init  # the host PID, not the container's PID 1
    assert holder["container"] == {
        "runtime": "podman",
        "name": name,
        "id": holder["container"]["id"],
        "init": True,
    }
    assert len(holder["container"]["id"]) == 64
    assert f"podman container {name}" in finding["reason"]
    assert finding["action"]["argv"] == ["podman", "stop", name]
    run_action(finding)
    assert wait_until(lambda: not _held(lock), timeout=30)


def test_a_job_beside_the_containers_application_is_stopped_alone(
    containers: Containers,
) -> None:
    """The container's PID 1 is its application; a job it started holds the lock: the action
    ends the job and leaves the application running (never `podman stop`)."""
    lock = containers.shared / "side.lock"
    name, application = containers.run(
        "/bin/sh", "-c", "/bin/flock /shared/side.lock /bin/sleep 600 & exec /bin/sleep 600"
    )
    assert wait_until(lambda: _held(lock), timeout=10)
    _code, finding = inspect(lock)
    pids = [holder["pid"] for holder in finding["holders"]]
    assert application not in pids
    assert all(
        h["container"]["name"] == name and not h["container"]["init"] for h in finding["holders"]
    )
    assert finding["action"]["argv"] == ["kill", *map(str, pids)]
    run_action(finding)
    assert wait_until(lambda: not _held(lock), timeout=10)
    assert containers.running(name)  # the application lives on


def test_a_waiter_in_one_container_is_followed_to_the_holder_in_another(
    containers: Containers, tmp_path: Path
) -> None:
    lock = containers.shared / "shared.lock"
    holder_name, holder = containers.run("/bin/flock", "/shared/shared.lock", "/bin/sleep", "600")
    assert wait_until(lambda: _held(lock), timeout=10)
    waiter_name, waiter = containers.run("/bin/flock", "/shared/shared.lock", "/bin/true")
    assert wait_until(lambda: blocked_in_lock_call(waiter), timeout=10)

    completed = run_cli("why", str(waiter), "--json")
    [process] = json.loads(completed.stdout)["processes"]
    [wait] = process["waits"]
    # The waiter names it /shared/shared.lock, inside its container; the mount that name is
    # under (the volume) gives the host's name for the same file.
    assert wait["path"] == str(lock), wait["path"]
    assert wait["lock"]["file"]["inode"] == lock.stat().st_ino  # the host's file, no other
    # flock(1) and the sleep it runs share its lock: both block, both in the holder's container.
    assert wait["blocked_by"][0] == holder and len(wait["blocked_by"]) == 2, wait["blocked_by"]
    held_by = wait["lock"]["holders"]
    assert [h["pid"] for h in held_by] == wait["blocked_by"]
    assert all(h["container"]["name"] == holder_name for h in held_by)
    assert held_by[0]["container"]["init"] and not held_by[1]["container"]["init"]
    [waiting] = [w for w in wait["lock"]["waiters"] if w["pid"] == waiter]
    assert waiting["container"]["name"] == waiter_name
    text = run_cli("why", str(waiter), "--warn-after", "0s", "--critical-after", "0s").stdout
    assert f"podman container {holder_name}" in text and f"podman stop {holder_name}" in text
    report = run_cli("inspect", str(lock)).stdout  # the waiting row says where the waiter runs
    assert f"PID {waiter} (/bin/flock /shared/shared.lock /bin/true, in podman container " in report
    assert waiter_name in report


def _held(path: Path) -> bool:
    """The test's own probe: flock(1) -n fails while another holds the lock."""
    if not path.exists():
        return False
    probe = subprocess.run([require_tool("flock"), "-n", str(path), "true"], check=False)
    return probe.returncode != 0


def test_a_writer_blocked_across_containers_is_a_finding_of_the_host_run(
    containers: Containers, tmp_path: Path
) -> None:
    """The host-wide look of `--once`: a waiter in one container behind a holder in another,
    on a lock nobody configured, past [host] blocked_after names both containers."""
    from datetime import UTC, datetime, timedelta

    from conftest import write_config

    lock = containers.shared / "orders.lock"
    holder_name, holder = containers.run("/bin/flock", "/shared/orders.lock", "/bin/sleep", "600")
    assert wait_until(lambda: _held(lock), timeout=10)
    waiter_name, waiter = containers.run("/bin/flock", "/shared/orders.lock", "/bin/true")
    assert wait_until(lambda: blocked_in_lock_call(waiter), timeout=10)
    quiet = tmp_path / "quiet.lock"
    quiet.touch()
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        '[host]\nblocked_after = "5m"\n'
        f'[[lock]]\nname = "quiet"\npath = "{quiet}"\nformat = "kernel"\n',
    )
    start = datetime.now(UTC)
    for minute in (0, 3, 6):
        moment = (start + timedelta(minutes=minute)).isoformat()
        completed = run_cli("--once", "--json", "--config", config, "--now", moment)
    document = json.loads(completed.stdout)
    [found] = [f for f in document["locks"] if f["name"] == f"blocked:{lock}"]
    assert found["state"] == "held_too_long", found
    assert found["holders"][0]["pid"] == holder
    assert found["holders"][0]["container"]["name"] == holder_name
    [waiting] = found["waiters"]
    assert waiting["pid"] == waiter and waiting["container"]["name"] == waiter_name
    assert found["action"]["argv"] == ["podman", "stop", holder_name]


def test_a_lock_on_the_containers_own_file_system_is_reached_from_the_host(
    containers: Containers,
) -> None:
    """Both processes in one container, the lock a file of its own root (no volume): the
    waiter's name for it is reached from the host (through the container's root file system as
    the host mounts it, or its root in /proc), and the holder is named."""
    name, _init = containers.run(
        "/bin/sh", "-c",
        "/bin/flock /tmp/own.lock /bin/sleep 600 & sleep 1; "
        "/bin/flock /tmp/own.lock /bin/true & exec /bin/sleep 600",
    )  # fmt: skip
    waiter = holder = None
    for _ in range(50):
        pids = [p for p in _pids_in(name) if _cmdline(p).endswith("/tmp/own.lock /bin/true")]
        if pids and blocked_in_lock_call(pids[0]):
            waiter = pids[0]
            break
        time.sleep(0.2)
    assert waiter is not None, "the waiter did not block"
    holder = next(p for p in _pids_in(name) if "/tmp/own.lock /bin/sleep" in _cmdline(p))
    completed = run_cli("why", str(waiter), "--json")
    [process] = json.loads(completed.stdout)["processes"]
    [wait] = process["waits"]
    assert wait["path"] is not None and os.path.exists(wait["path"]), wait
    assert holder in wait["blocked_by"], wait
    assert all(h["container"]["name"] == name for h in wait["lock"]["holders"])


def _pids_in(name: str) -> list[int]:
    listed = podman("top", name, "hpid").stdout.split()[1:]
    return [int(pid) for pid in listed if pid.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
