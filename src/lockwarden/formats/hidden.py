"""POSIX locks held from outside lockwarden's PID namespace, asked of the kernel itself.

In a PID namespace other than the host's (a container), /proc/locks leaves out a lock whose
owner's PID does not translate into the namespace, and no descriptor the namespace can read
carries a lock held from outside it: an SQLite writer in another container read `free`.

`fcntl(F_OFD_GETLK)` asks the kernel which lock would conflict with a lock on a byte range,
taking none. It answers for POSIX (fcntl/lockf) and OFD locks of every process, whatever its
namespace, with the owner's PID as this namespace sees it: 0 when it lives outside. OFD locks
show in /proc/locks in every namespace (as PID -1), so an answer with PID 0 is a lock
/proc/locks left out. The descriptor asked on is read-only and its open file description holds
no lock, so closing it drops nothing (ARCHITECTURE.md, "Never" 1).

flock(2) has no such question: a flock held from outside the namespace stays unseen
(docs/design.md, "Where /proc/locks leaves locks out"). A lock on a network file system held
by another client may be answered with PID 0 too: it is held from outside as well.

The answer is the claims phase's, taken before the run's capture: a lock released in between
reads held (`unknown`) for this run, never the other way round.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from collections.abc import Sequence

from lockwarden.model import ByteRange, InodeKey, KernelLock
from lockwarden.support.namespaces import proc_is_own_nested_namespace

# struct flock (flock64 where off_t is 32 bits): l_type, l_whence, l_start, l_len, l_pid, its
# end aligned as the C compiler aligns it (`0q`).
_FLOCK = struct.Struct("@hhqqi0q")
WHOLE_FILE: tuple[int, int | None] = (0, None)


def hidden_locks(
    files: Sequence[tuple[str, InodeKey]],
    writer_ranges: Sequence[ByteRange] = (),
    blocking_reads: Sequence[ByteRange] = (),
) -> tuple[KernelLock, ...]:
    """The POSIX locks on these files (path, and the key the claim read it as) that /proc/locks
    leaves out here: none in the host's PID namespace, where it leaves nothing out, and none
    asked where the /proc read is another namespace's than this process's. With
    `writer_ranges` (SQLite's), only WRITE locks on those ranges, and any lock on the ranges of
    `blocking_reads` (a rollback journal's SHARED); else any lock on the file. A file that
    cannot be opened (gone, replaced, no right) is not asked about."""
    if not files or not proc_is_own_nested_namespace():
        return ()
    found: list[KernelLock] = []
    for path, key in files:
        if not writer_ranges:
            found.extend(_ask(path, key, [WHOLE_FILE], exclusive_only=False))
            continue
        writes = _spans(writer_ranges, key)
        reads = _spans(blocking_reads, key)
        if writes:
            found.extend(_ask(path, key, writes, exclusive_only=True))
        if reads:
            found.extend(_ask(path, key, reads, exclusive_only=False))
    return tuple(dict.fromkeys(found))  # a WRITE lock on both kinds of range is asked twice


def _spans(ranges: Sequence[ByteRange], key: InodeKey) -> list[tuple[int, int | None]]:
    return [(span.start, span.end) for span in ranges if span.key == key]


MAX_QUESTIONS = 64
"""Questions asked of one range at most. The kernel answers with the first conflicting lock it
finds, which may be one /proc/locks lists (a reader here); the range on either side of it is
asked again, so a lock held from outside behind it is still found."""


def _ask(
    path: str, key: InodeKey, ranges: list[tuple[int, int | None]], exclusive_only: bool
) -> list[KernelLock]:
    descriptor = _open_regular(path, key)
    if descriptor is None:
        return []
    try:
        # A READ request conflicts only with WRITE locks; a WRITE request with any lock.
        request = fcntl.F_RDLCK if exclusive_only else fcntl.F_WRLCK
        return [
            lock
            for start, end in ranges
            for lock in _conflicts(descriptor, key, request, start, end)
        ]
    finally:
        os.close(descriptor)


def _open_regular(path: str, key: InodeKey) -> int | None:
    """A read-only descriptor on the file the claim read, or None. It is first opened with
    O_PATH, which opens nothing (a FIFO's writer is not woken, a device not touched), and only
    a regular file of the claim's inode is then opened for reading, through that descriptor,
    so no rename in between can put something else there. A symlink the path names is
    resolved first (the kernel format follows it, as the holder does)."""
    try:
        handle = os.open(os.path.realpath(path), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        status = os.fstat(handle)
        if (status.st_dev, status.st_ino) != key or not stat.S_ISREG(status.st_mode):
            return None
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        return os.open(f"/proc/self/fd/{handle}", flags)
    except OSError:
        return None
    finally:
        os.close(handle)


def _conflicts(
    descriptor: int, key: InodeKey, request: int, start: int, end: int | None
) -> list[KernelLock]:
    """The locks held from outside on start..end (None: to the end of any file)."""
    found: list[KernelLock] = []
    pending: list[tuple[int, int | None]] = [(start, end)]
    for _ in range(MAX_QUESTIONS):
        if not pending:
            break
        first, last = pending.pop()
        answer = _conflict(descriptor, request, first, last)
        if answer is None:
            continue
        kind, lock_start, lock_end, pid = answer
        if pid == 0:  # an owner with no PID here: a lock /proc/locks left out
            found.append(_hidden_lock(key, kind, lock_start, lock_end))
        if lock_start > first:
            pending.append((first, lock_start - 1))
        if lock_end is not None and (last is None or lock_end < last):
            pending.append((lock_end + 1, last))
    return found


def _conflict(
    descriptor: int, request: int, start: int, end: int | None
) -> tuple[int, int, int | None, int] | None:
    """The first lock the kernel finds in the way of `request` on start..end: its type, its
    range and its owner's PID as this namespace sees it (0: none here; -1: an OFD lock)."""
    length = 0 if end is None else end - start + 1
    asked = _FLOCK.pack(request, os.SEEK_SET, start, length, 0)
    try:
        answer = fcntl.fcntl(descriptor, fcntl.F_OFD_GETLK, asked)
    except OSError:  # a file system without POSIX locks
        return None
    kind, _whence, first, size, pid = _FLOCK.unpack(answer)
    if kind == fcntl.F_UNLCK:
        return None
    return kind, first, None if size == 0 else first + size - 1, pid


def _hidden_lock(key: InodeKey, kind: int, start: int, end: int | None) -> KernelLock:
    return KernelLock(
        number=0,
        kind="POSIX",
        mode="WRITE" if kind == fcntl.F_WRLCK else "READ",
        pid=0,
        key=key,
        start=start,
        end=end,
        waiting=False,
    )
