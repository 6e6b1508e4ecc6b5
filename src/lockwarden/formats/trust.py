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
from dataclasses import dataclass, field

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


# Reaching a lock through a path no one else controls (removal, and the printed command).
#
# A removal acts as root on what it finds at the lock's path, so the path must lead where it
# led when the lock was judged, and nobody but root and the lock's owner may be able to
# change where it leads. The walk opens every component from `/` down, relative to the
# directory before it, with O_PATH|O_DIRECTORY|O_NOFOLLOW: nothing is resolved by name, and a
# directory swapped for a symlink after its check is never followed. The rule, for each
# directory D from `/` down to the lock's own directory, and E the entry in D the walk takes
# next (a directory, a symlink, or at the end the lock itself); U is the lock's owner:
#
# * D is a real directory, owned by root or by U;
# * D is writable by nobody but its owner (no group or other write bit), or it is sticky
#   (/tmp, /run/lock) and E is owned by root or by U: in a sticky directory nobody else may
#   rename or remove E, they can only add names of their own;
# * a symlink on the way is followed only when root owns it and its directory is root's and
#   writable by root alone (or sticky): /var/lock -> /run/lock. A symlink anyone else owns is
#   refused: configure the path it leads to.
#
# Under this rule, whatever the lock's owner does to the path, what root removes is the
# owner's own: U can swap the directories that are U's, but the walk never follows what U
# made, and nothing U can reach is anyone else's.

WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class PathRefused(Exception):
    """The lock cannot be reached through a path only root and its owner control; says why."""


@dataclass(frozen=True)
class Step:
    """One directory the walk went through, and the entry in it it took next."""

    directory: str
    status: os.stat_result
    entry: str
    entry_status: os.stat_result


@dataclass
class Reached:
    """The lock's directory, held open (`parent`, an O_PATH descriptor), the lock's name in it
    and its lstat, and the directories walked through on the way (first `/`)."""

    parent: int
    name: str
    status: os.stat_result
    steps: list[Step] = field(default_factory=list)

    @property
    def directory(self) -> str:
        return self.steps[-1].directory

    @property
    def path(self) -> str:
        """The lock's path as walked: every root's symlink on the way resolved."""
        return os.path.join(self.directory, self.name)

    def close(self) -> None:
        os.close(self.parent)

    def __enter__(self) -> Reached:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def reach(path: str) -> Reached:
    """Walk to the lock at `path` (absolute) one component at a time, never following a
    symlink anyone but root made; raise FileNotFoundError when it (or a directory on the way)
    is absent, PathRefused for a path that cannot be walked safely. The caller closes it."""
    if not path.startswith("/"):
        raise PathRefused(f"{path} is not an absolute path")
    parts = _parts(path)
    if not parts:
        raise PathRefused("/ is no lock")
    name = parts.pop()
    if name == "..":
        raise PathRefused(f"{path} ends in ..")
    walk = _Walk()
    try:
        walk.go(parts)
        status = _lstat_at(walk.fd, name, walk.where)
        walk.steps.append(Step(walk.where, walk.status, name, status))
        reached = Reached(walk.fd, name, status, walk.steps)
    except BaseException:
        walk.close()
        raise
    walk.fds.remove(walk.fd)
    walk.close()
    return reached


class _Walk:
    """The directories open on the way down (a `..` goes back up this stack, never through
    a name), the current one last."""

    def __init__(self) -> None:
        self.fds = [os.open("/", WALK_FLAGS)]
        self.stack: list[tuple[int, str, os.stat_result]] = [
            (self.fds[0], "/", os.fstat(self.fds[0]))
        ]
        self.steps: list[Step] = []
        self.links = 0

    @property
    def fd(self) -> int:
        return self.fds[-1]

    @property
    def where(self) -> str:
        return self.stack[-1][1]

    @property
    def status(self) -> os.stat_result:
        return self.stack[-1][2]

    def go(self, parts: list[str]) -> None:
        pending = list(parts)
        while pending:
            part = pending.pop(0)
            if part == "..":
                self.up()
                continue
            entry = _lstat_at(self.fd, part, self.where)
            if stat.S_ISLNK(entry.st_mode):
                pending = self.follow(part, entry) + pending
                continue
            self.steps.append(Step(self.where, self.status, part, entry))
            self.down(part, entry)

    def up(self) -> None:
        if len(self.fds) > 1:
            os.close(self.fds.pop())
            self.stack.pop()
            self.steps.pop()

    def down(self, part: str, entry: os.stat_result) -> None:
        where = os.path.join(self.where, part)
        if not stat.S_ISDIR(entry.st_mode):
            raise PathRefused(f"{where} is not a directory")
        try:
            descriptor = os.open(part, WALK_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise PathRefused(f"cannot open {where}: {error.strerror}") from None
        self.fds.append(descriptor)
        opened = os.fstat(descriptor)
        if (opened.st_dev, opened.st_ino) != (entry.st_dev, entry.st_ino):
            raise PathRefused(f"{where} was replaced while it was walked")
        self.stack.append((descriptor, where, opened))

    def follow(self, part: str, link: os.stat_result) -> list[str]:
        """The components a root's symlink leads to (an absolute one from `/` again)."""
        where = os.path.join(self.where, part)
        self.links += 1
        if self.links > MAX_LINKS:
            raise PathRefused(f"the path passes through more than {MAX_LINKS} symbolic links")
        if link.st_uid != 0:
            raise PathRefused(
                f"the path passes through the symbolic link {where}, which uid {link.st_uid} "
                "owns and may point anywhere (configure the path it leads to)"
            )
        problem = _changeable(self.where, self.status, link, owner=0)
        if problem is not None:
            raise PathRefused(f"the path passes through the symbolic link {where}: {problem}")
        target = os.readlink(part, dir_fd=self.fd)
        if target.startswith("/"):
            while len(self.fds) > 1:
                self.up()
        return _parts(target)

    def close(self) -> None:
        for descriptor in self.fds:
            os.close(descriptor)
        self.fds.clear()


def _lstat_at(directory: int, name: str, where: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise PathRefused(f"cannot look at {os.path.join(where, name)}: {error.strerror}") from None


def control_problem(reached: Reached) -> str | None:
    """Why someone other than root and the lock's owner could change what the path to it
    leads to (the rule above), or None."""
    owner = reached.status.st_uid
    for step in reached.steps:
        problem = _changeable(step.directory, step.status, step.entry_status, owner)
        if problem is not None:
            return problem
    return None


def root_only(reached: Reached) -> bool:
    """Whether only root can change any directory on the way to the lock (the lock itself may
    be anyone's): then a command run as root through its path goes where the walk went."""
    return all(
        _changeable(step.directory, step.status, step.entry_status, owner=0, last=index == 0)
        is None
        for index, step in enumerate(reversed(reached.steps))
    )


def _changeable(
    directory: str, status: os.stat_result, entry: os.stat_result, owner: int, last: bool = False
) -> str | None:
    """Why `directory` lets someone other than root and `owner` change `entry` in it, or None.
    `last`: the entry is the lock itself, whose own owner does not matter."""
    if status.st_uid not in (0, owner):
        return (
            f"{directory} belongs to uid {status.st_uid}, who is neither root nor the lock's "
            f"owner (uid {owner}) and could swap what lies below it"
        )
    if not status.st_mode & OTHERS_WRITE:
        return None
    mode = f"mode {stat.S_IMODE(status.st_mode):04o}"
    if not status.st_mode & stat.S_ISVTX:
        return (
            f"{directory} is writable by others than its owner ({mode}) and not sticky, so "
            "they could swap what lies below it"
        )
    if last or entry.st_uid in (0, owner):
        return None
    return (
        f"{directory} is writable by others ({mode}, sticky) and the entry in it on the way "
        f"belongs to uid {entry.st_uid}, who could swap it"
    )


# What a lock directory may hold to be removed: its record and a few files of its own, never
# a tree (a `spool/` someone keeps in it is not the lock's). Counted over the whole tree, and
# refused as a whole when over: nothing is partly deleted.
TREE_MAX_ENTRIES = 256
TREE_MAX_DEPTH = 2
"""The lock directory's own entries are depth 1, those of a directory in it depth 2."""
TREE_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class TreeTooLarge(Exception):
    """A lock directory holds more than a lock's own files; says what."""


def tree(parent: int, name: str, where: str) -> list[tuple[int, str, bool]]:
    """Every entry below the directory `name` in `parent` (a descriptor), deepest first, as
    (depth, path relative to `name`, is a directory): what removing it deletes, in the order
    it can be deleted. Opened relative to its directory, never through a symlink; raises
    TreeTooLarge past TREE_MAX_ENTRIES or TREE_MAX_DEPTH."""
    found: list[tuple[int, str, bool]] = []
    _walk_tree(parent, name, "", 1, where, found)
    return found


Entry = tuple[int, str, bool]


def _walk_tree(
    parent: int, name: str, relative: str, depth: int, where: str, found: list[Entry]
) -> None:
    descriptor = os.open(name, TREE_OPEN, dir_fd=parent)
    try:
        with os.scandir(descriptor) as entries:
            listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for entry, is_directory in listed:
            path = os.path.join(relative, entry)
            if depth > TREE_MAX_DEPTH:
                raise TreeTooLarge(
                    f"{where} holds {os.path.join(os.path.basename(where), path)}, deeper than "
                    f"a lock directory's {TREE_MAX_DEPTH} levels"
                )
            if len(found) >= TREE_MAX_ENTRIES:
                raise TreeTooLarge(
                    f"{where} holds more than {TREE_MAX_ENTRIES} entries in all: more than a "
                    "lock's own files"
                )
            if is_directory:
                _walk_tree(descriptor, entry, path, depth + 1, where, found)
            found.append((depth, path, is_directory))
    finally:
        os.close(descriptor)
