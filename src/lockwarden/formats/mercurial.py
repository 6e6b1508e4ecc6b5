"""A Mercurial repository's locks: `.hg/wlock` (working copy) and `.hg/store/lock` (store).

Mercurial makes each with `symlink("HOST[/PIDNS]:PID", path)` (a regular file holding the same
text where symlinks are unsupported). On Linux, PIDNS is the inode number of the holder's
`/proc/self/ns/pid`, in lowercase hex (`mercurial/lock.py`, `_getlockprefix`: `b'/%x' %
os.stat(b'/proc/self/ns/pid').st_ino`) — the same number `readlink /proc/self/ns/pid` prints in
decimal. Mercurial breaks a lock only when HOST[/PIDNS] equals its own and the PID is not
running; an old-style lock holding only a PID names no host and cannot be judged.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import replace

from lockwarden.formats.base import STOP_HOLDER, lstat_or_none
from lockwarden.formats.symlink_lock import (
    LinkRecord,
    RecordProblem,
    claim_from_link,
    parse_pid,
    read_or_problem,
)
from lockwarden.model import Claim

NAME = "mercurial"
LOCK_FILES = ("wlock", os.path.join("store", "lock"))


class Mercurial:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a Mercurial repository: .hg/wlock and .hg/store/lock -> HOST[/PIDNS]:PID"
    layout = True
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISDIR(status.st_mode):
            return _hg_directory(path) is not None
        return _is_lock_path(path)

    def read(self, path: str, pid_max: int) -> Claim:
        candidates = _lock_paths(path)
        first_absent: Claim | None = None
        for lock_path in candidates:
            found = read_or_problem(NAME, lock_path)
            if isinstance(found, LinkRecord):
                return _claim(lock_path, found, pid_max)
            if found.present:
                return found
            first_absent = first_absent or found
        assert first_absent is not None
        return first_absent


def _hg_directory(path: str) -> str | None:
    """`.hg` itself, or the `.hg` of a repository's working directory."""
    if os.path.basename(path.rstrip("/")) == ".hg":
        return path
    inner = os.path.join(path, ".hg")
    status = lstat_or_none(inner)
    return inner if status is not None and stat.S_ISDIR(status.st_mode) else None


def _is_lock_path(path: str) -> bool:
    parent = os.path.dirname(path)
    name = os.path.basename(path)
    if name == "wlock":
        return os.path.basename(parent) == ".hg"
    return name == "lock" and parent.endswith(os.path.join(".hg", "store"))


def _lock_paths(path: str) -> list[str]:
    status = lstat_or_none(path)
    if status is None or not stat.S_ISDIR(status.st_mode):
        return [path]
    hg_directory = _hg_directory(path) or os.path.join(path, ".hg")
    return [os.path.join(hg_directory, name) for name in LOCK_FILES]


def _claim(lock_path: str, record: LinkRecord, pid_max: int) -> Claim:
    base = claim_from_link(NAME, lock_path, record)
    prefix, colon, pid_text = record.text.partition(":")
    try:
        if not colon:
            raise RecordProblem(
                f"{record.text!r} is an old-style lock naming no host; it cannot be judged"
            )
        host, namespace = _split_prefix(prefix)
        pid = parse_pid(pid_text, pid_max)
    except RecordProblem as error:
        return replace(base, problem=f"{lock_path}: {error}", started_at=None)
    return replace(
        base,
        pid=pid,
        host=host,
        pid_namespace=namespace,
        break_command=_break_command(lock_path),
    )


def _split_prefix(prefix: str) -> tuple[str, int | None]:
    host, slash, namespace_hex = prefix.rpartition("/")
    if not slash:
        return prefix, None
    try:
        return host, int(namespace_hex, 16)
    except ValueError:
        raise RecordProblem(f"{namespace_hex!r} is not a hex PID namespace id") from None


def _break_command(lock_path: str) -> str:
    """`hg debuglocks` frees both locks from the repository's root (it asks no questions)."""
    hg_directory = os.path.dirname(lock_path)
    if os.path.basename(hg_directory) == "store":
        hg_directory = os.path.dirname(hg_directory)
    root = os.path.dirname(hg_directory)
    return f"hg --cwd {shlex.quote(root)} debuglocks --force-free-wlock --force-free-lock"
