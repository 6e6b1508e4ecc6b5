"""An Emacs file lock: `.#FILE -> USER@HOST.PID[:BOOT]` beside a file being edited.

Emacs (filelock.c) makes it with symlink() (a regular file with the same text where symlinks
are unsupported) when a buffer visiting FILE is first modified. USER is everything before the
last `@`, HOST runs to the last `.`, then the PID, then, when Emacs knows it, `:` and the boot
time in seconds since the epoch. Emacs treats the lock as its own to break when HOST is this
host and the PID is not running, or the boot time differs from this boot's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from datetime import UTC, datetime

from lockwarden.formats.base import STOP_HOLDER
from lockwarden.formats.symlink_lock import (
    LinkRecord,
    RecordProblem,
    claim_from_link,
    parse_pid,
    read_or_problem,
)
from lockwarden.model import Claim, PidProof

NAME = "emacs"
PREFIX = ".#"
MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT: what a PID can be on any host


class EmacsLock:
    name = NAME
    holder_action = STOP_HOLDER
    summary = "an Emacs file lock: .#FILE -> USER@HOST.PID[:BOOT]"
    layout = True
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        """A `.#NAME` symlink; a regular file only when it holds Emacs's text (other programs
        name lock files `.#NAME` too: systemd-nspawn's image locks, `.#root.lck`)."""
        if not os.path.basename(path).startswith(PREFIX):
            return False
        if stat.S_ISLNK(status.st_mode):
            return True
        if not stat.S_ISREG(status.st_mode):
            return False
        found = read_or_problem(NAME, path)
        if not isinstance(found, LinkRecord):
            return False
        try:
            _user, _host, pid_text, boot = parse_owner(found.text)
            parse_pid(pid_text, MAX_PID)
            _boot_time(boot)
        except RecordProblem:
            return False
        return True

    def read(self, path: str, pid_max: int) -> Claim:
        lock_path = lock_path_for(path)
        found = read_or_problem(NAME, lock_path)
        if isinstance(found, Claim):
            return found
        return _claim(lock_path, found, pid_max)


def lock_path_for(path: str) -> str:
    """The lock of an edited file is `.#NAME` beside it; a `.#NAME` path is the lock itself."""
    directory, name = os.path.split(path)
    return path if name.startswith(PREFIX) else os.path.join(directory, PREFIX + name)


def _claim(lock_path: str, record: LinkRecord, pid_max: int) -> Claim:
    base = claim_from_link(NAME, lock_path, record)
    try:
        user, host, pid_text, boot = parse_owner(record.text)
        pid = parse_pid(pid_text, pid_max)
        booted_at = _boot_time(boot)
    except RecordProblem as error:
        return replace(base, problem=f"{lock_path}: {error}", started_at=None)
    return replace(base, pid=pid, host=host, user=user, pid_proof=PidProof(booted_at=booted_at))


def parse_owner(text: str) -> tuple[str, str, str, str | None]:
    """`USER@HOST.PID[:BOOT]` -> (user, host, pid text, boot text or None), as Emacs splits it."""
    user, at, rest = text.rpartition("@")
    host, dot, pid_and_boot = rest.rpartition(".")
    if not at or not dot:
        raise RecordProblem(f"{text!r} is not USER@HOST.PID[:BOOT]")
    pid_text, colon, boot = pid_and_boot.partition(":")
    return user, host, pid_text, boot if colon else None


def _boot_time(boot: str | None) -> datetime | None:
    if boot is None:
        return None
    if not boot.isascii() or not boot.isdigit() or len(boot) > 12:
        raise RecordProblem(f"the boot time {boot[:20]!r} is not seconds since the epoch")
    seconds = int(boot)
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None
