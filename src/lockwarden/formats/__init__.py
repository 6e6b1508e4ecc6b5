"""The explicit registry of lock formats, and `auto`, which picks one by looking."""

from __future__ import annotations

import functools
import importlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import replace

from lockwarden.formats.base import Format, lstat_or_none, one_name
from lockwarden.formats.owner_record import PREFERRED_RECORDS
from lockwarden.formats.trust import (
    PathRefused,
    Reached,
    TreeTooLarge,
    control_problem,
    reach,
    root_only,
    tree,
)
from lockwarden.model import Claim, PathControl
from lockwarden.support.safe_read import scan_directory

# The registry: every format, most specific first (`auto` picks the first whose detect()
# says yes), as its name, module and class. A format's facts are attributes of its class
# (formats/base.py, Format); its module is imported the first time the format is used, so a
# run of `kernel` and `owner-record` locks never imports the Chromium or borg readers.
REGISTRY: tuple[tuple[str, str, str], ...] = (
    ("chromium-profile", "chromium", "ChromiumProfile"),
    ("firefox-profile", "firefox", "FirefoxProfile"),
    ("mercurial", "mercurial", "Mercurial"),
    ("emacs", "emacs", "EmacsLock"),
    ("borg", "borg", "BorgRepository"),
    ("sqlite", "sqlite", "SqliteDatabase"),
    ("terraform", "terraform", "TerraformState"),
    ("postgres", "postgres", "PostgresPidFile"),
    ("git", "git", "GitLock"),
    ("pacman", "pacman", "PacmanLock"),
    ("dpkg", "dpkg", "DpkgLock"),
    ("filelock-soft", "filelock_soft", "SoftLockFile"),
    ("pidfile", "pidfile", "Pidfile"),
    ("owner-record", "owner_record", "OwnerRecord"),
    ("kernel", "kernel", "KernelLockFile"),
)
_MODULES = {name: (module, class_name) for name, module, class_name in REGISTRY}


@functools.cache
def _load(name: str) -> Format:
    module_name, class_name = _MODULES[name]
    module = importlib.import_module(f"lockwarden.formats.{module_name}")
    format_class: type[Format] = getattr(module, class_name)
    return format_class()


class _Formats(Mapping[str, Format]):
    """The registry as a read-only mapping that imports each format on first use."""

    def __getitem__(self, name: str) -> Format:
        if name not in _MODULES:
            raise KeyError(name)
        return _load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)


FORMATS: Mapping[str, Format] = _Formats()

AUTO = "auto"
AUTO_ORDER: tuple[str, ...] = tuple(name for name, _module, _class in REGISTRY)
LOCKED_FILE = "locked-file"
"""Not a format a config may name: a file some process locks or waits on that no configured
lock watches (`why`, blocked writers). It is read by the format that says what its kernel
locks mean when the file is one of its (an SQLite database: its readers hold it only in a
rollback journal, and a committing writer waits for them), else as a plain kernel lock."""
BYTE_LOCK_FORMATS = ("sqlite",)


def layout_formats() -> tuple[str, ...]:
    """The formats that recognise a whole layout by its own names (Format.layout)."""
    return tuple(name for name in AUTO_ORDER if FORMATS[name].layout)


def directory_formats() -> tuple[str, ...]:
    """The formats whose lock is found from a directory (Format.directory)."""
    return tuple(name for name in AUTO_ORDER if FORMATS[name].directory)


def never_removed(format_name: str) -> str | None:
    """Why `remove_stale` may never remove this format's lock; None when it may (or the name is
    no format: the caller says why)."""
    return FORMATS[format_name].never_removed if format_name in FORMATS else None


STORE_LOCK_NAMES = ("LOCK", "lock", ".lock")
LOCKISH_SUFFIXES = (".lock", ".lck", ".lockdir")


def format_names() -> list[str]:
    return [AUTO, *FORMATS]


def store_lock_path(path: str) -> str:
    """A store directory given where its lock was meant: `STORE` -> `STORE/LOCK`.

    A directory is itself a lock only when its name says so (`LOCK`, `*.lock`, ...) or it holds
    an owner record; any other directory is a store, and its lock is `STORE/LOCK` (absent or not).
    """
    status = lstat_or_none(path)
    if status is None or not stat.S_ISDIR(status.st_mode) or _looks_like_lock_directory(path):
        return path
    for name in STORE_LOCK_NAMES:
        if lstat_or_none(os.path.join(path, name)) is not None:
            return os.path.join(path, name)
    return os.path.join(path, STORE_LOCK_NAMES[0])


def _looks_like_lock_directory(path: str) -> bool:
    name = os.path.basename(path.rstrip("/"))
    if name in STORE_LOCK_NAMES or name.lower().endswith(LOCKISH_SUFFIXES):
        return True
    return any(
        lstat_or_none(os.path.join(path, record)) is not None for record in PREFERRED_RECORDS
    )


LOOKALIKE_WORDS = ("lock", "lck")
LOOKALIKE_SCAN = 1000
"""Entries of a store directory looked at for something that looks like a lock (a larger
directory is looked at this far: the walk must not cost a run its budget)."""


def lock_lookalikes(directory: str, depth: int = 2) -> list[str]:
    """Paths under `directory` (to `depth` levels) whose name says lock (`*.lock`, `locks/`,
    `db.lck`, `LOCK.pid`): what a layout lockwarden does not know leaves behind."""
    found: list[str] = []
    try:
        entries = list(scan_directory(directory, LOOKALIKE_SCAN))
    except OSError:
        return found
    for entry in sorted(entries, key=lambda each: each.name):
        if any(word in entry.name.lower() for word in LOOKALIKE_WORDS):
            found.append(entry.path)
        elif depth > 1 and entry.is_dir(follow_symlinks=False):
            found.extend(lock_lookalikes(entry.path, depth - 1))
    return found


def _unknown_layout(directory: str, store_lock: str) -> Claim | None:
    """A store directory whose `STORE/LOCK` is absent is free only when nothing else in it
    looks like a lock: a program whose layout lockwarden does not know may hold its own there."""
    found = lock_lookalikes(directory)
    if not found:
        return None
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return Claim(
        format=AUTO,
        path=store_lock,
        present=True,
        existence_is_lock=False,
        problem=(
            f"nothing is at {store_lock}, but {directory} holds what looks like another "
            f"program's lock, of a layout lockwarden does not know: {shown}. Watch it with a "
            "[[lock]] of its own path and format (kernel, pidfile, owner-record, ...)"
        ),
    )


def choose_format(path: str, order: tuple[str, ...] = AUTO_ORDER) -> str | None:
    """The name of the format `auto` picks for this path, or None when nothing is there."""
    status = lstat_or_none(path)
    if status is None:
        return None
    for name in order:
        if FORMATS[name].detect(path, status):
            return name
    return None


def _directory_format(path: str) -> str | None:
    """A directory format's pick, unless the directory holds a store lock (`STORE/LOCK` wins:
    a store may well be a git work tree too)."""
    status = lstat_or_none(path)
    if status is None or not stat.S_ISDIR(status.st_mode):
        return None
    if any(lstat_or_none(os.path.join(path, name)) is not None for name in STORE_LOCK_NAMES):
        return None
    return next((name for name in directory_formats() if FORMATS[name].detect(path, status)), None)


def read_claim(path: str, format_name: str, pid_max: int) -> Claim:
    """Read one lock with the named format, or with the one `auto` picks (and say which).
    An absent lock is read with whether its directory exists: the run's judging reads no
    file system, and this read is the one a deadline guards (bounded.py)."""
    claim = _read_claim(path, format_name, pid_max)
    if claim.present:
        return _with_path_control(_with_key_names(claim))
    directory = os.path.dirname(claim.path.rstrip("/")) or "/"
    return claim if os.path.isdir(directory) else replace(claim, missing_directory=directory)


def _with_path_control(claim: Claim) -> Claim:
    """Who besides root can change where the path to a lock that may be removed leads
    (trust.py): a stale lock's printed removal goes through that path, pasted into a root
    shell later, when its owner may have swapped a directory on the way for a symlink."""
    if not claim.remove_path or claim.never_remove:
        return claim
    try:
        with reach(claim.remove_path) as reached:
            if _lock_directory(claim, reached):  # rm -r must meet only the lock's own files
                tree(reached.parent, reached.name, reached.path)
            if root_only(reached):
                return claim
            problem = control_problem(reached)
            owner = (reached.status.st_uid, reached.status.st_gid)
    except (OSError, PathRefused, TreeTooLarge) as error:
        problem = str(error) if not isinstance(error, OSError) else f"{claim.remove_path}: {error}"
    control = PathControl(refused=problem) if problem else PathControl(owner=owner)
    return replace(claim, path_control=control)


def _lock_directory(claim: Claim, reached: Reached) -> bool:
    """Whether removing the claim's lock deletes a directory and what is in it."""
    return stat.S_ISDIR(reached.status.st_mode) and claim.record_path != claim.remove_path


def _with_key_names(claim: Claim) -> Claim:
    """The claim with the one name of each of its inodes that has one (Claim.key_names): those
    its format named (a file beside the lock, such as SQLite's `-shm`), and a path it read,
    lstat-ed now, that is still one of its inodes (without a trailing slash: `LOCK/` would
    follow a symlink LOCK to its target). An inode none of them is stays unnamed (the walk
    then reads every descriptor's fdinfo, as it must for a name it cannot know)."""
    named = dict(claim.key_names)
    if named.keys() >= set(claim.keys):
        return claim  # its format named every inode already
    paths = (claim.path, claim.record_path, claim.remove_path)
    for candidate in dict.fromkeys(path.rstrip("/") for path in paths if path):
        status = lstat_or_none(candidate) if candidate else None
        found = one_name(candidate, status) if status is not None else None
        if found is not None and found[0] in claim.keys:
            named.setdefault(*found)
    return replace(claim, key_names=tuple(named.items())) if named else claim


def _locked_file_claim(path: str, pid_max: int) -> Claim:
    """The claim of a file some process locks or waits on (LOCKED_FILE): its byte-lock
    format's when the file is that format's lock itself, else a plain kernel lock's. A file
    beside one (SQLite's `-shm`) is its own: the lock waited on is on its inode."""
    chosen = choose_format(path, BYTE_LOCK_FORMATS)
    if chosen is not None:
        claim = FORMATS[chosen].read(path, pid_max)
        if claim.path == path:
            return claim
    return FORMATS["kernel"].read(path, pid_max)


def _read_claim(path: str, format_name: str, pid_max: int) -> Claim:
    if format_name == LOCKED_FILE:
        return _locked_file_claim(path, pid_max)
    if format_name != AUTO:
        return FORMATS[format_name].read(path, pid_max)
    chosen = choose_format(path, layout_formats()) or _directory_format(path)
    given = path
    if chosen is None:
        path = store_lock_path(path)
        chosen = choose_format(path)
    if chosen is None and path != given:
        unknown_layout = _unknown_layout(given, path)
        if unknown_layout is not None:
            return unknown_layout
    if chosen is None:
        present = lstat_or_none(path) is not None
        problem = f"{path} is not a layout any format recognises" if present else None
        return Claim(
            format=AUTO, path=path, present=present, existence_is_lock=False, problem=problem
        )
    claim = FORMATS[chosen].read(path, pid_max)
    picked = f"format auto picked {chosen}: {FORMATS[chosen].summary}"
    return replace(claim, note=f"{claim.note}; {picked}" if claim.note else picked)
