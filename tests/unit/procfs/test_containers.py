"""Which container a process runs in, from cgroup paths as each runtime writes them, and the
action that stops a holder in one without stopping what it lives beside. (The live podman
case is tests/integration/test_podman_containers.py; these are the other runtimes' layouts, which no
runtime here can produce: docker's daemon, LXC and a registered nspawn machine.)"""

from __future__ import annotations

import pytest

from factories import make_holder
from lockwarden.check.advice import advise_in_container
from lockwarden.model import Container
from lockwarden.procfs.containers import cgroup_path, container_of, runtime_of

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
    named = container_of(cgroup, "Name:\tflock\nNSpid:\t13678\t1\n", 0, lambda *_: "wa-sync")
    assert named == Container("docker", "wa-sync", ID, init=True)
    child = container_of(cgroup, "NSpid:\t13688\t6\n", 0, lambda *_: "wa-sync")
    assert child is not None and not child.init
    assert container_of("0::/system.slice/cron.service\n", "NSpid:\t9\n", 0, print) is None


@pytest.mark.parametrize(
    ("container", "unit", "action"),
    [
        (Container("podman", "wa-sync", ID, init=True), None, "podman stop wa-sync"),
        (Container("docker", "wa sync", ID, init=True), None, "docker stop 'wa sync'"),
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
    ],
)
def test_a_holder_in_a_container_is_stopped_without_what_it_lives_beside(
    container: Container, unit: str | None, action: str
) -> None:
    holder = make_holder(pid=42, unit=unit, container=container)
    sharer = make_holder(pid=43, container=container)
    assert advise_in_container(holder, container, (sharer,)) == action
