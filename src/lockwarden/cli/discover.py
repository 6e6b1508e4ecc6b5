"""Find candidate locks on this host, judge them like any configured lock, and write a config.

Two sources: every inode in /proc/locks resolved to a path through the descriptors that hold it
(`/proc/PID/fd` links, from one capture of the host), and the layouts the layout
formats recognise by name (a Chromium profile, a Mercurial or borg repository, an Emacs `.#FILE`)
under the directories given, walked to a bounded depth and entry count without following
symlinks and never into /proc, /sys or /dev. Nothing found is locked, opened for writing or
changed; the candidates go through the normal pipeline (pipeline.inspect), which captures the
host again for them: finding the candidates and judging them are two captures, each one call.

`discover_locks()` is what `lockwarden discover` and other commands (`init`) call.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import tomli_w

from lockwarden import config as config_module
from lockwarden.formats import STORE_LOCK_NAMES, choose_format, layout_formats
from lockwarden.formats.owner_record import NAME as OWNER_RECORD
from lockwarden.formats.owner_record import PREFERRED_RECORDS, pick_record
from lockwarden.formats.record import RecordProblem, parse_record
from lockwarden.model import Finding, InodeKey
from lockwarden.pipeline import inspect
from lockwarden.procfs.reader import HostReader, Request
from lockwarden.procfs.snapshot import Snapshot
from lockwarden.support.atomic import write_new
from lockwarden.support.bounded import BoundedRun, Unanswered
from lockwarden.support.durations import format_time, parse_duration
from lockwarden.support.escape import is_utf8, visible_lines
from lockwarden.support.safe_read import UnsafeRecord, list_directory, read_record

DEFAULT_MAX_DEPTH = 6
DEFAULT_MAX_ENTRIES = 50_000
NEVER_WALKED = ("/proc", "/sys", "/dev")
DELETED_SUFFIX = " (deleted)"


@dataclass(frozen=True)
class Candidate:
    """A lock worth watching: where it is, which format reads it, and how it was found."""

    path: str
    format: str
    found_by: str
    database: config_module.DatabaseWatch | None = None  # a lock inside a database server
    label: str | None = None  # what names it in a config, when its path cannot
    lifetime: str | None = None
    """Why it is held for a daemon's whole life (its own pidfile, held since boot): a lock no
    writer waits on, which `init` lists commented out."""
    first_word: str | None = None
    """A locked file's first word, read within fs_timeout when it was named (a pidfile's PID)."""


@dataclass(frozen=True)
class Discovery:
    """The candidate locks found on this host, each judged now."""

    candidates: tuple[Candidate, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    hostname: str
    boot_id: str
    checked_at: datetime


def discover_locks(
    directories: Sequence[str],
    host: HostReader,
    now: datetime,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    databases: Sequence[str] = (),
) -> Discovery:
    """Candidates from the kernel's lock table, the directories and the PostgreSQL
    connections given, each judged now."""
    kernel, kernel_notes = kernel_lock_candidates(host)
    layouts, walk_notes = layout_candidates(directories, max_depth, max_entries)
    inside, database_notes = database_candidates(databases)
    candidates = _unique([*kernel, *layouts, *inside])
    inspection = inspect(lock_configs(candidates), host, now)
    notes = (*kernel_notes, *walk_notes, *database_notes)
    snapshot = inspection.snapshot
    return Discovery(
        tuple(candidates), inspection.findings, notes, snapshot.hostname, snapshot.boot_id, now
    )


def database_candidates(connections: Sequence[str]) -> tuple[list[Candidate], list[str]]:
    """The locks each PostgreSQL server shows (databases/discover.py); no driver import
    unless a connection is given."""
    if not connections:
        return [], []
    from lockwarden.databases.check import format_name
    from lockwarden.databases.discover import postgres_candidates

    candidates: list[Candidate] = []
    notes: list[str] = []
    for connection in connections:
        found, problems = postgres_candidates(connection, os.environ)
        notes.extend(problems)
        candidates.extend(
            Candidate(
                path=each.watch.describe(),
                format=format_name(each.watch),
                found_by=each.found_by,
                database=each.watch,
                label=each.label,
            )
            for each in found
        )
    return candidates, notes


def kernel_lock_candidates(
    host: HostReader, fs_timeout: float = config_module.DEFAULT_FS_TIMEOUT
) -> tuple[list[Candidate], list[str]]:
    """Every locked inode in /proc/locks, named by a path a holder's descriptor points at (each
    checked within fs_timeout: a locked file on a hung mount is left out, its mount named)."""
    snapshot = host.capture(Request(all_locked=True))
    keys = list(snapshot.locks)
    targets = {key: _link_targets(key, snapshot) for key in keys}

    def name(key: InodeKey) -> tuple[Candidate | None, tuple[InodeKey, ...]]:
        return _named(key, targets[key], snapshot), ()

    naming = BoundedRun(name, lambda key: (targets[key] or ["/"])[0], lambda _key: fs_timeout)
    candidates: list[Candidate] = []
    unresolved = 0
    hung: dict[str, str] = {}
    for key, outcome in naming.run([key for key in keys if targets[key]]):
        if isinstance(outcome, Candidate):
            lifetime = _daemon_lifetime(outcome.path, outcome.first_word, key, snapshot, host)
            candidates.append(replace(outcome, lifetime=lifetime))
        elif isinstance(outcome, Unanswered):
            hung.setdefault(outcome.mount.describe() if outcome.mount else "", str(outcome))
        else:
            unresolved += 1
    unresolved += sum(1 for key in keys if not targets[key])
    notes = [f"locked files not named: {reason}" for reason in hung.values()]
    if unresolved:
        notes.append(f"{unresolved} locked files could not be named: {_why_unnamed(snapshot)}")
    return candidates, notes


def _why_unnamed(snapshot: Snapshot) -> str:
    """Deleted files have no name; beyond that, only what is so: unreadable holders (and the
    right that reads them) or a container's namespace."""
    from lockwarden.check.identify import missing_right, processes

    reasons = ["deleted, held by no process's descriptor, or in flight in a unix socket"]
    if snapshot.unreadable_pids:
        reasons.append(
            f"{processes(snapshot.unreadable_pids)} descriptors could not be read: "
            f"{missing_right(snapshot)}"
        )
    if snapshot.nested_pid_namespace:
        reasons.append("held from outside this container's PID namespace")
    return "; ".join(reasons)


def _link_targets(key: InodeKey, snapshot: Snapshot) -> list[str]:
    """Where the descriptors on this inode point: procfs links, read without touching the file."""
    targets = []
    for descriptor in snapshot.descriptors(key):
        target = snapshot.fd_target(descriptor.pid, descriptor.fd)
        if target is None:
            continue
        if target.startswith("/") and not target.endswith(DELETED_SUFFIX):
            targets.append(target)
    return targets


def _named(key: InodeKey, targets: list[str], snapshot: Snapshot) -> Candidate | None:
    """The first target that still names this very inode (not another file since put there)."""
    for target in targets:
        try:
            status = os.stat(target)
        except OSError:
            continue
        if (status.st_dev, status.st_ino) == key:
            kinds = sorted({f"{lock.kind} {lock.mode}" for lock in snapshot.kernel_locks(key)})
            found_by = f"kernel lock ({', '.join(kinds)})"
            # the file's first word (a pidfile's PID) is read here, within fs_timeout; the
            # holders are judged by it once named (_daemon_lifetime)
            first_word = _first_word(target)
            openers = {lock.pid for lock in snapshot.kernel_locks(key)}
            openers.update(descriptor.pid for descriptor in snapshot.descriptors(key))
            chosen = _kernel_path_format(target, openers)
            return Candidate(target, chosen, found_by, first_word=first_word)
    return None


SINCE_BOOT_S = 300
"""A holder that started this soon after boot has held its lock since boot, as a daemon does."""


def _daemon_lifetime(
    path: str, first_word: str | None, key: InodeKey, snapshot: Snapshot, host: HostReader
) -> str | None:
    """Why this lock is held for its holder's whole life, or None: a pidfile its own PID
    holds (`first_word`: the file's), or a lock whose every holder started with the boot."""
    holders = [
        process
        for process in (host.process(d.pid) for d in snapshot.descriptors(key) if d.locks)
        if process is not None
    ]
    if not holders:
        return None
    first = min(holders, key=lambda process: process.start_ticks)
    if str(first.pid) == first_word and _pidfile_place(path):
        return f"the pidfile of PID {first.pid} ({first.name}), held by that process for its life"
    booted = (first.started_at - snapshot.booted_at).total_seconds()
    up = (snapshot.captured_at - snapshot.booted_at).total_seconds()
    early = all((p.started_at - snapshot.booted_at).total_seconds() < SINCE_BOOT_S for p in holders)
    if early and up > 4 * SINCE_BOOT_S:  # right after boot, every holder started with it
        return f"held since boot by PID {first.pid} ({first.name}), {booted:.0f} s after it"
    return None


def _pidfile_place(path: str) -> bool:
    """A pidfile by its name or place (`*.pid`, under /run): a job's lock that writes its own
    PID (`flock -n 9; echo $$ >&9`) is not a daemon's pidfile."""
    return path.endswith(".pid") or path.startswith(("/run/", "/var/run/"))


def _first_word(path: str) -> str:
    """The first word of a small regular file (a pidfile's PID), read without blocking."""
    try:
        data, _ = read_record(path, limit=64)
    except (OSError, UnsafeRecord):
        return ""
    words = data.decode("ascii", errors="replace").split()
    return words[0] if words else ""


def _kernel_path_format(path: str, openers: set[int]) -> str:
    """A layout format if the path is one; a locked directory is a kernel lock, not a store, and
    so is a locked file whose record names none of the processes that lock it or have it open
    (`openers`): MariaDB's ibdata1 read 'unknown: not valid UTF-8' as an owner record, and a
    counter a flock guards (`41`) read 'stale: its holder PID 41 is gone', its action `rm`, once
    free. A record its holder wrote (`flock -n 9; echo $$ >&9`) names one of them, as a `LOCK`
    directory's that `lockwarden hold` locks does: as a kernel lock, it read free once its
    holder was killed, though the directory left behind still kept every taker out."""
    layout = choose_format(path, layout_formats())
    if layout is not None:
        return layout
    chosen = choose_format(path) or "kernel"
    if os.path.isdir(path) and chosen != OWNER_RECORD:
        return "kernel"
    if chosen == OWNER_RECORD and _record_pid(path) not in openers:
        return "kernel"  # its kernel lock is what counts
    return chosen


def _record_pid(path: str) -> int | None:
    """The PID the file's owner record names (a directory's: the record in it); None when it
    names none or holds no record."""
    try:
        if os.path.isdir(path):
            entry = pick_record(list_directory(path))
            if entry is None:
                return None
            path = entry.path
        data, _ = read_record(path)
        return parse_record(data, 2**31).pid
    except (OSError, UnsafeRecord, RecordProblem):
        return None


@dataclass(frozen=True)
class Visit:
    """What one directory of the walk holds: candidates (with the index of the entry each was
    found at, for the entry limit), notes, its entry count."""

    candidates: tuple[tuple[int, Candidate], ...] = ()
    notes: tuple[str, ...] = ()
    entries: int = 0


Place = tuple[str, int]  # a directory of the walk, and its depth


def layout_candidates(
    directories: Sequence[str],
    max_depth: int,
    max_entries: int,
    fs_timeout: float = config_module.DEFAULT_FS_TIMEOUT,
) -> tuple[list[Candidate], list[str]]:
    """Known layouts under the directories: breadth first, symlinks never followed, each
    directory read within fs_timeout (bounded.py): a hung mount is named and left out."""
    candidates: list[Candidate] = []
    notes: list[str] = []
    forbidden_devices = _devices_of(NEVER_WALKED)

    def visit(place: Place) -> tuple[Visit, list[Place]]:
        return _visit(place, forbidden_devices, max_depth)

    walk = BoundedRun(visit, lambda place: place[0], lambda _place: fs_timeout)
    seen_entries = 0
    places = [(os.path.abspath(directory), 0) for directory in directories]
    for (directory, _depth), outcome in walk.run(places):
        if isinstance(outcome, BaseException):
            notes.append(f"{directory}: not walked ({outcome})")
            continue
        room = max_entries - seen_entries
        candidates.extend(candidate for index, candidate in outcome.candidates if index < room)
        notes.extend(outcome.notes)
        seen_entries += outcome.entries
        if seen_entries > max_entries:
            notes.append(f"stopped after {max_entries} entries; name fewer directories")
            break
    return candidates, notes


def _visit(place: Place, forbidden_devices: set[int], max_depth: int) -> tuple[Visit, list[Place]]:
    """One directory: a layout itself, or its file-level layouts and subdirectories."""
    directory, depth = place
    if _never_walked(directory, forbidden_devices):
        return Visit(notes=(f"{directory}: not walked (/proc, /sys and /dev never are)",)), []
    layout = choose_format(directory, layout_formats())
    if layout is not None:  # its inside is the layout's own
        return Visit(candidates=((0, Candidate(directory, layout, f"{layout} layout")),)), []
    try:
        entries = _entries(directory)
    except OSError as error:
        return Visit(notes=(f"{directory}: not walked ({error.strerror or error})",)), []
    found: list[tuple[int, Candidate]] = []
    below: list[Place] = []
    for index, entry in enumerate(entries):
        candidate = _entry_candidate(entry)
        if candidate is not None:
            found.append((index, candidate))
        elif entry.is_dir(follow_symlinks=False) and depth < max_depth:
            below.append((entry.path, depth + 1))
    return Visit(tuple(found), (), len(entries)), below


def _entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as iterator:
        return sorted(iterator, key=lambda entry: entry.name)


def _entry_candidate(entry: os.DirEntry[str]) -> Candidate | None:
    """A file-level layout (`.#FILE`), or a store's owner record (`STORE/LOCK`, a directory
    holding a record or a file that is one); other directories are judged when walked."""
    if entry.name in STORE_LOCK_NAMES and _owner_record(entry):
        return Candidate(entry.path, "owner-record", "owner record")
    if entry.is_dir(follow_symlinks=False):
        return None
    layout = choose_format(entry.path, layout_formats())
    return Candidate(entry.path, layout, f"{layout} layout") if layout else None


def _owner_record(entry: os.DirEntry[str]) -> bool:
    """A lock directory with an owner record inside, or a lock file whose record names a PID."""
    if entry.is_dir(follow_symlinks=False):
        return any(os.path.lexists(os.path.join(entry.path, name)) for name in PREFERRED_RECORDS)
    if not entry.is_file(follow_symlinks=False):
        return False
    try:
        data, _ = read_record(entry.path)
        return parse_record(data, 2**31).pid is not None
    except (OSError, UnsafeRecord, RecordProblem):
        return False


def _devices_of(paths: Sequence[str]) -> set[int]:
    """The filesystems mounted at these paths (a path that is no mount point adds nothing)."""
    devices = set()
    for path in paths:
        try:
            device = os.stat(path).st_dev
            if device != os.stat(os.path.dirname(path)).st_dev:
                devices.add(device)
        except OSError:
            continue
    return devices


def _never_walked(path: str, forbidden_devices: set[int]) -> bool:
    """/proc, /sys and /dev by name, and by filesystem wherever they are mounted again."""
    if any(path == root or path.startswith(root + "/") for root in NEVER_WALKED):
        return True
    try:
        return os.lstat(path).st_dev in forbidden_devices
    except OSError:
        return False


def _unique(candidates: Iterable[Candidate]) -> list[Candidate]:
    by_path: dict[str, Candidate] = {}
    for candidate in candidates:
        by_path.setdefault(candidate.path, candidate)
    return list(by_path.values())


def lock_configs(candidates: Sequence[Candidate]) -> list[config_module.LockConfig]:
    defaults = _default_budgets()
    names = lock_names([candidate.label or candidate.path for candidate in candidates])
    return [
        config_module.LockConfig(
            name=name,
            path=candidate.path,
            format=candidate.format,
            warn_after=defaults["warn_after"],
            critical_after=defaults["critical_after"],
            database=candidate.database,
        )
        for name, candidate in zip(names, candidates, strict=True)
    ]


def _default_budgets() -> dict[str, float]:
    return {option.key: parse_duration(option.default) for option in config_module.DEFAULTS_OPTIONS}


def lock_names(paths: Sequence[str]) -> list[str]:
    """Unique config names from the last two path components: `/srv/app/db.sqlite` ->
    `app-db.sqlite`, then `-2`, `-3` for repeats."""
    names: list[str] = []
    used: set[str] = set()
    for path in paths:
        parts = [part for part in path.split("/") if part][-2:] or ["root"]
        base = re.sub(r"[^A-Za-z0-9._:-]+", "-", "-".join(parts)).strip("-._:")[:56] or "lock"
        name, number = base, 1
        while name in used:
            number += 1
            name = f"{base}-{number}"
        used.add(name)
        names.append(name)
    return names


def config_document(discovery: Discovery) -> dict[str, Any]:
    """A config listing every candidate, checked with the same parser `check-config` uses."""
    # A TOML config holds Unicode only: a file whose name is not UTF-8 is left out of it.
    locks = lock_configs([each for each in discovery.candidates if is_utf8(each.path)])
    document = {"lock": [_lock_document(lock) for lock in locks]}
    config_module.parse(document, "<discovered>")  # raises ConfigError if it would not load
    return document


def _lock_document(lock: config_module.LockConfig) -> dict[str, Any]:
    if lock.database is not None:
        return {"name": lock.name, **config_module.database_document(lock.database)}
    return {"name": lock.name, "path": lock.path, "format": lock.format}


def write_config(path: str, discovery: Discovery, now: datetime, force: bool = False) -> None:
    """Write the config, mode 0600 as `init` writes one (a config is where notify URLs and
    their tokens go once edited); an existing file is kept (FileExistsError) unless `force`."""
    header = (
        f"# lockwarden discover on {discovery.hostname} at {format_time(now)}: "
        f"{len(discovery.candidates)} candidate locks. Remove the ones you do not care about.\n"
    )
    text = header + tomli_w.dumps(config_document(discovery))
    write_new(path, text, mode=0o600, replace=force)


def render_discovery(discovery: Discovery) -> str:
    lines = [f"lockwarden discover on {discovery.hostname}: {len(discovery.candidates)} locks"]
    for candidate, finding in zip(discovery.candidates, discovery.findings, strict=True):
        lines.append(f"  {finding.state.value:<13}  {candidate.format:<16}  {candidate.path}")
        lines.append(f"      {finding.reason}")
        lines.append(f"      found by {candidate.found_by}; config name {finding.name}")
    lines.extend(f"note: {note}" for note in discovery.notes)
    return visible_lines(lines)  # a found file's name is data: escaped, one line each


def discovery_document(discovery: Discovery) -> dict[str, Any]:
    """The same version 2 document as `--once` and `inspect`, each lock with `found_by`."""
    from lockwarden.output.report import json_document
    from lockwarden.pipeline import RunResult

    result = RunResult(
        discovery.hostname,
        discovery.boot_id,
        discovery.checked_at,
        discovery.findings,
        discovery.notes,
    )
    document = json_document(result, command="discover")
    for lock, candidate in zip(document["locks"], discovery.candidates, strict=True):
        lock["found_by"] = candidate.found_by
    return document
