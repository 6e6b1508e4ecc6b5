"""An SQLite database: POSIX byte-range locks on the database file (rollback journal) or on its
`-shm` file (WAL). Nothing is recorded; the kernel's lock table says who writes and who reads.

Rollback journal (src/os_unix.c, https://www.sqlite.org/lockingv3.html): PENDING byte
1073741824, RESERVED 1073741825, SHARED range 1073741826..1073742335. A reader holds a READ lock
on the SHARED range (SHARED); a writer a WRITE lock on RESERVED (`BEGIN IMMEDIATE`, its first
write), then to commit one on PENDING and then on the whole SHARED range (EXCLUSIVE), which it
gets only once no other connection holds SHARED. So a reader in a transaction keeps every
writer from committing (the classic "database is locked"): it holds the lock against writers.
A writer that has PENDING but not EXCLUSIVE waits for those readers, retrying in its busy
handler (a sleep, not a wait the kernel sees): it is a waiter, and the readers are in its way.
WAL (src/wal.c): locks on `DB-shm` from byte 120; byte 120 is the write lock, 121 checkpoint,
122 recovery, 123..127 the read marks, 128 the "DMS" every connection holds READ; every
connection also holds SHARED on the database file. Readers never block a WAL writer, so they
leave the database free for writes; the finding lists them.

Which of the two a database uses is in its header (bytes 18 and 19, the file format's write
and read versions: 2 for WAL), and an `-shm` file beside it means a connection uses WAL: either
makes it WAL, whose readers are never named as holders.
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
from lockwarden.model import (
    ByteRange,
    Claim,
    InodeKey,
    LockName,
    RetryLock,
    Staleness,
    StaleProof,
)
from lockwarden.support.safe_read import UnsafeRecord, read_head

NAME = "sqlite"
HEADER = b"SQLite format 3\x00"
VERSIONS_AT = 18
"""The header's file format write and read versions: 1 for a rollback journal, 2 for WAL."""
WAL_VERSION = 2
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
WAL_WRITE_LOCK = 120
WAL_READ_MARKS = (123, 127)
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")
WAL_NOTE = "WAL mode: readers never block its writers"
ROLLBACK_NOTE = (
    "rollback journal: a reader in a transaction (SHARED) keeps every writer from committing"
)
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
    ranges = [pending_and_reserved(database), shared_range(database)]
    if shm is not None:
        ranges.append(ByteRange(shm, WAL_WRITE_LOCK, WAL_WRITE_LOCK))
    return tuple(ranges)


def pending_and_reserved(database: InodeKey) -> ByteRange:
    return ByteRange(database, PENDING_BYTE, RESERVED_BYTE)


def shared_range(database: InodeKey) -> ByteRange:
    return ByteRange(database, SHARED_FIRST, SHARED_FIRST + SHARED_SIZE - 1)


def lock_names(database: InodeKey, shm: InodeKey | None) -> tuple[LockName, ...]:
    """SQLite's names for its kernel locks, the one that says most first: a writer holds
    SHARED too, and a committing one every lock of the rollback journal."""
    names = [
        LockName(shared_range(database), "WRITE", "EXCLUSIVE"),
        LockName(ByteRange(database, PENDING_BYTE, PENDING_BYTE), "WRITE", "PENDING"),
        LockName(ByteRange(database, RESERVED_BYTE, RESERVED_BYTE), "WRITE", "RESERVED"),
    ]
    if shm is not None:
        names.append(LockName(ByteRange(shm, WAL_WRITE_LOCK, WAL_WRITE_LOCK), "WRITE", "WAL write"))
        names.append(LockName(ByteRange(shm, *WAL_READ_MARKS), "READ", "WAL read mark"))
    names.append(LockName(shared_range(database), "READ", "SHARED"))
    return tuple(names)


def commit_waits(database: InodeKey) -> RetryLock:
    """A rollback journal's writer with PENDING but not EXCLUSIVE waits for the other SHARED
    locks to go: its busy handler retries EXCLUSIVE until they have."""
    return RetryLock(ByteRange(database, PENDING_BYTE, PENDING_BYTE), shared_range(database))


def uses_wal(head: bytes, shm: InodeKey | None) -> bool:
    """Its header says WAL, or a connection keeps an `-shm` file beside it. A header too short
    to say (a database nothing has written yet) is a rollback journal's, as SQLite makes it."""
    versions = head[VERSIONS_AT : VERSIONS_AT + 2]
    return shm is not None or WAL_VERSION in versions


class SqliteDatabase:
    name = NAME
    flock = False
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
            head, status = read_head(path, VERSIONS_AT + 2)
        except (OSError, UnsafeRecord) as error:
            return self._problem(path, f"cannot read the database header: {error}")
        if head and head[: len(HEADER)] != HEADER:
            return self._problem(path, f"{path} is not an SQLite 3 database (its header differs)")
        shm_status = _shm_status(path)
        shm = key_of(shm_status) if shm_status is not None else None
        database = key_of(status)
        ranges = writer_ranges(database, shm)
        # A rollback journal's SHARED blocks every commit; a WAL reader blocks no writer.
        wal = uses_wal(head, shm)
        blocking_reads = () if wal else (shared_range(database),)
        files = [(path, database)] if shm is None else [(path, database), (path + "-shm", shm)]
        return Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=False,
            keys=(database,) if shm is None else (database, shm),
            writer_ranges=ranges,
            lock_names=lock_names(database, shm),
            blocking_reads=blocking_reads,
            retry_locks=() if wal else (commit_waits(database),),
            hidden_locks=hidden_locks(files, ranges, blocking_reads),
            key_names=_shm_name(path, shm_status),
            stale=Staleness(StaleProof.NEVER),
            note=WAL_NOTE if wal else ROLLBACK_NOTE,
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
