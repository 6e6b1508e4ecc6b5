"""The owner-record store lock: a `LOCK` directory made with mkdir (record inside) or a file.

A directory or a JSON / bare-PID file is an existence lock: while it exists, writers wait, and a
crash leaves it behind. A `key=value` file (`pid=N\\nacquired_at=...`) is the flock-held style:
the kernel lock is what counts and the file normally outlives its holder.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import (
    STOP_HOLDER,
    absent,
    claim_from_record_file,
    key_of,
    lstat_or_none,
    mtime_of,
    unreadable,
)
from lockwarden.formats.record import RecordProblem, parse_record
from lockwarden.model import Claim
from lockwarden.support.safe_read import UnsafeRecord, list_directory, read_record

NAME = "owner-record"
PREFERRED_RECORDS = ("owner.json", "owner", "record.json", "info", "info.json", "pid", "lock.json")


class OwnerRecord:
    name = NAME
    flock = True
    holder_action = STOP_HOLDER
    summary = "a LOCK directory (mkdir) or file holding JSON, key=value lines or a bare PID"
    layout = False
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISDIR(status.st_mode):
            return True
        if not stat.S_ISREG(status.st_mode) or status.st_size == 0:
            return False
        found = holds_a_record(path)
        return found is None or found  # content it cannot read: the reader will say what is wrong

    def read(self, path: str, pid_max: int) -> Claim:
        status = lstat_or_none(path)
        if status is None:
            return absent(NAME, path, existence_is_lock=True)
        if stat.S_ISDIR(status.st_mode):
            return self._read_directory(path, status, pid_max)
        if not stat.S_ISREG(status.st_mode):
            return unreadable(
                NAME,
                path,
                f"{path} is neither a lock directory nor a record file",
                existence_is_lock=True,
            )
        claim = claim_from_record_file(
            NAME,
            path,
            pid_max,
            existence_is_lock=True,
            keys=(key_of(status),),
            kernel_style=lambda record: record.style == "key-value",
        )
        return replace(claim, remove_path=path) if claim.existence_is_lock else claim

    def _read_directory(self, path: str, status: os.stat_result, pid_max: int) -> Claim:
        try:
            entries = list_directory(path)
        except (OSError, UnsafeRecord) as error:
            return Claim(
                format=NAME,
                path=path,
                present=True,
                existence_is_lock=True,
                keys=(key_of(status),),
                created_at=mtime_of(status),
                problem=f"{path}: cannot list the lock directory ({error})",
            )
        record_entry = pick_record(entries)
        if record_entry is None:
            return Claim(
                format=NAME,
                path=path,
                present=True,
                existence_is_lock=True,
                keys=(key_of(status),),
                created_at=mtime_of(status),
                remove_path=path,
                note="the lock directory holds no owner record",
            )
        claim = claim_from_record_file(
            NAME, record_entry.path, pid_max, existence_is_lock=True, keys=(key_of(status),)
        )
        if not claim.present:  # the holder let go between listing and reading
            return absent(NAME, path, existence_is_lock=True)
        return replace(claim, path=path, remove_path=path)


def pick_record(entries: list[os.DirEntry[str]]) -> os.DirEntry[str] | None:
    # Hidden names are half-written temporaries (`lockwarden hold` writes `.owner.json.tmp-PID`
    # and renames it into place): never read one as the record.
    files = [
        entry
        for entry in entries
        if entry.is_file(follow_symlinks=False) and not entry.name.startswith(".")
    ]
    by_name = {entry.name: entry for entry in files}
    for name in PREFERRED_RECORDS:
        if name in by_name:
            return by_name[name]
    return files[0] if files else None


def holds_a_record(path: str) -> bool | None:
    """Whether the file holds an owner record (a PID, or a JSON or key=value record); None when
    its content cannot be read as one at all (binary, too large, not safe to read)."""
    try:
        data, _ = read_record(path)
        record = parse_record(data, 2**31)
    except (OSError, UnsafeRecord, RecordProblem):
        return None
    return record.pid is not None or record.style in ("json", "key-value")
