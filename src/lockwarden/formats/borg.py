"""A borg 1.x repository's lock: `lock.exclusive/` and `lock.roster`.

borg (locking.py) takes the exclusive lock by `mkdir lock.exclusive` and a file named
`HOSTID.PID-THREAD` inside (THREAD in hex), and lists every holder in `lock.roster`, JSON
`{"exclusive": [[HOSTID, PID, THREAD]], "shared": [[...], ...]}`; a shared holder releases the
directory and stays in the roster. HOSTID is `FQDN@NODE`, NODE being `uuid.getnode()` in
decimal, or whatever `BORG_HOST_ID` says. borg breaks a lock only when HOSTID is its own and the
PID is not running; a killed borg leaves both behind (`borg break-lock REPO` removes them).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from dataclasses import dataclass, replace
from datetime import datetime

from lockwarden.formats.base import STOP_HOLDER, key_of, lstat_or_none, mtime_of, unreadable
from lockwarden.formats.record import RecordProblem, parse_pid
from lockwarden.model import Claim, PidProof
from lockwarden.support.safe_read import UnsafeRecord, list_directory, read_record

NAME = "borg"
EXCLUSIVE = "lock.exclusive"
ROSTER = "lock.roster"
REPOSITORY_MARKERS = ("config", "data")


@dataclass(frozen=True)
class BorgHolder:
    """One holder borg's roster or lock.exclusive names: host id, PID, thread, shared or not."""

    host_id: str
    pid: int
    thread: int
    shared: bool


class BorgRepository:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a borg 1.x repository: lock.exclusive/HOSTID.PID-THREAD and lock.roster"
    layout = True
    directory = False
    never_removed = (
        "borg locks are broken with `borg break-lock`, which drops every lock of the repository "
        "(shared readers' roster entries too); lockwarden leaves that to a person"
    )

    def detect(self, path: str, status: os.stat_result) -> bool:
        if not stat.S_ISDIR(status.st_mode):
            return False
        if os.path.basename(path.rstrip("/")) == EXCLUSIVE:
            return True
        if any(lstat_or_none(os.path.join(path, name)) for name in (EXCLUSIVE, ROSTER)):
            return True
        return _is_repository(path)

    def read(self, path: str, pid_max: int) -> Claim:
        repository = _repository_of(path)
        try:
            holders, taken_at, keys = _read_holders(repository, pid_max)
        except (RecordProblem, UnsafeRecord, OSError) as error:
            return unreadable(NAME, repository, f"{repository}: {error}", existence_is_lock=True)
        if not keys:
            return Claim(format=NAME, path=repository, present=False, existence_is_lock=True)
        return _claim(repository, holders, taken_at, keys)


def _is_repository(path: str) -> bool:
    """borg's README says so; `config` and `data/` are what borg itself needs."""
    return all(lstat_or_none(os.path.join(path, name)) for name in REPOSITORY_MARKERS) and (
        _readme_says_borg(path)
    )


def _readme_says_borg(path: str) -> bool:
    try:
        data, _ = read_record(os.path.join(path, "README"), limit=1024)
    except (OSError, UnsafeRecord):
        return False
    return b"Borg Backup repository" in data


def _repository_of(path: str) -> str:
    name = os.path.basename(path.rstrip("/"))
    return os.path.dirname(path.rstrip("/")) if name in (EXCLUSIVE, ROSTER) else path


def _read_holders(
    repository: str, pid_max: int
) -> tuple[list[BorgHolder], datetime | None, tuple[tuple[int, int], ...]]:
    """The roster's holders (else the exclusive directory's), when they were last written, and
    the inodes of what exists; every holder listed had started by that time."""
    exclusive_path = os.path.join(repository, EXCLUSIVE)
    roster_path = os.path.join(repository, ROSTER)
    exclusive_status = lstat_or_none(exclusive_path)
    roster = _read_roster(roster_path, pid_max)
    keys: list[tuple[int, int]] = []
    taken_at: datetime | None = None
    holders: list[BorgHolder] = []
    if roster is not None:
        holders, roster_status = roster
        taken_at = mtime_of(roster_status)
        if holders:
            keys.append(key_of(roster_status))
    if exclusive_status is not None and stat.S_ISDIR(exclusive_status.st_mode):
        keys.insert(0, key_of(exclusive_status))
        named = _read_exclusive_directory(exclusive_path, pid_max)
        if not holders and named:
            holders, taken_at = [named[0]], named[1]
        taken_at = taken_at or mtime_of(exclusive_status)
    return holders, taken_at, tuple(keys)


def _read_roster(path: str, pid_max: int) -> tuple[list[BorgHolder], os.stat_result] | None:
    try:
        data, status = read_record(path)
    except FileNotFoundError:
        return None
    try:
        document = json.loads(data)
    except ValueError as error:
        raise RecordProblem(f"{ROSTER} is not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise RecordProblem(f"{ROSTER} is not a JSON object")
    holders = [
        _roster_entry(entry, kind == "shared", pid_max)
        for kind in ("exclusive", "shared")
        for entry in _entries(document.get(kind, []), kind)
    ]
    return holders, status


def _entries(value: object, kind: str) -> list[object]:
    if not isinstance(value, list):
        raise RecordProblem(f"{ROSTER}'s {kind!r} is not a list")
    return value


def _roster_entry(entry: object, shared: bool, pid_max: int) -> BorgHolder:
    if not isinstance(entry, list) or len(entry) != 3 or not isinstance(entry[0], str):
        raise RecordProblem(f"{ROSTER} entry {str(entry)[:60]!r} is not [HOSTID, PID, THREAD]")
    host_id, pid, thread = entry
    if type(thread) is not int:
        raise RecordProblem(f"{ROSTER} entry {str(entry)[:60]!r} has no integer thread")
    return BorgHolder(host_id, parse_pid(pid, pid_max), thread, shared)


def _read_exclusive_directory(path: str, pid_max: int) -> tuple[BorgHolder, datetime | None] | None:
    entries = [entry for entry in list_directory(path) if entry.is_file(follow_symlinks=False)]
    if not entries:
        return None
    entry = entries[0]
    return parse_lock_name(entry.name, pid_max), mtime_of(entry.stat(follow_symlinks=False))


def parse_lock_name(name: str, pid_max: int) -> BorgHolder:
    """`HOSTID.PID-THREAD`, split as borg splits it: the last `-`, then the last `.`."""
    host_and_pid, dash, thread_hex = name.rpartition("-")
    host_id, dot, pid_text = host_and_pid.rpartition(".")
    if not dash or not dot or not host_id:
        raise RecordProblem(f"{EXCLUSIVE}/{name} is not HOSTID.PID-THREAD")
    try:
        thread = int(thread_hex, 16)
    except ValueError:
        raise RecordProblem(f"{EXCLUSIVE}/{name} has no hex thread id") from None
    return BorgHolder(host_id, parse_pid(pid_text, pid_max), thread, shared=False)


def split_host_id(host_id: str) -> tuple[str, int | None]:
    """`FQDN@NODE` -> (FQDN, NODE); a custom BORG_HOST_ID is all host name."""
    host, at, node = host_id.rpartition("@")
    if at and host and node.isascii() and node.isdigit() and len(node) <= 20:
        return host, int(node)
    return host_id, None


def _claim(
    repository: str,
    holders: list[BorgHolder],
    taken_at: datetime | None,
    keys: tuple[tuple[int, int], ...],
) -> Claim:
    claim = Claim(
        format=NAME,
        path=repository,
        present=True,
        existence_is_lock=True,
        keys=keys,
        started_at=taken_at,
        created_at=taken_at,
        record_path=os.path.join(repository, ROSTER),
        break_command=f"borg break-lock {shlex.quote(repository)}",
    )
    if not holders:
        return claim
    host_ids = sorted({holder.host_id for holder in holders})
    threaded = [holder for holder in holders if holder.thread != 0]
    if len(host_ids) > 1 or threaded:
        problem = (
            f"{repository}: holders on several hosts ({', '.join(host_ids)})"
            if len(host_ids) > 1
            else f"{repository}: a holder names thread {threaded[0].thread}; borg itself "
            "never breaks such a lock (it writes thread 0)"
        )
        return Claim(
            format=NAME, path=repository, present=True, existence_is_lock=True, problem=problem
        )
    host, node = split_host_id(host_ids[0])
    return _with_holders(claim, holders, host, node)


def _with_holders(claim: Claim, holders: list[BorgHolder], host: str, node: int | None) -> Claim:
    first = holders[0]
    shared = [holder for holder in holders if holder.shared]
    role = "shared lock" if first.shared else "exclusive lock"
    note = f"{len(shared)} shared holders" if shared and len(holders) > 1 else None
    return replace(
        claim,
        pid=first.pid,
        host=host,
        pid_proof=PidProof(machine_id=node, others=tuple(holder.pid for holder in holders[1:])),
        role=role,
        note=note,
    )
