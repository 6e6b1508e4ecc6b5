"""The state journal: an append-only JSON Lines file of runs, incidents and deliveries.

Durability rules (each has a test in tests/alerts/test_journal.py):

* one record = one ``write()`` on an ``O_APPEND`` descriptor, its length checked, then
  ``fsync``; the directory is fsynced after the file is created or renamed;
* the sighting memory's ``seen`` record is not journaled: it lives alone in ``seen.json``
  beside the journal, replaced whole by each run that writes one (``SeenFile``), and only
  one that names a database session is fsynced (tested in
  tests/integration/test_sighting_memory.py);
* a torn last line (a crash mid-write) is cut off before the next append; a corrupt line in
  the middle is skipped with a warning, so the journal fails toward one duplicate alert and
  never toward silence;
* compaction writes a new file in the same directory, fsyncs it, renames it over the journal
  and fsyncs the directory;
* the state directory is refused when it is a symlink, writable by others, or owned by
  another user: anyone able to write the journal can silence alerts.

The run lock is a file in the state directory, never a monitored lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from lockwarden.state.records import JournalRecord, SeenRecord, from_json, to_json
from lockwarden.support.checkpoints import Checkpoint, skip

log = logging.getLogger(__name__)

JOURNAL_NAME = "state.jsonl"
RUN_LOCK_NAME = "run.lock"
SEEN_NAME = "seen.json"
COMPACT_PREFIX = f".{JOURNAL_NAME}.compact-"
SEEN_PREFIX = f".{SEEN_NAME}.new-"
MAX_JOURNAL_READ = 64 * 1024 * 1024


class StateError(Exception):
    """The journal cannot be read or written; the run goes on and reports it."""


class RunBusy(Exception):
    """Another run holds the run lock."""

    def __init__(self, pid: int | None, lock_path: str) -> None:
        who = f"PID {pid}" if pid is not None else "a process whose PID is not recorded yet"
        super().__init__(f"another lockwarden run is in progress ({who}, run lock {lock_path})")
        self.pid = pid
        self.lock_path = lock_path


def default_state_path(
    euid: int | None = None, environ: dict[str, str] | None = None, home: str | None = None
) -> str:
    """/var/lib/lockwarden/state.jsonl for root, else under $XDG_STATE_HOME (~/.local/state)."""
    uid = os.geteuid() if euid is None else euid
    if uid == 0:
        return f"/var/lib/lockwarden/{JOURNAL_NAME}"
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(
        home or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "lockwarden", JOURNAL_NAME)


def state_directory_of(configured: str | None) -> str:
    """The directory of the state journal: `[state] path`'s, else the default's."""
    return os.path.dirname(configured or default_state_path()) or "."


def check_state_dir(directory: str) -> None:
    """Make the state directory if only its last part is missing; refuse an unsafe one."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        _make_state_dir(directory)
        info = _lstat_made(directory)
    except OSError as error:
        raise StateError(f"state directory {directory}: {error.strerror}") from None
    _check_state_dir_info(directory, info)


def state_dir_problem(directory: str) -> str | None:
    """What `check_state_dir` would refuse, found without creating anything (check-config)."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        parent = os.path.dirname(directory.rstrip("/")) or "/"
        if os.path.isdir(parent):
            return None  # the first run creates it, mode 0700
        if os.geteuid() != 0 and directory == os.path.dirname(default_state_path()):
            return None  # a user's default: the first run creates its parents too
        return f"state directory {directory} does not exist, nor does its parent {parent}"
    except OSError as error:
        return f"state directory {directory}: {error.strerror}"
    try:
        _check_state_dir_info(directory, info)
    except StateError as error:
        return str(error)
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"state directory {directory}: permission denied (needs write and search on it)"
    return None


def _check_state_dir_info(directory: str, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise StateError(
            f"state directory {directory} is a symlink; refused (whoever controls the link "
            "target could silence alerts): use a real directory"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise StateError(f"state directory {directory} is not a directory")
    if info.st_mode & stat.S_IWOTH:
        raise StateError(
            f"state directory {directory} is writable by every user (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); refused, as anyone could silence alerts: "
            f"chmod 0700 {directory}"
        )
    if info.st_uid not in (0, os.geteuid()):
        raise StateError(
            f"state directory {directory} belongs to uid {info.st_uid}, not to this user; refused"
        )


def _lstat_made(directory: str) -> os.stat_result:
    """The directory just made; someone may have removed it already (a state problem, not a
    crash: the run still alerts)."""
    try:
        return os.lstat(directory)
    except OSError as error:
        raise StateError(
            f"state directory {directory} vanished just after it was made: {error.strerror}"
        ) from None


def _make_state_dir(directory: str) -> None:
    parent = os.path.dirname(directory.rstrip("/")) or "/"
    if os.geteuid() != 0 and directory == os.path.dirname(default_state_path()):
        # A user's default ($XDG_STATE_HOME/lockwarden): a new account may not have
        # ~/.local/state yet, which the XDG spec says to create, mode 0700.
        with contextlib.suppress(OSError):  # if not, the mkdir below says why
            os.makedirs(parent, 0o700, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return  # a concurrent run made it first; the caller checks what it is
    except FileNotFoundError:
        raise StateError(
            f"state directory {directory} does not exist, nor does its parent {parent}"
        ) from None
    except OSError as error:
        raise StateError(f"cannot create state directory {directory}: {error.strerror}") from None
    try:
        fsync_directory(parent)
    except OSError as error:  # the parent vanished or cannot be opened: the caller's check says
        log.debug("cannot fsync %s: %s", parent, error.strerror)


def fsync_directory(directory: str) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@dataclass
class Loaded:
    """What a load found: the good records, warnings, and where a torn tail starts."""

    records: list[JournalRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    torn_at: int | None = None
    size: int = 0


def parse_lines(data: bytes, path: str) -> Loaded:
    loaded = Loaded(size=len(data))
    complete_end = data.rfind(b"\n") + 1
    if complete_end < len(data):
        loaded.torn_at = complete_end
        loaded.warnings.append(
            f"{path}: the last line is torn (a run was interrupted mid-write); it is ignored "
            "and cut off before the next append"
        )
    for number, line in enumerate(data[:complete_end].splitlines(), start=1):
        record = _parse_line(line)
        if record is None:
            loaded.warnings.append(f"{path}: line {number} is not a journal record; skipped")
        elif record is not False:
            loaded.records.append(record)
    return loaded


def _parse_line(line: bytes) -> JournalRecord | Literal[False] | None:
    """A record (records.Unreadable for a kind or shape this version cannot read), False
    for a blank line, or None for a line that is no JSON object with a `type`."""
    if not line.strip():
        return False
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return None
    return from_json(value)


def encode(record: JournalRecord) -> bytes:
    """One journal line."""
    stored = to_json(record)
    text = json.dumps(stored, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    return text.encode() + b"\n"


class Journal:
    """One state file. `load` reads only; `append` and `compact` write."""

    def __init__(
        self,
        path: str,
        max_bytes: int = 262144,
        unusable: str | None = None,
        checkpoint: Checkpoint = skip,
    ) -> None:
        """`unusable`: why this run must not touch the state directory at all (its file system
        did not answer: see pipeline.FileReads); every access then fails at once with that.
        `checkpoint`: see checkpoints.py (a given one splits each write at its step)."""
        self.path = path
        self.checkpoint = checkpoint
        self.directory = os.path.dirname(path) or "."
        self.max_bytes = max_bytes
        self.unusable = unusable
        self._descriptor: int | None = None
        self._torn_at: int | None = None

    def check_directory(self) -> None:
        """check_state_dir, unless the directory's file system was found not answering."""
        if self.unusable is not None:
            raise StateError(self.unusable)
        check_state_dir(self.directory)

    def load(self) -> Loaded:
        """Read every record; a missing journal is an empty one."""
        data = _read_state_file(self.path, self.unusable, "journal file")
        if data is None:
            return Loaded()
        loaded = parse_lines(data, self.path)
        self._torn_at = loaded.torn_at
        for warning in loaded.warnings:
            log.warning("%s", warning)
        return loaded

    def append(self, record: JournalRecord) -> None:
        """One write(), length checked, then fsync; raise StateError on any failure."""
        descriptor = self._open_for_append()
        data = encode(record)
        before = os.fstat(descriptor).st_size
        try:
            if self.checkpoint is not skip:  # looked in on: half a record is out at the step
                data = self._write_half(descriptor, data, "mid-append")
            written = os.write(descriptor, data)
            if written != len(data):
                raise OSError(
                    errno.ENOSPC, f"short write ({written} of {len(data)} bytes): disk full?"
                )
            os.fsync(descriptor)
        except OSError as error:
            self._undo_partial(descriptor, before)
            raise StateError(f"cannot write {self.path}: {error.strerror or error}") from None

    def _write_half(self, descriptor: int, data: bytes, step: str) -> bytes:
        """Put the first half of DATA on disk, reach STEP, and return the rest to write."""
        half = len(data) // 2
        _write_all(descriptor, data[:half])
        os.fsync(descriptor)
        self.checkpoint(step)
        return data[half:]

    def _undo_partial(self, descriptor: int, size: int) -> None:
        """Cut a partial record so the next append does not glue onto it."""
        try:
            os.ftruncate(descriptor, size)
        except OSError:
            self._torn_at = size  # the next run's load cuts it

    def _open_for_append(self) -> int:
        if self._descriptor is not None:
            return self._descriptor
        self.check_directory()
        existed = os.path.lexists(self.path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            descriptor = os.open(self.path, flags, 0o600)
            if self._torn_at is not None:
                os.ftruncate(descriptor, self._torn_at)
                os.fsync(descriptor)
                self._torn_at = None
            if not existed:
                fsync_directory(self.directory)
        except OSError as error:
            raise StateError(f"cannot open {self.path} for writing: {error.strerror}") from None
        self._descriptor = descriptor
        return descriptor

    def needs_compaction(self) -> bool:
        if self.unusable is not None:
            return False
        try:
            return os.stat(self.path).st_size > self.max_bytes
        except OSError:
            return False

    def compact(self, keep: Callable[[list[JournalRecord]], list[JournalRecord]]) -> int:
        """Rewrite the journal as `keep(records)`: temp file, fsync, rename, fsync dir."""
        records = self.load().records
        kept = keep(records)
        temporary = _hidden_path(self.directory, COMPACT_PREFIX)
        try:
            descriptor = os.open(temporary, _HIDDEN_FLAGS, 0o600)
            try:
                body = b"".join(encode(record) for record in kept)
                if self.checkpoint is not skip:  # the new file half written at the step
                    body = self._write_half(descriptor, body, "mid-compaction")
                _write_all(descriptor, body)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            self.close()
            self.checkpoint("mid-compaction")  # complete, not yet renamed
            os.rename(temporary, self.path)
            self._torn_at = None  # the torn line was the old file's: the new one has none
            fsync_directory(self.directory)
        except OSError as error:
            _remove_quietly(temporary)
            raise StateError(f"cannot compact {self.path}: {error.strerror or error}") from None
        return len(records) - len(kept)

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class SeenFile:
    """The sighting memory (check/sightings.py): the latest `seen` record, in a file of its own
    beside the journal, replaced whole by each run that writes one.

    Only the latest `seen` record ever counts. Appended to the journal, one a run, they made it
    grow by a record a run until compaction, and every run loaded them all: on a host holding a
    kernel lock all day, up to `max_bytes` of them, ~5 ms and ~1 MB of memory a run.

    A replacement is a new file under a hidden name, renamed over the old one: a reader sees the
    old record or the new one, never half of one. It is fsynced (the file, then the directory)
    only when `durable`: one that names a database session, which a server on another host
    keeps through this host's crash. One that names only this boot's kernel locks is written
    afresh by every run and its facts end with the boot: a power cut or kernel crash, all an
    fsync protects against, can lose it (a file of the old record, or an empty or torn one,
    read as none), and the kernel locks and processes it named ended with the boot. An fsync
    per run would flush the disk on every timer run for nothing."""

    def __init__(self, directory: str, unusable: str | None = None) -> None:
        self.directory = directory
        self.path = os.path.join(directory, SEEN_NAME)
        self.unusable = unusable

    def load(self) -> SeenRecord | None:
        """The record; None when there is none. One that is not a `seen` record this version
        reads is said at warning and read as none: the series it held start over."""
        data = _read_state_file(self.path, self.unusable, "sighting file")
        if data is None:
            return None
        try:  # anyone could have put it in a directory that is not safe: it dates nothing
            _check_state_dir_info(self.directory, os.lstat(self.directory))
        except OSError as error:
            raise StateError(f"state directory {self.directory}: {error.strerror}") from None
        record = _parse_line(data) if data.endswith(b"\n") and data.count(b"\n") == 1 else None
        if not isinstance(record, SeenRecord):
            log.warning(
                "%s: not a sighting record; ignored (the series of kernel locks it held start "
                "over, and the next run writes it afresh)",
                self.path,
            )
            return None
        return record

    def replace(self, record: SeenRecord, durable: bool) -> None:
        """Write `record` in place of the last one; raise StateError on any failure. The
        caller holds the run lock (a run killed mid-write left its hidden file: removed here)."""
        if self.unusable is not None:
            raise StateError(self.unusable)
        check_state_dir(self.directory)
        temporary = _hidden_path(self.directory, SEEN_PREFIX)
        replaced = False
        try:
            descriptor = os.open(temporary, _HIDDEN_FLAGS, 0o600)
            try:
                _write_all(descriptor, encode(record))
                if durable:
                    os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.rename(temporary, self.path)
            replaced = True
            if durable:
                fsync_directory(self.directory)
        except OSError as error:
            _remove_quietly(temporary)
            if not replaced:
                self._forget()
            raise StateError(f"cannot write {self.path}: {error.strerror or error}") from None

    def _forget(self) -> None:
        """The record this run could not replace must not outlive it: a later run would carry
        its series over this run's sightings (which may have ended them) and date a new hold
        from an old series' start, a false "held too long". With none, series start over: a
        hold is reported shorter, never longer. The removal is synced (the old record may be
        a durable one, naming a database session). A file system that refuses this too
        (read-only) is said by every run's state finding."""
        try:
            os.unlink(self.path)
        except OSError:
            return
        with contextlib.suppress(OSError):
            fsync_directory(self.directory)


def _read_state_file(path: str, unusable: str | None, what: str) -> bytes | None:
    """A file of the state directory, whole; None when it does not exist. Never through a
    symlink, never anything but a regular file of sane size."""
    if unusable is not None:
        raise StateError(unusable)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StateError(f"cannot read {path}: {error.strerror}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JOURNAL_READ:
            raise StateError(f"{path} is not a regular {what} of sane size")
        return _read_all(descriptor)
    finally:
        os.close(descriptor)


def _read_all(descriptor: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(descriptor, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


_HIDDEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def _hidden_path(directory: str, prefix: str) -> str:
    """Where this run writes a file to rename into place (`prefix` + its PID), once the hidden
    files a run killed mid-write left are removed. Only a run holding the run lock may call
    this, or it could remove another's file being written."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name.startswith(prefix):
                _remove_quietly(os.path.join(directory, name))
    return os.path.join(directory, f"{prefix}{os.getpid()}")


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class RunLock:
    """`run.lock` in the state directory, held with a non-blocking flock for the whole run.

    The holder writes its PID into the file so an overlapping run can say who runs.
    """

    def __init__(self, descriptor: int, path: str) -> None:
        self._descriptor = descriptor
        self.path = path

    @classmethod
    def acquire(cls, directory: str) -> RunLock:
        check_state_dir(directory)
        path = os.path.join(directory, RUN_LOCK_NAME)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            descriptor = os.open(path, flags, 0o600)
        except OSError as error:
            raise StateError(f"cannot open the run lock {path}: {error.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(descriptor)
            os.close(descriptor)
            raise RunBusy(pid, path) from None
        _record_pid(descriptor)
        return cls(descriptor, path)

    def release(self) -> None:
        os.close(self._descriptor)


def _record_pid(descriptor: int) -> None:
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    except OSError as error:  # the lock itself is held; only the courtesy PID is missing
        log.warning("cannot record this run's PID in the run lock: %s", error.strerror)


def _read_pid(descriptor: int) -> int | None:
    """The running PID; the winner writes it just after its flock, so look a few times."""
    import time

    for _ in range(20):
        text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            return int(text)
        time.sleep(0.005)
    return None
