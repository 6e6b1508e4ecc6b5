"""When may a record's word decide a verdict? Only when no one but its writer could have put it
there.

A record that names a PID can lead to `stale` (and an operator deleting the lock) or to `held`
(and an operator killing the named process). So before its PID is believed, the record file and
the way to it are checked; a record that fails is reported `unknown`, with this reason:

* the record file is writable by every user (anyone could have written any PID into it);
* its directory is writable by every user without the sticky bit (anyone could have replaced it);
* the path to it passes through a symbolic link that a non-root user owns inside a directory
  every user can write (that user can point the path at a record of their choosing).

Group write is trusted: a store's group is its writers. A record in a sticky world-writable
directory (`/tmp`) owned by another user is checked later, against the process it names
(classify.py: a live PID whose user is not the record's owner is `unknown`).
"""

from __future__ import annotations

import os
import stat

MAX_LINKS = 40


def distrust_reason(record_path: str, status: os.stat_result) -> str | None:
    """Why the record at `record_path` (already safely read, `status` its fstat) cannot be
    believed, or None when nothing but its owner (or root) could have written it."""
    if status.st_mode & stat.S_IWOTH:
        return (
            f"{record_path} is writable by every user (mode {stat.S_IMODE(status.st_mode):04o}), "
            "so anyone could have written the PID in it; lockwarden does not act on it"
        )
    directory = os.path.dirname(os.path.abspath(record_path))
    return _directory_problem(directory) or _symlink_problem(directory)


def _directory_problem(directory: str) -> str | None:
    try:
        status = os.stat(directory)
    except OSError as error:
        return f"{directory}: {error.strerror}; the record's directory cannot be checked"
    if _world_writable(status) and not status.st_mode & stat.S_ISVTX:
        return (
            f"{directory} is writable by every user and not sticky, so anyone could have "
            "replaced the record in it; lockwarden does not act on it"
        )
    return None


def _symlink_problem(directory: str) -> str | None:
    """Resolve the path one component at a time, following every link the kernel would; a
    link owned by a non-root user in a world-writable directory can be re-pointed."""
    pending = _parts(directory)
    current = "/"
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            status = os.lstat(candidate)
        except OSError:
            return None  # vanished or unreadable; reading the record will say so
        if not stat.S_ISLNK(status.st_mode):
            current = candidate
            continue
        hops += 1
        if hops > MAX_LINKS:
            return f"the path to the record passes through more than {MAX_LINKS} symbolic links"
        if status.st_uid != 0 and _world_writable_directory(current):
            return (
                f"the path to the record passes through the symbolic link {candidate}, which "
                f"uid {status.st_uid} owns in a directory every user can write, so it could "
                "point anywhere; lockwarden does not act on it"
            )
        target = os.readlink(candidate)
        current = "/" if target.startswith("/") else current
        pending = _parts(target) + pending
    return None


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def _world_writable_directory(path: str) -> bool:
    try:
        return _world_writable(os.stat(path))
    except OSError:
        return False


def _world_writable(status: os.stat_result) -> bool:
    return bool(status.st_mode & stat.S_IWOTH)
