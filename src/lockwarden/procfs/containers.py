"""Which container a process runs in: the runtime and its name, from the process's cgroup.

Each runtime puts a container's processes in a cgroup of its own, named after it:

* podman: `libpod-ID` (`/machine.slice/libpod-ID.scope` under systemd, `/libpod_parent/libpod-ID`
  with cgroupfs); `libpod-conmon-ID` is its monitor, outside the container;
* docker: `docker-ID.scope` (systemd) or `/docker/ID` (cgroupfs);
* systemd-nspawn: `systemd-nspawn@NAME.service` or `machine-NAME.scope` (a registered
  machine; the name is systemd-escaped, `\\x2d` for `-`), or `UNIT/payload/...` (nspawn run
  with `--keep-unit` in a unit or cgroup of the caller's: named after that unit);
* LXC: `lxc.payload.NAME` (or `/lxc/NAME` before LXC 4).

A podman or docker ID is named from the runtime's own record when root can read it (podman's
`containers.json`, docker's `config.v2.json`), else by its first 12 characters. Whether the
process is the container's own job (its PID 1: stopping the container ends exactly it) comes
from the last PID of `NSpid:` in its status.

A cgroup's name is evidence only of who could make it there. Any user may name a cgroup of
their own delegated subtree (`user.slice/user-UID.slice/user@UID.service/...`, which systemd
hands to that user) `docker-ID.scope` after root's container, whose ID any `/proc/PID/cgroup`
shows. So a container is named only from a cgroup its runtime, running as the container's
owner, made where that runtime makes them (`placement_of`): root's containers directly below
systemd's slices (`machine.slice/libpod-ID.scope`, `system.slice/docker-ID.scope`,
`machine.slice/systemd-nspawn@NAME.service`, `machine.slice/machine-NAME.scope`) or the
runtimes' own top-level cgroups (`libpod_parent/libpod-ID`, `docker/ID`, `lxc.payload.NAME`,
`lxc/NAME`), or a unit of the system's with nspawn's `payload` below it; a user's only in
their own subtree, and only a rootless podman container that user's own store records (root's
`podman` does not reach it: it is stopped by its PIDs). Another runtime's name in a user's
subtree is no container. And the directory says who made it (`made_by`): its parent and the
directory itself belong to that owner, and no one else may write in the parent.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
from collections.abc import Callable
from typing import NamedTuple

from lockwarden.model import Container
from lockwarden.support.namespaces import nspid_levels

_HEX_ID = r"([0-9a-f]{64})"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("podman", re.compile(rf"^libpod-{_HEX_ID}(?:\.scope)?$")),
    ("docker", re.compile(rf"^docker-{_HEX_ID}\.scope$")),
    ("systemd-nspawn", re.compile(r"^systemd-nspawn@(.+)\.service$")),
    ("systemd-nspawn", re.compile(r"^machine-(.+)\.scope$")),
    ("lxc", re.compile(r"^lxc\.payload\.(.+)$")),
)
PODMAN_STORES = ("/var/lib/containers/storage",)
PODMAN_USER_STORE = ".local/share/containers/storage"
DOCKER_ROOT = "/var/lib/docker"
MACHINES = "/run/systemd/machines"
"""systemd-machined's record of each machine it knows (what `machinectl` can stop)."""


def cgroup_path(text: str) -> str:
    """The process's path in the unified hierarchy (else systemd's named one)."""
    return _chosen(text)[1]


def cgroup_hierarchy(text: str) -> str:
    """Where the hierarchy `cgroup_path` chose is mounted: the unified one at /sys/fs/cgroup
    (or /sys/fs/cgroup/unified on a hybrid host), systemd's named one at .../systemd."""
    if not _chosen(text)[0]:
        return os.path.join(CGROUP_MOUNT, "systemd")
    if os.path.exists(os.path.join(CGROUP_MOUNT, "cgroup.controllers")):
        return CGROUP_MOUNT
    return os.path.join(CGROUP_MOUNT, "unified")


CGROUP_MOUNT = "/sys/fs/cgroup"


def _chosen(text: str) -> tuple[bool, str]:
    """(unified, path): the unified hierarchy's line, else systemd's named one."""
    chosen = ""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            return True, path
        if controllers == "name=systemd":
            chosen = path
    return False, chosen


class Placement(NamedTuple):
    """Where a container's cgroup is, and so whose it can be."""

    runtime: str
    ident: str
    """The runtime's ID (podman, docker) or the container's name."""
    anchor: str
    """The container's own cgroup directory (`/machine.slice/libpod-ID.scope`)."""
    owner: int
    """The user that must have made it: root, or the user whose delegated subtree it is in."""
    nested: bool = False
    """Another runtime's cgroup is below it: the process runs in a container inside this
    one, and its PID 1 there is not this container's own job."""


def delegated_uid(parts: list[str]) -> int | None:
    """The UID whose delegated subtree the path is in: it starts
    `user.slice/user-UID.slice/user@UID.service` (systemd hands that unit's cgroup to UID)."""
    if len(parts) < 3 or parts[0] != "user.slice":
        return None
    slice_match = re.fullmatch(r"user-(\d+)\.slice", parts[1])
    if slice_match is None or parts[2] != f"user@{slice_match.group(1)}.service":
        return None
    return int(slice_match.group(1))


def runtime_of(path: str) -> tuple[str, str] | None:
    """(runtime, ID or name) of the container a cgroup path is placed as (placement_of)."""
    found = placement_of(path)
    return (found.runtime, found.ident) if found is not None else None


def placement_of(path: str) -> Placement | None:
    """The container a cgroup path places a process in, as the module's docstring says, or
    None: from a path, not yet the directories (made_by)."""
    parts = [part for part in path.split("/") if part]
    uid = delegated_uid(parts)
    if uid is not None:
        return _rootless(parts, uid)
    for index, part in enumerate(parts):
        found = _system_container(parts, index)
        if found is not None:
            runtime, ident, end = found
            anchor = "/" + "/".join(parts[: end + 1])
            nested = any(_matched(below) for below in parts[end + 1 :])
            return Placement(runtime, ident, anchor, 0, nested)
        if not part.endswith(".slice"):
            return None  # below a cgroup that is not systemd's slice: not where runtimes are
    return None


def _system_container(parts: list[str], index: int) -> tuple[str, str, int] | None:
    """(runtime, ident, index of its directory) of a root container whose cgroup is at
    `parts[index]`, every cgroup above it one of systemd's slices (root's)."""
    part = parts[index]
    following = parts[index + 1] if index + 1 < len(parts) else None
    matched = _matched(part)
    if matched is not None:
        return (*matched, index)
    if following is None:
        return None
    if index == 0 and part == "libpod_parent":
        podman = _PATTERNS[0][1].match(following)
        return ("podman", podman.group(1), 1) if podman else None
    if index == 0 and part == "docker" and re.fullmatch(_HEX_ID, following):
        return "docker", following, 1
    if index == 0 and part == "lxc":
        return "lxc", following, 1
    if following == "payload" and re.search(r"\.(service|scope)$", part):
        return "systemd-nspawn", _unescape(re.sub(r"\.(service|scope)$", "", part)), index
    if following == "payload" and index == 0:  # nspawn --keep-unit in a cgroup of root's
        return "systemd-nspawn", _unescape(part), index
    return None


def _rootless(parts: list[str], uid: int) -> Placement | None:
    """A container in UID's delegated subtree: only a rootless podman one (the innermost)."""
    for index in range(len(parts) - 1, 2, -1):
        podman = _PATTERNS[0][1].match(parts[index])
        if podman is not None:
            nested = any(_matched(below) for below in parts[index + 1 :])
            anchor = "/" + "/".join(parts[: index + 1])
            return Placement("podman", podman.group(1), anchor, uid, nested)
    return None


def made_by(hierarchy: str, placement: Placement) -> bool:
    """Whether the container's cgroup directory was made by its owner (made_by_owner; LXC
    hands an unprivileged container's own directory to the container's root: its parent
    alone decides)."""
    own = placement.runtime != "lxc"
    return made_by_owner(hierarchy, placement.anchor, placement.owner, own)


def made_by_owner(hierarchy: str, path: str, owner: int, own: bool = True) -> bool:
    """Whether the cgroup directory `path` (of the hierarchy mounted at `hierarchy`) was made
    by `owner`: its parent is the owner's and no one else may write there (who may make, or
    rename, an entry in a directory), and, with `own`, the directory itself is the owner's."""
    directory = os.path.join(hierarchy, path.strip("/"))
    try:
        parent = os.stat(os.path.dirname(directory))
        status = os.stat(directory)
    except OSError:
        return False
    if parent.st_uid != owner or stat.S_IMODE(parent.st_mode) & 0o022:
        return False
    return not own or status.st_uid == owner


def _matched(part: str) -> tuple[str, str] | None:
    for runtime, pattern in _PATTERNS:
        match = pattern.match(part)
        if match:
            return runtime, _unescape(match.group(1))
    return None


def _unescape(name: str) -> str:
    """systemd's unit-name escaping (`\\x2d` is `-`)."""
    return re.sub(r"\\x([0-9a-f]{2})", lambda match: chr(int(match.group(1), 16)), name)


def container_of(
    cgroup_text: str,
    status_text: str,
    names: Callable[[str, str, int], tuple[str, bool] | None],
    made: Callable[[str, Placement], bool] = made_by,
) -> Container | None:
    """The container of a process from its cgroup and status files; `names` gives a runtime's
    name for an ID in its owner's records, and whether root's runtime knows it by that name
    (ContainerNames); `made`: whether its cgroup was made by its owner (made_by, given the
    hierarchy's mount)."""
    placement = placement_of(cgroup_path(cgroup_text))
    if placement is None or not made(cgroup_hierarchy(cgroup_text), placement):
        return None
    runtime, ident = placement.runtime, placement.ident
    init = _namespace_pid(status_text) == 1 and not placement.nested
    if runtime in ("podman", "docker"):
        named = names(runtime, ident, placement.owner)
        if named is None and placement.owner != 0:
            return None  # not in the user's own records: not their container by any name
        name, by_name = named if named is not None else (ident[:12], False)
        owner = _user_name(placement.owner) if placement.owner != 0 else None
        return Container(runtime, name, ident, init, by_name=by_name, owner=owner)
    if runtime == "systemd-nspawn":
        record = _machine_record(ident)
        if record.get("CLASS") == "vm":
            return None  # a virtual machine's process (libvirt's qemu) is a host process
        return Container(runtime, ident, None, init, by_name=bool(record))
    return Container(runtime, ident, None, init)


def _machine_record(name: str) -> dict[str, str]:
    """systemd-machined's record of a machine (`CLASS=container`, `SERVICE=...`); empty when
    machined does not know it."""
    try:
        with open(os.path.join(MACHINES, name)) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _namespace_pid(status_text: str) -> int | None:
    """The PID in the innermost PID namespace (`NSpid:`'s last field)."""
    levels = nspid_levels(status_text)
    return levels[-1] if levels else None


class ContainerNames:
    """The runtimes' names for container IDs, read once per run from their own records."""

    def __init__(self) -> None:
        self._podman: dict[str, dict[str, str]] = {}

    def __call__(self, runtime: str, ident: str, owner: int) -> tuple[str, bool] | None:
        """Its name in the records of `owner`'s runtime, and whether root's `podman` or
        `docker` reaches it by that name (a rootless container is its user's: root's runtime
        does not know it); None when those records have no such ID (or root cannot read
        them). A user's ID is never looked up in root's records, nor root's in a user's."""
        if runtime == "podman":
            return self._podman_name(ident, owner)
        name = self._docker_name(ident) if owner == 0 else None
        return (name, True) if name else None

    def _podman_name(self, ident: str, owner: int) -> tuple[str, bool] | None:
        for store in PODMAN_STORES if owner == 0 else _user_store(owner):
            if store not in self._podman:
                self._podman[store] = _podman_records(store)
            if ident in self._podman[store]:
                return self._podman[store][ident], store in PODMAN_STORES
        return None

    @staticmethod
    def _docker_name(ident: str) -> str | None:
        try:
            with open(os.path.join(DOCKER_ROOT, "containers", ident, "config.v2.json")) as handle:
                name = json.load(handle).get("Name")
        except (OSError, ValueError, AttributeError):
            return None
        return name.lstrip("/") if isinstance(name, str) and name.strip("/") else None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _user_store(uid: int) -> tuple[str, ...]:
    """A rootless podman's store, under the process owner's home."""
    if uid == 0:
        return ()
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return ()
    return (os.path.join(home, PODMAN_USER_STORE),)


def _podman_records(store: str) -> dict[str, str]:
    path = os.path.join(store, "overlay-containers", "containers.json")
    try:
        with open(path) as handle:
            records = json.load(handle)
    except (OSError, ValueError):
        return {}
    found = {}
    for record in records if isinstance(records, list) else ():
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            names = record.get("names") or []
            if names and isinstance(names[0], str):
                found[record["id"]] = names[0]
    return found
