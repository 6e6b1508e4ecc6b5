"""Which container a process runs in, from cgroup paths as each runtime writes them, and the
action that stops a holder in one without stopping what it lives beside. (The live podman
case is tests/integration/test_podman_containers.py; these are the other runtimes' layouts, which no
runtime here can produce: docker's daemon, LXC and a registered nspawn machine.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import make_holder
from lockwarden.check.advice import advise_in_container
from lockwarden.model import Container
from lockwarden.procfs.containers import cgroup_path, container_of, runtime_of

# These layouts are no runtime's here: their directories are taken as made by their owners
# (made_by reads real ones: tests/security/test_authority.py).
MADE = lambda *_: True  # noqa: E731

ID = "61e6f1328a66ab62ba7c7742f27f5bc4c3e289009fa84ab02f944ce93c92280f"


@pytest.mark.parametrize(
    ("path", "found"),
    [
        (f"/libpod_parent/libpod-{ID}", ("podman", ID)),
        (f"/machine.slice/libpod-{ID}.scope/container", ("podman", ID)),
        (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope",
         ("podman", ID)),
        (f"/machine.slice/libpod-conmon-{ID}.scope", None),  # the monitor, outside it
        (f"/system.slice/docker-{ID}.scope", ("docker", ID)),
        (f"/docker/{ID}", ("docker", ID)),
        ("/machine.slice/systemd-nspawn@build\\x2dhost.service/payload/system.slice/job.service",
         ("systemd-nspawn", "build-host")),
        ("/machine.slice/machine-web1.scope/payload", ("systemd-nspawn", "web1")),
        ("/lxc.payload.db1/system.slice/cron.service", ("lxc", "db1")),
        # nspawn --keep-unit in a unit (or cgroup) of the caller's: named after it
        ("/system.slice/build-env.service/payload/system.slice/job.service",
         ("systemd-nspawn", "build-env")),
        ("/lockwarden-test-abc/payload/init.scope", ("systemd-nspawn", "lockwarden-test-abc")),
        ("/lxc/db1", ("lxc", "db1")),
        # any user names cgroups of her own delegated subtree, and of a service delegated
        # to her: only a rootless podman there is hers; never root's runtimes' (security)
        (f"/user.slice/user-1001.slice/user@1001.service/docker-{ID}.scope", None),
        ("/user.slice/user-1001.slice/user@1001.service/machine.slice/machine-db.scope", None),
        ("/user.slice/user-1001.slice/user@1001.service/x.slice/systemd-nspawn@db.service/payload",
         None),
        (f"/system.slice/delegated.service/docker-{ID}.scope", None),
        ("/system.slice/wa-resync.service", None),
        ("/user.slice/user-1000.slice/session-3.scope", None),
        ("/", None),
    ],
)  # fmt: skip
def test_each_runtimes_cgroup_names_its_container(path: str, found: tuple[str, str] | None) -> None:
    assert runtime_of(path) == found


def test_the_unified_hierarchy_wins_and_the_namespace_pid_tells_the_containers_own_job() -> None:
    cgroup = f"4:memory:/elsewhere\n1:name=systemd:/libpod_parent/libpod-{ID}\n0::/docker/{ID}\n"
    assert cgroup_path(cgroup) == f"/docker/{ID}"
    named = container_of(
        cgroup, "Name:\tflock\nNSpid:\t13678\t1\n", lambda *_: ("wa-sync", True), MADE
    )
    assert named == Container("docker", "wa-sync", ID, init=True)
    child = container_of(cgroup, "NSpid:\t13688\t6\n", lambda *_: ("wa-sync", True), MADE)
    assert child is not None and not child.init
    assert container_of("0::/system.slice/cron.service\n", "NSpid:\t9\n", print, MADE) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("container", "unit", "action"),
    [
        (Container("podman", "wa-sync", ID, init=True), None, "podman stop wa-sync"),
        # no runtime names a container so: a name from elsewhere reaches it by no command
        (Container("docker", "wa sync", ID, init=True), None, "kill 42 43"),
        (Container("docker", "-t9", ID, init=True), None, "kill 42 43"),
        (Container("systemd-nspawn", "web1", None, init=True), None, "machinectl stop web1"),
        (Container("lxc", "db1", None, init=True), None, "lxc-stop -n db1"),
        # Not the container's own job: its unit inside a systemd machine, else its PIDs;
        # never the host's unit of the container (that is the whole container).
        (Container("systemd-nspawn", "web1"), "job.service", "systemctl -M web1 stop job.service"),
        # an nspawn container systemd-machined does not know: no name reaches it
        (Container("systemd-nspawn", "web1", by_name=False), "job.service", "kill 42 43"),
        (Container("systemd-nspawn", "web1", init=True, by_name=False), None, "kill 42 43"),
        (Container("podman", "wa-sync", ID), "app.service", "kill 42 43"),
        (Container("docker", "wa-sync", ID), None, "kill 42 43"),
        # rootless, or a record root cannot read: root's runtime does not know the name
        (Container("podman", "mine", ID, init=True, by_name=False), None, "kill 42 43"),
    ],
)
def test_a_holder_in_a_container_is_stopped_without_what_it_lives_beside(
    container: Container, unit: str | None, action: str
) -> None:
    holder = make_holder(pid=42, unit=unit, container=container)
    sharer = make_holder(pid=43, container=container)
    assert advise_in_container(holder, container, (sharer,)) == action


@pytest.mark.parametrize("init", [True, False])
def test_a_database_server_in_a_container_is_shut_down_with_its_own_command(init: bool) -> None:
    """A format's safe action outranks the container's: a postgres holding the lock (its own
    job or not) is shut down with pg_ctl, never killed nor stopped with the container (whose
    runtime sends SIGKILL after its grace period)."""
    from lockwarden.check.advice import advise_holder

    container = Container("docker", "db", ID, init=init)
    holder = make_holder(pid=42, name="postgres", cmdline=("postgres", "-D", "/data"),
                         container=container)  # fmt: skip
    action = advise_holder(holder, (), "kernel")
    assert action.startswith("shut PID 42 (postgres, docker container db) down"), action
    assert "kill" not in action.split("(")[0] and "docker stop" not in action


def test_names_come_from_the_runtimes_records_and_a_rootless_one_is_not_reached_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """podman's own containers.json (root's store, and a user's for a rootless container):
    root's `podman stop NAME` reaches only root's; an ID in neither is named by its prefix."""
    from lockwarden.procfs import containers

    def store(where: Path, ident: str, name: str) -> str:
        records = where / "overlay-containers"
        records.mkdir(parents=True)
        (records / "containers.json").write_text(json.dumps([{"id": ident, "names": [name]}]))
        return str(where)

    other = "f" * 64
    monkeypatch.setattr(containers, "PODMAN_STORES", (store(tmp_path / "root", ID, "wa-sync"),))
    user = store(tmp_path / "home", other, "my-job")
    monkeypatch.setattr(containers, "_user_store", lambda uid: (user,) if uid == 1000 else ())
    names = containers.ContainerNames()
    assert names("podman", ID, 0) == ("wa-sync", True)
    assert names("podman", other, 1000) == ("my-job", False)
    assert names("podman", "e" * 64, 0) is None  # container_of names it by its prefix
    assert names("podman", ID, 1000) is None  # a user's ID is never looked up in root's store


def test_a_machine_scope_of_a_virtual_machine_is_no_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`machine-NAME.scope` is any machine systemd-machined registered: its record's CLASS
    tells a container from a virtual machine (libvirt's qemu, a host process holding its disk
    images' locks). Records written as machined writes them, in a directory of the test's."""
    from lockwarden.procfs import containers

    (tmp_path / "qemu-1-vm").write_text("NAME=qemu-1-vm\nCLASS=vm\nSERVICE=libvirt-qemu\n")
    (tmp_path / "web1").write_text("NAME=web1\nCLASS=container\nSERVICE=systemd-nspawn\n")
    monkeypatch.setattr(containers, "MACHINES", str(tmp_path))
    status = "NSpid:\t4242\n"
    vm = "0::/machine.slice/machine-qemu\\x2d1\\x2dvm.scope/libvirt/emulator\n"
    assert container_of(vm, status, print, MADE) is None  # type: ignore[arg-type]
    web = container_of("0::/machine.slice/machine-web1.scope/payload\n", status, print, MADE)  # type: ignore[arg-type]
    assert web == Container("systemd-nspawn", "web1", None, init=False, by_name=True)
    gone = container_of("0::/machine.slice/machine-old.scope/payload\n", status, print, MADE)  # type: ignore[arg-type]
    assert gone is not None and not gone.by_name  # machined no longer knows it


def test_a_users_rootless_container_is_theirs_and_only_from_their_own_records() -> None:
    """In a user's delegated subtree only a rootless podman container is one, named from that
    user's own records (which they write) and described as theirs; an ID their records lack
    is no container of theirs by any name."""
    uid = 4000000  # no such user here: named by the number
    cgroup = f"0::/user.slice/user-{uid}.slice/user@{uid}.service/user.slice/libpod-{ID}.scope\n"
    asked: list[int] = []

    def names(runtime: str, ident: str, owner: int) -> tuple[str, bool] | None:
        asked.append(owner)
        return ("prod-db", False) if owner == uid else None

    found = container_of(cgroup, "NSpid:\t7\t1\n", names, MADE)
    assert found == Container("podman", "prod-db", ID, True, by_name=False, owner=f"uid {uid}")
    assert found.describe() == f"uid {uid}'s podman container prod-db" and asked == [uid]
    assert container_of(cgroup, "NSpid:\t7\t1\n", lambda *_: None, MADE) is None
