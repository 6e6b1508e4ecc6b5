"""The only way lockwarden reads an untrusted file: a lock record someone else wrote.

A FIFO, a device, a hung mount or a huge file where a record should be must never stall or
bloat a run, and reading must never take or drop a lock (see ARCHITECTURE.md, "Never" 1 and 4):
`lstat` first, then `O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC`, `fstat` matching the `lstat`,
and a size cap. Only regular files are read. The descriptor is opened read-only and never locked;
closing it could drop this process's own POSIX locks on the file, and lockwarden holds none.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

RECORD_LIMIT = 64 * 1024
DIRECTORY_LIMIT = 256


class UnsafeRecord(Exception):
    """The file exists but is not something lockwarden will read; the message says why."""


def describe_mode(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_record(path: str, limit: int = RECORD_LIMIT) -> tuple[bytes, os.stat_result]:
    """Bytes of a regular file of at most `limit` bytes, and its stat.

    Raises FileNotFoundError when it is absent, UnsafeRecord for anything else unreadable.
    """
    before = _lstat(path)
    if stat.S_ISREG(before.st_mode) and before.st_size > limit:
        raise UnsafeRecord(f"{path} is {before.st_size} bytes, over the {limit}-byte record limit")
    data, after = _read_start(path, before, limit + 1)
    if len(data) > limit:
        raise UnsafeRecord(f"{path} grew past the {limit}-byte record limit while being read")
    return data, after


def read_head(path: str, size: int) -> tuple[bytes, os.stat_result]:
    """The first `size` bytes of a regular file of any length (a database's header), and its
    stat; the same guards as read_record, and never more than `size` bytes read."""
    return _read_start(path, _lstat(path), size)


def _read_start(path: str, before: os.stat_result, size: int) -> tuple[bytes, os.stat_result]:
    if not stat.S_ISREG(before.st_mode):
        raise UnsafeRecord(f"{path} is {describe_mode(before.st_mode)}, not a lock record")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        descriptor = os.open(path, flags)
    except PermissionError as error:
        raise UnsafeRecord(f"{path}: permission denied") from error
    except OSError as error:
        raise UnsafeRecord(f"{path}: {error.strerror}") from error
    try:
        after = os.fstat(descriptor)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise UnsafeRecord(f"{path} was replaced while being read")
        if not stat.S_ISREG(after.st_mode):
            raise UnsafeRecord(f"{path} is {describe_mode(after.st_mode)}, not a lock record")
        data = os.read(descriptor, size)
    finally:
        os.close(descriptor)
    return data, after


def _lstat(path: str) -> os.stat_result:
    """lstat, with every failure but absence turned into a reason (a path through a file,
    a symlink loop, a name too long, a NUL byte, a directory we may not search)."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise
    except NotADirectoryError as error:
        raise FileNotFoundError(error.errno, error.strerror, path) from error
    except OSError as error:
        raise UnsafeRecord(f"{path}: {error.strerror}") from error
    except ValueError as error:
        raise UnsafeRecord(f"{path!r} is not a usable path ({error})") from error


def read_pointer(path: str, prefix: str, limit: int = 4096) -> str | None:
    """The path a pointer file names after `prefix`, as written (git's `.git` file in a work
    tree whose git directory is elsewhere: `gitdir: PATH`); None when nothing is there, a
    directory is (a work tree's own `.git`), or the file says something else. A file that is
    there but cannot be read raises UnsafeRecord: what it points at is not known."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(status.st_mode):
        return None
    data, _ = read_record(path, limit)
    text = data.decode("utf-8", errors="replace").strip()
    if not text.startswith(prefix):
        return None
    return text.removeprefix(prefix).strip() or None


def read_link(path: str, limit: int = 4096) -> str:
    """Target of a symlink lock (Chromium, Mercurial, Emacs); never follows it."""
    target = os.readlink(path)
    if len(target) > limit:
        raise UnsafeRecord(f"{path} points to a {len(target)}-character target, over the limit")
    return target


def scan_directory(path: str, limit: int) -> Iterator[os.DirEntry[str]]:
    """The first `limit` entries of a directory, in the file system's order: a lock's
    directory may be anyone's, and a huge one must not cost a run its budget."""
    with os.scandir(path) as iterator:
        for number, entry in enumerate(iterator):
            if number >= limit:
                return
            yield entry


def list_directory(path: str, limit: int = DIRECTORY_LIMIT) -> list[os.DirEntry[str]]:
    """At most `limit` entries of a lock directory, sorted by name; more is refused."""
    entries = list(scan_directory(path, limit + 1))
    if len(entries) > limit:
        raise UnsafeRecord(f"{path} holds more than {limit} entries; not a lock directory")
    return sorted(entries, key=lambda entry: entry.name)


class NotAnArtefact(UnsafeRecord):
    """The path is neither a file, a directory nor a symlink: no lock's artefact."""


def artefact_kind(status: os.stat_result) -> str | None:
    """`file`, `directory` or `symlink`; None for anything else (a FIFO, a socket, a device)."""
    if stat.S_ISLNK(status.st_mode):
        return "symlink"
    if stat.S_ISREG(status.st_mode):
        return "file"
    if stat.S_ISDIR(status.st_mode):
        return "directory"
    return None


def read_artefact(path: str, record_path: str | None = None) -> tuple[str, bytes, os.stat_result]:
    """What a lock's artefact at `path` is now, to tell it from another one made at the same
    path (a file system hands a freed inode number to the next file at once): its kind, what it
    holds, and its stat. A file's bytes; a symlink's target; a directory's entries (name,
    inode, type, size, mtime) and, when `record_path` is inside it, that record's bytes.

    Raises FileNotFoundError when it (or that record) is gone, UnsafeRecord for anything else
    unreadable (NotAnArtefact for one that is none of the three kinds).
    """
    status = _lstat(path)
    kind = artefact_kind(status)
    if kind == "symlink":
        return kind, read_link(path).encode("utf-8", "surrogateescape"), status
    if kind == "file":
        content, status = read_record(path)
        return kind, content, status
    if kind is None:
        raise NotAnArtefact(f"{path} is {describe_mode(status.st_mode)}: not a lock's artefact")
    parts: list[bytes] = []
    for entry in list_directory(path):
        info = entry.stat(follow_symlinks=False)
        fields = f"{entry.name}\0{info.st_ino}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}"
        parts.append(fields.encode("utf-8", "surrogateescape"))
    if record_path and os.path.dirname(record_path) == path:
        parts.append(read_record(record_path)[0])
    return "directory", b"\n".join(parts), status
