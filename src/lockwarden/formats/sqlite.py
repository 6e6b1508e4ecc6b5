"""An SQLite database: POSIX byte-range locks on the database file (rollback journal) or on its
`-shm` file (WAL). Nothing is recorded; the kernel's lock table says who writes and who reads.

Rollback journal (src/os_unix.c): PENDING byte 1073741824, RESERVED 1073741825, SHARED range
1073741826..1073742335. A reader holds a READ lock on the SHARED range; a writer holds a WRITE
lock on RESERVED (`BEGIN IMMEDIATE`), then PENDING, then on the whole SHARED range (EXCLUSIVE).
WAL (src/wal.c): locks on `DB-shm` from byte 120; byte 120 is the write lock, 121 checkpoint,
122 recovery, 123..127 the read marks, 128 the "DMS" every connection holds READ.
Readers alone never block a writer's `BEGIN IMMEDIATE`, so they leave the database free for
writes; the finding lists them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import (
    KERNEL_ONLY,
    STOP_HOLDER,
    absent,
    key_of,
    lstat_or_none,
    one_name,
)
from lockwarden.formats.hidden import hidden_locks
from lockwarden.model import ByteRange, Claim, InodeKey, Staleness, StaleProof
from lockwarden.support.safe_read import UnsafeRecord, read_head

NAME = "sqlite"
HEADER = b"SQLite format 3\x00"
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
WAL_WRITE_LOCK = 120
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")
MISSING = (
    "no SQLite database is there, so nothing can lock it; a database is not removed when its "
    "writer is done: is the path right?"
)


def database_path(path: str) -> str:
    """`app.db-wal`, `app.db-shm` or `app.db-journal` given for `app.db`: the database."""
    for suffix in COMPANION_SUFFIXES:
        if path.endswith(suffix) and lstat_or_none(path[: -len(suffix)]) is not None:
            return path[: -len(suffix)]
    return path


def has_sqlite_header(path: str) -> bool:
    try:
        head, _ = read_head(path, len(HEADER))
    except (OSError, UnsafeRecord):
        return False
    return head == HEADER


def writer_ranges(database: InodeKey, shm: InodeKey | None) -> tuple[ByteRange, ...]:
    """Where a WRITE lock means a writer: RESERVED/PENDING, the SHARED range (EXCLUSIVE), and
    the WAL write lock on `-shm`."""
    ranges = [
        ByteRange(database, PENDING_BYTE, RESERVED_BYTE),
        ByteRange(database, SHARED_FIRST, SHARED_FIRST + SHARED_SIZE - 1),
    ]
    if shm is not None:
        ranges.append(ByteRange(shm, WAL_WRITE_LOCK, WAL_WRITE_LOCK))
    return tuple(ranges)


class SqliteDatabase:
    name = NAME
    holder_action = STOP_HOLDER
    summary = "an SQLite database (rollback journal or WAL): writers and readers by byte locks"
    layout = False
    directory = False
    never_removed = KERNEL_ONLY

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) and has_sqlite_header(database_path(path))

    def read(self, path: str, pid_max: int) -> Claim:
        path = database_path(path)
        status = lstat_or_none(path)
        if status is None:
            return replace(absent(NAME, path, existence_is_lock=False), note=MISSING)
        try:
            head, status = read_head(path, len(HEADER))
        except (OSError, UnsafeRecord) as error:
            return self._problem(path, f"cannot read the database header: {error}")
        if head and head != HEADER:
            return self._problem(path, f"{path} is not an SQLite 3 database (its header differs)")
        shm_status = _shm_status(path)
        shm = key_of(shm_status) if shm_status is not None else None
        database = key_of(status)
        ranges = writer_ranges(database, shm)
        files = [(path, database)] if shm is None else [(path, database), (path + "-shm", shm)]
        return Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=False,
            keys=(database,) if shm is None else (database, shm),
            writer_ranges=ranges,
            hidden_locks=hidden_locks(files, ranges),
            key_names=_shm_name(path, shm_status),
            stale=Staleness(StaleProof.NEVER),
            note="WAL mode (its -shm file exists)" if shm is not None else None,
        )

    def _problem(self, path: str, problem: str) -> Claim:
        return Claim(format=NAME, path=path, present=True, existence_is_lock=False, problem=problem)


def _shm_name(path: str, status: os.stat_result | None) -> tuple[tuple[InodeKey, str], ...]:
    """The `-shm` file's one name (Claim.key_names; the database's is named by its path)."""
    found = one_name(path + "-shm", status) if status is not None else None
    return (found,) if found is not None else ()


def _shm_status(path: str) -> os.stat_result | None:
    status = lstat_or_none(path + "-shm")
    if status is None or not stat.S_ISREG(status.st_mode):
        return None
    return status
