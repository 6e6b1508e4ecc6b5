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
"""

from __future__ import annotations

import json
import os
import pwd
import re
from collections.abc import Callable

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
    chosen = ""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            return path
        if controllers == "name=systemd":
            chosen = path
    return chosen


def runtime_of(path: str) -> tuple[str, str] | None:
    """(runtime, ID or name) of the innermost container in a cgroup path, or None."""
    parts = [part for part in path.split("/") if part]
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        found = _matched(part)
        if found is not None:
            return found
        if part == "payload" and index > 0:  # nspawn: UNIT/payload/...
            unit = parts[index - 1]
            named = _matched(unit)
            return named or ("systemd-nspawn", _unescape(re.sub(r"\.(service|scope)$", "", unit)))
        if part in ("docker", "lxc") and index + 1 < len(parts):
            following = parts[index + 1]
            if part == "docker" and re.fullmatch(_HEX_ID, following):
                return "docker", following
            if part == "lxc":
                return "lxc", following
    return None


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
    uid: int,
    names: Callable[[str, str, int], tuple[str, bool]],
) -> Container | None:
    """The container of a process from its cgroup and status files; `names` gives a runtime's
    name for an ID, and whether root's runtime knows it by that name (ContainerNames)."""
    found = runtime_of(cgroup_path(cgroup_text))
    if found is None:
        return None
    runtime, ident = found
    init = _namespace_pid(status_text) == 1
    if runtime in ("podman", "docker"):
        name, by_name = names(runtime, ident, uid)
        return Container(runtime, name, ident, init, by_name=by_name)
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

    def __call__(self, runtime: str, ident: str, uid: int) -> tuple[str, bool]:
        """Its name, and whether root's `podman` or `docker` reaches it by that name: a
        rootless container is its user's (root's runtime does not know it), and one whose
        record root cannot read is named by its short ID only."""
        if runtime == "podman":
            found = self._podman_name(ident, uid)
        else:
            name = self._docker_name(ident)
            found = (name, True) if name else None
        return found if found is not None else (ident[:12], False)

    def _podman_name(self, ident: str, uid: int) -> tuple[str, bool] | None:
        for store in (*PODMAN_STORES, *_user_store(uid)):
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
