"""Attacks 5 and 6 of the security issue: a local user who speaks with root's authority.

5. A reader pages on-call to stop a root service: a root daemon holds a lifetime flock on its
   0644 pidfile, and the attacker, who can only read the file, waits on it. A wait blocks a
   write only when the waiter could write: an exclusive request by a process whose credentials
   let it open the file for writing. Nobody is paged to stop the daemon on her behalf.
6. Root's container stopped on the attacker's word: a cgroup of her own delegated subtree
   named after root's container (`docker-ID.scope`, any /proc/PID/cgroup shows the ID), or
   after a machine, with her process as PID 1 of a namespace of her own. A holder is named a
   container or a system unit only from cgroups root made where the runtime (or systemd) makes
   them; in her subtree it is hers.

Everything is real: the attacker is the `lw-mallory` user, her waits are util-linux's `flock`,
her cgroups are directories of the host's cgroup v2 hierarchy that she owns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    FLOCK_HOLDER,
    Children,
    expected_code,
    proc_locks_pid,
    require_tool,
    run_cli,
    wait_until,
)
from integration.test_blocked_writers import config_for
from integration.test_why import WAITER, blocked_in_lock_call
from security.conftest import Cgroups, User


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user can reach (pytest's own is root's alone), removed after."""
    place = Path(tempfile.mkdtemp(prefix="lw-authority-"))
    place.chmod(0o755)
    try:
        yield place
    finally:
        shutil.rmtree(place, ignore_errors=True)


def runs_past_the_budget(config: str) -> tuple[int, dict[str, Any]]:
    """Runs of `--once` over twelve minutes (the budget is ten): the last one's report."""
    start = datetime.now(UTC)
    for minute in (0, 1, 5, 9, 12):
        at = (start + timedelta(minutes=minute)).isoformat()
        completed = run_cli("--once", "--json", "--config", config, "--now", at)
        assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def blocked_on(document: dict[str, Any], root: Path) -> dict[str, dict[str, Any]]:
    return {
        lock["path"]: lock
        for lock in document["locks"]
        if lock["name"].startswith("blocked:") and Path(lock["path"]).is_relative_to(root)
    }


def roots_pidfile(shared: Path, children: Children) -> Path:
    """A root daemon's 0644 pidfile, flock-held by it for its lifetime."""
    pidfile = shared / "daemon.pid"
    pidfile.write_text("4242\n")
    pidfile.chmod(0o644)
    children.python(FLOCK_HOLDER, str(pidfile))
    return pidfile


@pytest.mark.parametrize("mode", ["-s", "-x"])
def test_a_wait_by_a_user_who_cannot_write_the_file_pages_nobody(
    tmp_path: Path, shared: Path, children: Children, attacker: User, mode: str
) -> None:
    """mallory's `flock -s` (a reader's wait) and her `flock -x` (flock takes it through her
    read-only descriptor) on root's pidfile: no write is blocked, nothing pages."""
    flock = require_tool("flock")
    pidfile = roots_pidfile(shared, children)
    waiter = children.start(attacker.command(flock, mode, str(pidfile), "true"))
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    code, document = runs_past_the_budget(config_for(tmp_path))
    assert blocked_on(document, shared) == {}, document
    assert code == expected_code(0, document, shared), document
    assert "lwsec" not in json.dumps(document) and "stop it" not in json.dumps(document)


def test_a_root_writers_wait_on_the_daemons_lock_is_still_a_blocked_writer(
    tmp_path: Path, shared: Path, children: Children, attacker: User
) -> None:
    """The true positive stays: root's writer blocked behind the same lifetime lock pages,
    and the reader waiting beside it is not named among the writers."""
    flock = require_tool("flock")
    pidfile = roots_pidfile(shared, children)
    holder = children.procs[-1]
    reader = children.start(attacker.command(flock, "-s", str(pidfile), "true"))
    writer = children.python(WAITER, str(pidfile), "flock")
    for pid in (reader.pid, writer.pid):
        assert wait_until(lambda pid=pid: blocked_in_lock_call(pid), timeout=10)
    code, document = runs_past_the_budget(config_for(tmp_path))
    finding = blocked_on(document, shared)[str(pidfile)]
    assert finding["state"] == "held_too_long" and finding["severity"] == "warning", finding
    assert [w["pid"] for w in finding["waiters"]] == [writer.pid], finding
    assert [h["pid"] for h in finding["holders"]] == [holder.pid], finding
    assert code == expected_code(1, document, shared), document


def test_only_a_process_that_may_open_the_file_for_writing_is_a_writer() -> None:
    """The kernel's mode check, as lockwarden makes it from /proc/PID/status: the owner's bits
    for the owner, the group's for a member, the others' for the rest; CAP_DAC_OVERRIDE in
    lockwarden's own user namespace passes all (root may write), one in a user namespace of
    the process's own nothing."""
    from lockwarden.model import Credentials, FileMode
    from lockwarden.procfs.snapshot import credentials_of, may_open_for_writing, may_write

    roots = FileMode(0, 0, 0o644)
    mallory = Credentials(1001, 1001, frozenset({1001}), dac_override=False)
    assert not may_open_for_writing(mallory, roots)
    assert may_open_for_writing(mallory, FileMode(0, 1001, 0o664))  # her group may write
    assert may_open_for_writing(mallory._replace(groups=frozenset({27})), FileMode(0, 27, 0o664))
    assert not may_open_for_writing(mallory, FileMode(1001, 0, 0o466))  # the owner's bits
    assert may_open_for_writing(mallory, FileMode(0, 0, 0o646))
    status = "Uid:\t1001\t1001\t1001\t1001\nGid:\t1001\t1001\t1001\t1001\nGroups:\t1001 27\n"
    root_status = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\t000001ffffffffff\n"
    assert credentials_of(root_status, own_user_namespace=True) == Credentials(
        0, 0, frozenset(), True
    )
    in_her_namespace = credentials_of(status + "CapEff:\t000001ffffffffff\n", False)
    assert in_her_namespace is not None and not in_her_namespace.dac_override
    assert in_her_namespace.groups == frozenset({1001, 27})
    assert not may_write(in_her_namespace, roots, opened_for_writing=False)
    assert may_write(in_her_namespace, roots, opened_for_writing=True)
    assert credentials_of("Name:\tx\n", True) is None


# Root's container, as any /proc/PID/cgroup of it shows its ID.
ROOTS_ID = "5eed" * 16


def her_subtree(cgroups: Cgroups, attacker: User) -> str:
    """`user.slice/user-UID.slice/user@UID.service`, systemd's delegation to the attacker: the
    slices root's, the service's directory (and all below it) hers."""
    cgroups.make(f"user.slice/user-{attacker.uid}.slice")
    delegated = f"user.slice/user-{attacker.uid}.slice/user@{attacker.uid}.service"
    cgroups.make(delegated, owner=attacker)
    return delegated


def her_init_holding(
    children: Children, cgroups: Cgroups, cgroup: Path, attacker: User | None, lock: Path
) -> int:
    """The attacker's `flock` as PID 1 of a user and PID namespace of her own (`attacker`
    None: root's, in a PID namespace of root's), in `cgroup`, holding `lock`: its PID here."""
    unshare, flock = require_tool("unshare"), require_tool("flock")
    namespaces = ["-U", "-r", "-p"] if attacker is not None else ["-p"]
    inner = [unshare, *namespaces, "--fork", "--mount-proc", flock, "-o", "-x", str(lock)]
    argv = ["sh", "-c", 'read go && exec "$@"', "sh", *inner, "sleep", "120"]
    shell = children.start(
        attacker.command(*argv) if attacker is not None else argv, stdin=subprocess.PIPE
    )
    cgroups.move(shell.pid, cgroup)
    assert shell.stdin is not None
    shell.stdin.write("go\n")
    shell.stdin.flush()
    assert wait_until(lambda: proc_locks_pid(lock) not in (None, shell.pid), timeout=10)
    holder = proc_locks_pid(lock)
    assert holder is not None
    cgroups.members.append(children.track(holder))
    [levels] = [line for line in Path(f"/proc/{holder}/status").read_text().splitlines()
                if line.startswith("NSpid:")]  # fmt: skip
    assert levels.split()[-1] == "1"  # the container's own job, as it seems
    return holder


def her_lock(shared: Path, attacker: User) -> Path:
    place = shared / "mallory"
    place.mkdir()
    os.chown(place, attacker.uid, attacker.gid)
    lock = place / "job.lock"
    lock.touch()
    os.chown(lock, attacker.uid, attacker.gid)
    return lock


def judged(lock: Path) -> Any:
    """The finding of `lock` (a kernel lock held past a zero budget), judged in this process
    (the runtimes' records are the test's, monkeypatched in)."""
    from lockwarden.pipeline import inspect_path

    result = inspect_path(
        str(lock), datetime.now(UTC), lock_format="kernel", warn_after=0, critical_after=0
    )
    [finding] = result.findings
    return finding


def test_her_cgroup_named_after_roots_docker_container_does_not_stop_it(
    tmp_path: Path,
    shared: Path,
    children: Children,
    attacker: User,
    cgroups: Cgroups,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`docker-ID.scope` under her `user@UID.service`, ID root's prod-db's (whose record
    root's dockerd keeps, here in a docker root of the test's): her holder is no docker
    container, and nothing says `docker stop prod-db`."""
    from lockwarden.procfs import containers

    record = tmp_path / "docker" / "containers" / ROOTS_ID
    record.mkdir(parents=True)
    (record / "config.v2.json").write_text(json.dumps({"Name": "/prod-db"}))
    monkeypatch.setattr(containers, "DOCKER_ROOT", str(tmp_path / "docker"))
    fake = cgroups.make(f"{her_subtree(cgroups, attacker)}/docker-{ROOTS_ID}.scope", attacker)
    lock = her_lock(shared, attacker)
    holder = her_init_holding(children, cgroups, fake, attacker, lock)
    finding = judged(lock)
    assert [h.pid for h in finding.holders] == [holder], finding
    assert finding.holders[0].container is None, finding.holders[0]
    assert "docker" not in (finding.action or "") and "prod-db" not in finding.reason, finding
    assert (finding.action or "").startswith("kill ") and str(holder) in finding.action, finding


@pytest.mark.parametrize(
    "fake",
    [
        "machine.slice/systemd-nspawn@prod.service/payload",
        "machine.slice/machine-prod.scope",
    ],
)
def test_her_cgroup_named_after_a_machine_does_not_stop_it(
    tmp_path: Path,
    shared: Path,
    children: Children,
    attacker: User,
    cgroups: Cgroups,
    monkeypatch: pytest.MonkeyPatch,
    fake: str,
) -> None:
    """A `machine.slice`-looking path below her `user@UID.service`, named after machine
    `prod` that systemd-machined knows (its record the test's): no `machinectl stop prod`."""
    from lockwarden.procfs import containers

    (tmp_path / "prod").write_text("NAME=prod\nCLASS=container\nSERVICE=systemd-nspawn\n")
    monkeypatch.setattr(containers, "MACHINES", str(tmp_path))
    cgroup = cgroups.make(f"{her_subtree(cgroups, attacker)}/{fake}", attacker)
    lock = her_lock(shared, attacker)
    holder = her_init_holding(children, cgroups, cgroup, attacker, lock)
    finding = judged(lock)
    assert finding.holders[0].container is None, finding.holders[0]
    assert "machinectl" not in (finding.action or "") and "prod" not in finding.reason
    assert (finding.action or "").startswith("kill ") and str(holder) in finding.action, finding


def test_a_service_named_in_a_cgroup_she_made_is_never_a_system_unit(
    shared: Path, children: Children, attacker: User, cgroups: Cgroups
) -> None:
    """A service delegated to her (Delegate=, User=: its directory hers) and a `sshd.service`
    she made below it: never `systemctl stop sshd.service` as root."""
    cgroups.make("system.slice")
    cgroups.make("system.slice/lwsec-delegated.service", owner=attacker)
    cgroup = cgroups.make("system.slice/lwsec-delegated.service/sshd.service", owner=attacker)
    lock = her_lock(shared, attacker)
    holder = her_init_holding(children, cgroups, cgroup, attacker, lock)
    finding = judged(lock)
    assert finding.holders[0].unit is None, finding.holders[0]
    assert "systemctl" not in (finding.action or ""), finding.action
    assert (finding.action or "").startswith("kill ") and str(holder) in finding.action, finding


def test_roots_own_docker_container_and_her_own_user_unit_are_still_named(
    tmp_path: Path,
    shared: Path,
    children: Children,
    attacker: User,
    cgroups: Cgroups,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The true positives stay: root's PID 1 in root's `system.slice/docker-ID.scope` (made
    by root, as dockerd's systemd makes it) is prod-db's own job, stopped with `docker stop`;
    her process in a service of her own subtree is her user unit, stopped as her."""
    from lockwarden.procfs import containers

    record = tmp_path / "docker" / "containers" / ROOTS_ID
    record.mkdir(parents=True)
    (record / "config.v2.json").write_text(json.dumps({"Name": "/prod-db"}))
    monkeypatch.setattr(containers, "DOCKER_ROOT", str(tmp_path / "docker"))
    cgroups.make("system.slice")
    scope = cgroups.make(f"system.slice/docker-{ROOTS_ID}.scope")
    roots = shared / "prod-db.lock"
    roots.touch()
    her_init_holding(children, cgroups, scope, None, roots)
    assert judged(roots).action == "docker stop prod-db"

    service = cgroups.make(f"{her_subtree(cgroups, attacker)}/app.slice/sync.service", attacker)
    lock = her_lock(shared, attacker)
    holder = her_init_holding(children, cgroups, service, attacker, lock)
    finding = judged(lock)
    assert finding.holders[0].pid == holder and finding.holders[0].unit == "sync.service"
    assert finding.action == f"systemctl --user -M {attacker.name}@ stop sync.service"
