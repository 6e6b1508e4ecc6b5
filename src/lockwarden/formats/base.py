"""What every format shares: the Format protocol and the helpers that build a Claim."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from lockwarden.formats.record import EARLIEST, LATEST, OwnerRecord, RecordProblem, parse_record
from lockwarden.formats.trust import distrust_reason
from lockwarden.model import Claim, InodeKey
from lockwarden.support.safe_read import UnsafeRecord, read_record


class HolderAction(StrEnum):
    """What may safely be done to a live holder of a format's lock once it is past its budget."""

    STOP = "stop"  # its unit (`systemctl stop`), else SIGTERM: the holder's own way out
    SHUTDOWN = "shutdown"  # its unit, else its own shutdown command; never a signal
    WAIT = "wait"  # nothing: cut off mid-work, it leaves what the lock guards broken


@dataclass(frozen=True)
class SafeAction:
    """A format's declared safe action, and why (said in the advice; required unless STOP)."""

    kind: HolderAction
    why: str = ""


STOP_HOLDER = SafeAction(HolderAction.STOP)
KERNEL_ONLY = "only a kernel lock counts for it, and the kernel frees that when its holder exits"


class Format(Protocol):
    """A lock layout: recognises its files and reads them into a Claim, knowing no policy.
    Its facts are attributes of its class:

    * `holder_action`: what the advice may suggest for a live holder past its budget;
    * `layout`: it recognises a whole layout by its own names (a profile, a repository,
      `.#FILE`): a directory walk (`discover`) may trust its detect(), and `auto` consults it
      before treating a plain directory as a store whose lock is STORE/LOCK;
    * `directory`: its lock is found from a directory that is not itself a lock (a terraform
      working directory, a PostgreSQL data directory, a git work tree), tried before
      STORE/LOCK;
    * `never_removed`: why `remove_stale` may never remove its lock (None: a dead holder's
      leftover may be removed, with every guard of remove/removal.py);
    * `flock`: its lock may be a flock(2) on its file, which nothing shows from inside a PID
      namespace when its taker lives outside (a POSIX lock the kernel is asked about,
      formats/hidden.py; an existence lock is judged by its record).
    """

    name: str
    summary: str
    flock: bool
    holder_action: SafeAction
    layout: bool
    directory: bool
    never_removed: str | None

    def detect(self, path: str, status: os.stat_result) -> bool:
        """True when `path` (already lstat-ed) looks like this format; only cheap checks."""
        ...

    def read(self, path: str, pid_max: int) -> Claim:
        """What the lock's files say now. Never takes, changes or removes anything."""
        ...


def key_of(status: os.stat_result) -> InodeKey:
    return (status.st_dev, status.st_ino)


def mtime_of(status: os.stat_result) -> datetime | None:
    """The file's modification time; None when it is outside what a datetime can hold (anyone
    who owns a file can set its mtime to year 300 million)."""
    try:
        moment = datetime.fromtimestamp(status.st_mtime, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment if EARLIEST <= moment <= LATEST else None


def one_name(path: str, status: os.stat_result) -> tuple[InodeKey, str] | None:
    """The inode `path` was lstat-ed at (`status`) and its one name, when it has exactly one
    (Claim.key_names): a directory (never hard linked) or a regular file with a single link."""
    name = os.path.basename(path.rstrip("/"))
    if name in ("", ".", ".."):
        return None
    if stat.S_ISDIR(status.st_mode) or (stat.S_ISREG(status.st_mode) and status.st_nlink == 1):
        return key_of(status), name
    return None


def lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def absent(format_name: str, path: str, existence_is_lock: bool) -> Claim:
    return Claim(format=format_name, path=path, present=False, existence_is_lock=existence_is_lock)


def unreadable(
    format_name: str, path: str, problem: str, *, existence_is_lock: bool = True
) -> Claim:
    """A lock that is there but cannot be read as its format: `unknown`, with the reason."""
    return Claim(
        format=format_name,
        path=path,
        present=True,
        existence_is_lock=existence_is_lock,
        problem=problem,
    )


def claim_from_record_file(
    format_name: str,
    path: str,
    pid_max: int,
    *,
    existence_is_lock: bool,
    keys: tuple[InodeKey, ...],
    kernel_style: Callable[[OwnerRecord], bool] = lambda record: False,
) -> Claim:
    """Read a record file safely and turn it into a Claim; an unsafe one becomes a problem.

    `kernel_style(record)` says when, for this record, only a kernel lock counts.
    """
    try:
        data, status = read_record(path)
    except FileNotFoundError:
        return absent(format_name, path, existence_is_lock)
    except UnsafeRecord as error:
        return Claim(
            format=format_name,
            path=path,
            present=True,
            existence_is_lock=existence_is_lock,
            keys=keys,
            problem=str(error),
        )
    all_keys = keys if key_of(status) in keys else (*keys, key_of(status))
    try:
        record = parse_record(data, pid_max)
    except RecordProblem as error:
        return Claim(
            format=format_name,
            path=path,
            present=True,
            existence_is_lock=existence_is_lock,
            keys=all_keys,
            created_at=mtime_of(status),
            problem=f"{path}: {error}",
            record_path=path,
            owner_uid=status.st_uid,
        )
    claim = claim_from_record(
        format_name,
        path,
        record,
        existence_is_lock=existence_is_lock and not kernel_style(record),
        keys=all_keys,
        created_at=mtime_of(status),
        record_path=path,
        owner_uid=status.st_uid,
    )
    return replace(claim, distrust=distrust_reason(path, status))


def claim_from_record(
    format_name: str,
    path: str,
    record: OwnerRecord,
    *,
    existence_is_lock: bool,
    keys: tuple[InodeKey, ...],
    created_at: datetime | None,
    record_path: str | None,
    owner_uid: int | None,
) -> Claim:
    return Claim(
        format=format_name,
        path=path,
        present=True,
        existence_is_lock=existence_is_lock,
        keys=keys,
        pid=record.pid,
        role=record.role,
        host=record.host,
        user=record.user,
        started_at=record.started_at,
        started_at_naive=record.started_at_naive,
        start_ticks=record.start_ticks,
        boot_id=record.boot_id,
        pid_namespace=record.pid_namespace,
        max_hold_s=record.max_hold_s,
        created_at=created_at,
        extra=record.extra,
        record_path=record_path,
        owner_uid=owner_uid,
    )
