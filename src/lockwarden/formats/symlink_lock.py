"""What symlink locks share (Chromium, Mercurial, Emacs): the record is the link's target.

These programs make the lock with `symlink(record, path)` because that is atomic, and fall back
to an O_EXCL regular file holding the same text where symlinks are not supported. The target is
read with readlink and never followed; a regular file goes through the safe reader.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from lockwarden.formats.base import key_of, lstat_or_none, mtime_of
from lockwarden.formats.record import RecordProblem, parse_pid
from lockwarden.model import Claim
from lockwarden.support.safe_read import UnsafeRecord, describe_mode, read_link, read_record


@dataclass(frozen=True)
class LinkRecord:
    """The text a symlink lock holds, and the lstat of the link (its owner and creation time)."""

    text: str
    status: os.stat_result


def read_link_record(path: str) -> LinkRecord | None:
    """The lock's record text, or None when it is absent; raises UnsafeRecord otherwise."""
    status = lstat_or_none(path)
    if status is None:
        return None
    try:
        if stat.S_ISLNK(status.st_mode):
            text = read_link(path)
        elif stat.S_ISREG(status.st_mode):
            data, status = read_record(path, limit=4096)
            text = data.decode("utf-8", errors="replace").strip()
        else:
            raise UnsafeRecord(f"{path} is {describe_mode(status.st_mode)}, not a lock record")
    except FileNotFoundError:
        return None
    return LinkRecord(text, status)


def claim_from_link(format_name: str, path: str, record: LinkRecord) -> Claim:
    """A present symlink lock: existence is the lock, the link's mtime is when it was taken
    (its holder had started by then), and its owner must be the holder's user."""
    taken_at = mtime_of(record.status)
    return Claim(
        format=format_name,
        path=path,
        present=True,
        existence_is_lock=True,
        keys=(key_of(record.status),),
        started_at=taken_at,
        created_at=taken_at,
        record_path=path,
        owner_uid=record.status.st_uid,
        remove_path=path,
    )


def problem_claim(format_name: str, path: str, problem: str) -> Claim:
    return Claim(
        format=format_name, path=path, present=True, existence_is_lock=True, problem=problem
    )


def read_or_problem(format_name: str, path: str) -> LinkRecord | Claim:
    """The link's record, or the Claim to report when it is absent or unreadable."""
    try:
        record = read_link_record(path)
    except (UnsafeRecord, OSError) as error:
        return problem_claim(format_name, path, f"{path}: {error}")
    if record is None:
        return Claim(format=format_name, path=path, present=False, existence_is_lock=True)
    return record


__all__ = ["LinkRecord", "RecordProblem", "claim_from_link", "parse_pid", "read_or_problem"]
