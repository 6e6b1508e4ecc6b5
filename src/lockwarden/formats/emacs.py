"""An Emacs file lock: `.#FILE -> USER@HOST.PID[:BOOT]` beside a file being edited.

Emacs (filelock.c) makes it with symlink() (a regular file with the same text where symlinks
are unsupported) when a buffer visiting FILE is first modified. USER is everything before the
last `@`, HOST runs to the last `.`, then the PID, then, when Emacs knows it, `:` and the boot
time in seconds since the epoch. Emacs treats the lock as its own to break when HOST is this
host and the PID is not running, or the boot time differs from this boot's.

That boot time is Emacs's estimate, not the kernel's: Emacs 28 takes the mtime of
/var/run/random-seed when it exists, else utmp's boot record, so a touched file puts another
"boot" in every lock made after it, hours off. And like every wall-clock time it moves with a
stepped clock. lockwarden checks its form and does not use it: the PID decides (gone: stale; a
process that started after the lock was made: probably a reused PID, `unknown`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import STOP_HOLDER
from lockwarden.formats.symlink_lock import (
    LinkRecord,
    RecordProblem,
    claim_from_link,
    parse_pid,
    read_or_problem,
)
from lockwarden.model import Claim

NAME = "emacs"
PREFIX = ".#"
MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT: what a PID can be on any host


class EmacsLock:
    name = NAME
    flock = False
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
            _check_boot_time(boot)
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
        _check_boot_time(boot)  # its form only: see the module's docstring
    except RecordProblem as error:
        return replace(base, problem=f"{lock_path}: {error}", started_at=None)
    return replace(base, pid=pid, host=host, user=user)


def parse_owner(text: str) -> tuple[str, str, str, str | None]:
    """`USER@HOST.PID[:BOOT]` -> (user, host, pid text, boot text or None), as Emacs splits it."""
    user, at, rest = text.rpartition("@")
    host, dot, pid_and_boot = rest.rpartition(".")
    if not at or not dot:
        raise RecordProblem(f"{text!r} is not USER@HOST.PID[:BOOT]")
    pid_text, colon, boot = pid_and_boot.partition(":")
    return user, host, pid_text, boot if colon else None


def _check_boot_time(boot: str | None) -> None:
    if boot is not None and not (boot.isascii() and boot.isdigit() and len(boot) <= 12):
        raise RecordProblem(f"the boot time {boot[:20]!r} is not seconds since the epoch")
