"""A record naming a PID that is a kernel thread on this host was written in another PID
namespace (a container's, where the holder was PID 2, say), never by the thread: lockwarden
must not name the thread as the holder (on-call would be told to stop it), nor call the lock
stale (the container's holder may still run). Kernel threads are visible only from the
host's own PID namespace, so this file runs in the host part (scripts/test-parts.sh)."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from conftest import pid_namespace_command, require_tool, wait_until
from lockcheck import inspect_lock
from lockwarden.model import State, UnknownCause

PF_KTHREAD = 0x00200000  # include/linux/sched.h; read here on its own, as ground truth


def kernel_threads() -> dict[int, str]:
    """PID -> name of every kernel thread this test can see, from /proc/PID/stat's flags."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        flags = int(text[text.rfind(")") + 2 :].split()[6])
        if flags & PF_KTHREAD:
            found[int(entry)] = text[text.find("(") + 1 : text.rfind(")")]
    return found


def visible_kernel_threads() -> dict[int, str]:
    threads = kernel_threads()
    if not threads:
        reason = "no kernel thread is visible: this test runs in the host's PID namespace"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return threads


# A process of a nested PID namespace (a container, or the test parts running beside this
# one) may have the same number there: then that ambiguity is said first, as unknown.
TWIN = "a process in a nested PID namespace"


def assert_not_named(path: Path, pid: int, lock_format: str, because: str) -> None:
    finding = inspect_lock(path, lock_format)
    assert finding.holder is None, f"{finding.holder} named for a record naming PID {pid}"
    assert finding.state is State.UNKNOWN, finding.reason
    assert finding.unknown_cause is UnknownCause.OTHER_PID_NAMESPACE
    assert because in finding.reason or TWIN in finding.reason, finding.reason


def test_a_pidfile_naming_a_kernel_thread_names_no_holder(tmp_path: Path) -> None:
    threads = visible_kernel_threads()
    seed = random.randrange(1 << 32)
    picked = random.Random(seed).sample(sorted(threads), min(6, len(threads)))
    for pid in picked:
        pidfile = tmp_path / f"app-{pid}.pid"
        pidfile.write_text(f"{pid}\n")
        try:
            assert_not_named(pidfile, pid, "pidfile", "kernel thread")
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, PID {pid} ({threads[pid]}): {error}") from error


def borg_env(base: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BORG_BASE_DIR": str(base),
        "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
    }


def test_a_borg_lock_left_by_a_pid_namespace_never_names_the_kernel_thread(
    tmp_path: Path,
) -> None:
    """The real borg, run as PID 2 of a PID namespace of its own (sh is PID 1 there), records
    PID 2; on the host PID 2 is kthreadd. Neither while borg runs nor after the namespace is
    gone is kthreadd the holder."""
    borg = require_tool("borg")
    repository = tmp_path / "repo"
    env = borg_env(tmp_path)
    subprocess.run(
        [borg, "init", "--encryption=none", str(repository)],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert 2 in visible_kernel_threads(), "PID 2 of the host's namespace is kthreadd"
    inside = f"{borg} with-lock {repository} sleep 600 & wait"
    namespace = subprocess.Popen(
        [*pid_namespace_command(), "sh", "-c", inside],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    roster = repository / "lock.roster"
    try:
        assert wait_until(roster.exists, timeout=60)
        recorded = json.loads(roster.read_text())["exclusive"][0][1]
        assert recorded == 2, f"borg recorded PID {recorded}, not 2, in its namespace"
        assert_not_named(repository, 2, "borg", "nested PID namespace")  # borg runs there
    finally:
        namespace.kill()  # unshare --kill-child: the namespace's PID 1, and so all in it, end
        namespace.wait(timeout=30)
    assert wait_until(lambda: not _runs_in(repository), timeout=30)
    assert roster.exists()
    assert_not_named(repository, 2, "borg", "kernel thread")  # left: holder gone, unprovably


def _runs_in(repository: Path) -> bool:
    """Whether a process whose command line names the repository still runs."""
    needle = str(repository).encode()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if needle in cmdline.read():
                    return True
        except OSError:
            continue
    return False
