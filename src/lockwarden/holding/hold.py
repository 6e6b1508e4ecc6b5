"""`lockwarden hold` and `lockwarden.hold()`: take a store lock the right way.

The habit made one command: create the lock atomically, record who holds it (PID, role, host,
boot id, start ticks, PID namespace, start time, command, user, declared limit), run the work in
the foreground, and remove the lock the moment it is done. This is the only module besides the
agent's own run lock that *takes* a lock, and it only ever takes the one it is asked to take.

Whose PID is in the record: the process that holds the lock and will remove it. For the command
line that is the `lockwarden hold` supervisor, not COMMAND: `kill PID` (what `inspect` says)
reaches the supervisor, which forwards SIGTERM to COMMAND, waits for it and removes the lock, so
the advised action stops the work *and* frees the lock. For the Python API the record names the
calling process.

What proves the lock held once the supervisor is gone: a flock on the lock's own inode, taken
before the record is in place, on a descriptor COMMAND inherits. COMMAND and whatever it starts
keep it through any change of user or group, and the kernel keeps the lock while any of them
has it open; `inspect` then names them as the holders, and calls the lock stale only when the
recorded PID is gone and no kernel lock is left. The parent-death signal COMMAND also gets is
no proof: the kernel clears it when COMMAND's credentials change (setpriv, su, a setuid or
setgid program). While the supervisor runs it is the subreaper of COMMAND's processes and
removes the lock only once every one of them that still has the lock open has exited (a daemon
that closed what it inherited holds nothing, and is not waited for).

Layouts (both read by the owner-record format):

* directory (default): `mkdir PATH`, then the record is written to `PATH/.owner.json.tmp-PID`
  and renamed to `PATH/owner.json`, so a reader sees no record or a whole one, never half of
  one (the reader skips hidden names). Between the mkdir and the rename the lock names no
  process: `inspect` says unknown, never stale, and another `hold` waits.
* `--file`: the record is written to a hidden temporary file next to PATH and hard-linked to
  PATH. link(2) fails with EEXIST exactly like O_EXCL, and the lock appears with its whole
  record at once. On a filesystem without hard links, PATH is created with O_EXCL and the record
  written in one write(2); a reader may then briefly see an empty file, which it reports as
  unknown, not stale.

Releasing and breaking both rename the lock aside (`PATH.released-…`, `PATH.stale-…` in the same
directory) before deleting it, so the lock disappears atomically and a half-deleted directory is
never mistaken for a lock. A lock is released only if it is still the inode this holder created
and still carries its record (a freed inode number is soon another lock's).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import logging
import os
import pwd
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import psutil

from lockwarden.check.advice import advise_holder
from lockwarden.formats import store_lock_path
from lockwarden.formats.base import key_of, lstat_or_none
from lockwarden.model import Finding, InodeKey, State
from lockwarden.pipeline import inspect_path
from lockwarden.procfs.reader import Clock, HostReader, Request, wall_clock
from lockwarden.support.durations import format_duration, format_limit, format_time, parse_duration
from lockwarden.support.exit_codes import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND
from lockwarden.support.safe_read import UnsafeRecord, read_artefact, read_record

log = logging.getLogger(__name__)

RECORD_NAME = "owner.json"
UNUSABLE_LOOKS = 5  # consecutive looks before something at PATH is called not a lock
POLL_INTERVAL_S = 0.05
# Signals the supervisor catches and forwards to COMMAND (see should_forward).
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SI_KERNEL = 0x80  # si_code of a signal the terminal driver sent to the foreground group
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
HOLDERS_POLL_S = 0.5
"""How often, once COMMAND has exited, the supervisor looks whether what it left running still
has the lock open (a process below its children ends without telling it)."""


class HoldError(Exception):
    """The lock could not be taken; the message says why and what to do."""


class LockHeld(HoldError):
    """Someone else holds the lock (or lockwarden cannot tell that nobody does)."""

    def __init__(self, path: str, finding: Finding, waited_s: float) -> None:
        self.path = path
        self.finding = finding
        waited = f" after waiting {format_limit(waited_s)}" if waited_s > 0 else ""
        reason = finding.reason
        # A holder within its budget needs no action in a report, but whoever wants the lock
        # now still learns how to stop it.
        action = finding.action or (
            advise_holder(finding.holder, finding.sharers, finding.format)
            if finding.holder is not None and finding.holder.pid is not None
            else None
        )
        if action:  # inspect's "… — stop it" then names how
            reason = f"{reason.removesuffix(' — stop it')}; stop it with: {action}"
        super().__init__(f"cannot take {path}{waited}: {reason}")


class LockStale(HoldError):
    """The lock's holder is provably gone; it is only removed when breaking was asked for."""

    def __init__(self, path: str, finding: Finding, break_hint: str) -> None:
        self.path = path
        self.finding = finding
        remove = f"remove it with: {finding.action}, or " if finding.action else ""
        super().__init__(
            f"cannot take {path}: it is {finding.reason} ({finding.proof}); {remove}{break_hint}"
        )


class LockUnavailable(HoldError):
    """The lock could not be created or removed for a reason other than a holder."""


class Interrupted(HoldError):
    """A terminating signal arrived before COMMAND started; the lock is not held."""

    def __init__(self, signal_number: int) -> None:
        self.signal_number = signal_number
        super().__init__(f"interrupted by {signal.Signals(signal_number).name} before starting")


@dataclass(frozen=True)
class HoldRecord:
    """The owner record `hold` writes; every field the owner-record reader needs for proof."""

    pid: int
    role: str
    host: str
    boot_id: str
    start_ticks: int
    pid_namespace: int | None
    started_at: datetime
    command: tuple[str, ...]
    user: str
    max_hold_s: float | None = None

    def to_json(self) -> bytes:
        document: dict[str, object] = {
            "pid": self.pid,
            "role": self.role,
            "host": self.host,
            "boot_id": self.boot_id,
            "start_ticks": self.start_ticks,
            "pid_namespace": self.pid_namespace,
            "started_at": format_time(self.started_at),
            "command": list(self.command),
            "user": self.user,
            "written_by": "lockwarden hold",
        }
        if self.max_hold_s is not None:
            document["max_hold"] = format_limit(self.max_hold_s)
        return (json.dumps(document, indent=2) + "\n").encode()


@dataclass(frozen=True)
class TakenLock:
    """A lock this process created: where, which inode, and what it says.

    `descriptor` is open on the lock's own inode (the directory, or the file) and holds a
    flock on it, taken before the lock carried a record: while any process has it open, the
    lock is held in the kernel's eyes, whatever became of this one."""

    path: str
    key: InodeKey
    is_directory: bool
    record: HoldRecord
    descriptor: int


def record_for(
    role: str,
    command: Sequence[str] | None,
    max_hold_s: float | None = None,
    proc: str = "/proc",
    clock: Clock = wall_clock,
) -> HoldRecord:
    """This process's identity, read the way the inspecting side reads it (one capture of the
    host through procfs), so the start ticks and boot id it records are exactly what `inspect`
    will compare. `command` None means this process's own command line."""
    _numbered_here(proc)
    snapshot = HostReader(clock, proc).capture(Request(read_locks=False, pids=(os.getpid(),)))
    me = snapshot.process(os.getpid())
    if me is None:
        raise LockUnavailable(f"cannot read this process's own identity from {proc}")
    return HoldRecord(
        pid=me.pid,
        role=role,
        host=snapshot.hostname,
        boot_id=snapshot.boot_id,
        start_ticks=me.start_ticks,
        pid_namespace=me.pid_namespace,
        started_at=clock(),
        command=tuple(me.cmdline if command is None else command),
        user=_invoking_user(),
        max_hold_s=max_hold_s,
    )


def _numbered_here(proc: str) -> None:
    """Refuse a PID namespace entered without a /proc of its own (`unshare --pid --fork`
    without `--mount-proc`, `nsenter --pid`): the /proc there numbers its processes otherwise,
    so this process's PID names another process in it (on a host, PID 3 is a kernel thread),
    whose start ticks the record would then carry: once this supervisor is gone, `inspect`
    would name that innocent process as the holder. Its own /proc (`/proc/self`) says how it
    is numbered there."""
    try:
        here = os.readlink(f"{proc}/self")
    except OSError:
        here = "none"  # not numbered there at all
    if here != str(os.getpid()):
        raise LockUnavailable(
            f"this process is PID {os.getpid()} in its PID namespace, but {proc} numbers it "
            f"{here}: the namespace was entered without a /proc of its own, so its PIDs name "
            f"other processes in {proc} and the lock's record would name one of them; run "
            "lockwarden hold outside it, or in one with its own /proc (`unshare --pid --fork "
            "--mount-proc`)"
        )


def _invoking_user() -> str:
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# Taking the lock.


def acquire(
    path: str,
    record: HoldRecord,
    *,
    as_file: bool = False,
    wait_s: float = 0.0,
    break_stale: bool = False,
    break_hint: str = "pass --break-stale to remove it and proceed",
    sleep: Callable[[float], None] = time.sleep,
) -> TakenLock:
    """Create the lock, or wait up to `wait_s` for its holder to let go.

    Raises LockHeld naming the holder in `inspect`'s words, LockStale (unless `break_stale`),
    or LockUnavailable. `sleep` is how the wait passes (the CLI wakes on signals).
    """
    _refuse_store_directory(path)
    deadline = time.monotonic() + wait_s
    unusable = 0
    abandoned = 0  # breaks given up in a row because the lock changed while it was judged
    while True:
        taken = try_create(path, record, as_file)
        if taken is not None:
            return taken
        finding = judge(path)
        if finding.state is State.FREE:
            if lstat_or_none(path) is None:
                continue  # released between our attempt and our look: try again at once
            # "Free" yet there: either something that is not a lock sits at PATH, or another
            # holder made it between our look and this check (racing breakers of one stale
            # lock). Only what stays that way is refused.
            unusable += 1
            if unusable >= UNUSABLE_LOOKS:
                raise LockUnavailable(
                    f"{path} exists but is not a lock that hold can take ({finding.reason})"
                )
            sleep(POLL_INTERVAL_S)
            continue
        unusable = 0
        if finding.state is State.STALE:
            if not break_stale:
                raise LockStale(path, finding, break_hint)
            if break_stale_lock(path):
                abandoned = 0
                continue
            abandoned += 1  # someone else broke or replaced it, or it keeps changing
            if abandoned >= UNUSABLE_LOOKS:
                raise LockUnavailable(
                    f"the stale lock {path} changed each time it was about to be removed "
                    f"({UNUSABLE_LOOKS} times); left in place"
                )
            sleep(POLL_INTERVAL_S)
            continue
        abandoned = 0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LockHeld(path, finding, wait_s)
        sleep(min(POLL_INTERVAL_S, remaining))


def _refuse_store_directory(path: str) -> None:
    """`hold /srv/store` means the store's lock, not the store: never wait on, or break, a
    directory that is not a lock."""
    lock = store_lock_path(path)
    if lock != path:
        raise LockUnavailable(f"{path} is a directory, not a lock; did you mean {lock}?")


def judge(path: str) -> Finding:
    """What `lockwarden inspect PATH --format owner-record` would say, word for word."""
    return inspect_path(path, datetime.now(UTC), "owner-record").findings[0]


def try_create(path: str, record: HoldRecord, as_file: bool) -> TakenLock | None:
    """Create the lock with its record, or None when something is already there."""
    try:
        return _create_file(path, record) if as_file else _create_directory(path, record)
    except FileExistsError:
        return None
    except OSError as error:
        raise LockUnavailable(f"cannot create {path}: {error.strerror or error}") from error


def _create_directory(path: str, record: HoldRecord) -> TakenLock:
    """mkdir, then the record written into *that* directory through a descriptor of it: a
    racing breaker that moves it aside for a moment cannot make the record land elsewhere,
    or fail, and the directory it puts back is whole."""
    os.mkdir(path, 0o755)
    directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        key = key_of(os.fstat(directory))
        _lock_new(directory, path)
        temporary = f".{RECORD_NAME}.tmp-{record.pid}"
        _write_new(temporary, record.to_json(), directory)
        os.rename(temporary, RECORD_NAME, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):  # ours, made a moment ago: undo it whole
            if key_of(os.lstat(path)) == key_of(os.fstat(directory)):
                shutil.rmtree(path)
        os.close(directory)
        raise
    return TakenLock(path, key, True, record, directory)


def _create_file(path: str, record: HoldRecord) -> TakenLock:
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.hold-{record.pid}-{secrets.token_hex(4)}")
    _write_new(temporary, record.to_json())
    try:
        descriptor = _open_locked(temporary)  # locked before it appears as the lock
    except BaseException:
        os.unlink(temporary)
        raise
    try:
        os.link(temporary, path)  # exclusive like O_EXCL, and the record is already whole
    except OSError as error:
        os.close(descriptor)
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP):  # else: no hard links here
            raise
        _write_new(path, record.to_json())
        descriptor = _open_locked(path)  # until then, the record's live PID holds it
    finally:
        os.unlink(temporary)
    return TakenLock(path, key_of(os.fstat(descriptor)), False, record, descriptor)


def _open_locked(path: str) -> int:
    """A read-only descriptor of the new lock file `path`, holding its flock."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _lock_new(descriptor, path)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _lock_new(descriptor: int, path: str) -> None:
    """flock the lock this process has just made. Nobody waits on it but a process that
    opened the path in the moment since: never wait for that one, give up. A file system that
    refuses the flock (NFS emulates one with a POSIX lock, which needs a descriptor open for
    writing, and a directory cannot be) still gets the hold, by its record alone, as before
    there was a kernel lock: said once, because then a COMMAND that changes its user and
    outlives a killed supervisor leaves a lock that reads stale while it works."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as error:
        message = f"another process locked {path} the moment it was made"
        raise OSError(errno.EAGAIN, message) from error
    except OSError as error:
        log.warning(
            "%s: its file system refuses a flock on it (%s); it is held by its record alone, "
            "so a COMMAND that changes its user and outlives a killed supervisor leaves it "
            "reading stale",
            path,
            error.strerror or error,
        )


def _write_new(path: str, data: bytes, directory: int | None = None) -> None:
    """Create `path` (in the open `directory` if given) exclusively and write `data` in one
    call. No fsync: after a crash the record's boot id proves the lock stale, so durability
    buys nothing here."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o644, dir_fd=directory)
    try:
        written = os.write(descriptor, data)
        if written != len(data):
            raise OSError(f"short write to {path} ({written} of {len(data)} bytes)")
    finally:
        os.close(descriptor)


# Letting go, and breaking a stale lock.


def release(taken: TakenLock) -> bool:
    """Remove the lock if it is still the one this holder created; False when it was not.
    Its kernel lock goes after it: never a moment with the lock in place but unlocked."""
    try:
        return _remove_if_ours(taken)
    finally:
        os.close(taken.descriptor)


def _remove_if_ours(taken: TakenLock) -> bool:
    status = lstat_or_none(taken.path)
    if status is None or key_of(status) != taken.key or not _carries_record(taken):
        log.warning(
            "%s is no longer the lock this process took (removed or replaced by someone "
            "else); left alone",
            taken.path,
        )
        return False
    try:
        _remove_aside(taken.path, taken.key, "released")
    except OSError as error:
        raise LockUnavailable(f"cannot remove {taken.path}: {error.strerror or error}") from error
    return True


def break_stale_lock(path: str) -> bool:
    """Remove a lock `inspect` calls stale, re-checked right before, moved aside atomically.
    True when this process removed it.

    The lock is judged again immediately before the rename; it must still be stale and the
    very artefact that was judged, before and after the judging and once moved aside.
    Otherwise it is put back and this returns False, and the caller judges the lock afresh.

    "The very artefact" is its inode, its mtime and what it holds (the record's bytes, a
    directory's entries): a racing breaker can remove the stale lock and take a new one within
    the moment this one judges, and a file system hands the freed inode number straight to the
    new lock (ext4 does, every time). Its record names another process, and a mtime alone may
    not differ where timestamps are coarse. Renaming within a directory keeps all of these.
    """
    before = _identity(path)
    if before is None:
        return False
    finding = judge(path)
    if finding.state is not State.STALE or _identity(path) != before:
        return False
    try:
        _remove_aside(path, before, "stale", _identity)
    except FileNotFoundError:
        return False  # another process broke it first; the caller judges afresh
    except _PutBack:
        return False  # replaced by a lock another process took meanwhile; it stays
    except OSError as error:
        raise LockUnavailable(f"cannot remove the stale lock {path}: {error}") from error
    log.warning("broke the stale lock %s: %s (%s)", path, finding.reason, finding.proof)
    return True


Identity = tuple[object, ...]


def _identity(path: str) -> Identity | None:
    """The lock artefact at `path` as break_stale_lock compares it; None when it is gone.
    LockUnavailable when it cannot be read whole: what cannot be compared is not removed."""
    record = os.path.join(path, RECORD_NAME)
    try:
        kind, content, status = read_artefact(path, record if os.path.lexists(record) else None)
    except FileNotFoundError:
        return None
    except (OSError, UnsafeRecord) as error:
        raise LockUnavailable(f"cannot read the stale lock to break it: {error}") from error
    return (status.st_dev, status.st_ino, status.st_mtime_ns, kind, content)


def _carries_record(taken: TakenLock) -> bool:
    """Whether the lock still holds the record this holder wrote: an inode number alone may
    be a new lock's, made after this one was removed by someone else."""
    record = os.path.join(taken.path, RECORD_NAME) if taken.is_directory else taken.path
    try:
        return read_record(record)[0] == taken.record.to_json()
    except (OSError, UnsafeRecord):
        return False


class _PutBack(LockUnavailable):
    """What was renamed aside was not the lock to remove, and it is back in its place."""


def _remove_aside(
    path: str,
    expected: object,
    label: str,
    identity: Callable[[str], object] = lambda moved: key_of(os.lstat(moved)),
) -> None:
    directory, name = os.path.split(path)
    aside = os.path.join(directory, f"{name}.{label}-{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(path, aside)
    moved = os.lstat(aside)
    try:
        same = identity(aside) == expected
    except BaseException:
        _put_back(aside, path, moved)
        raise
    if not same:  # replaced between the check and the rename: not ours
        _put_back(aside, path, moved)
        raise _PutBack(f"{path} changed while it was being removed; left in place")
    if stat.S_ISDIR(moved.st_mode):
        shutil.rmtree(aside)
    else:
        os.unlink(aside)


def _put_back(aside: str, path: str, status: os.stat_result) -> None:
    """Undo a rename without replacing whatever appeared at `path` meanwhile (rename(2) would
    silently replace an empty directory another hold has just made)."""
    try:
        if stat.S_ISDIR(status.st_mode):
            _rename_no_replace(aside, path)
        else:
            os.link(aside, path)
            os.unlink(aside)
    except OSError as error:
        raise LockUnavailable(
            f"{path} changed while it was being removed and could not be put back: it is now "
            f"{aside} ({error})"
        ) from error


RENAME_NOREPLACE = 1
AT_FDCWD = -100


def _rename_no_replace(source: str, target: str) -> None:
    """renameat2(RENAME_NOREPLACE): FileExistsError when `target` exists, decided by the
    kernel in the rename itself. Python has no call for it; where the C library or the file
    system lacks it, a check just before the rename stands in."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        result = renameat2(
            AT_FDCWD, os.fsencode(source), AT_FDCWD, os.fsencode(target), RENAME_NOREPLACE
        )
        if result == 0:
            return
        number = ctypes.get_errno()
        if number not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(number, os.strerror(number), target)
    if lstat_or_none(target) is not None:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target)
    os.rename(source, target)


# The Python API.


@contextmanager
def hold(
    path: str | os.PathLike[str],
    role: str,
    *,
    max_hold: float | str | None = None,
    wait: float | str = 0.0,
    file: bool = False,
    break_stale: bool = False,
) -> Iterator[TakenLock]:
    """Hold the lock at `path` for the `with` block, recorded as this process in `role`.

    `max_hold` and `wait` are seconds or durations ("30m"). Raises LockHeld (naming the holder
    as `lockwarden inspect` does), LockStale (unless `break_stale`), or LockUnavailable. The
    lock is removed when the block ends, however it ends; a process killed outright (SIGKILL, or
    SIGTERM with Python's default handler) leaves a lock that `inspect` proves stale.
    """
    max_hold_s = None if max_hold is None else seconds_of(max_hold)
    record = record_for(role, None, max_hold_s)
    taken = acquire(
        os.path.abspath(os.fspath(path)),
        record,
        as_file=file,
        wait_s=seconds_of(wait),
        break_stale=break_stale,
        break_hint="pass break_stale=True to remove it and proceed",
    )
    try:
        yield taken
    finally:
        release(taken)


def seconds_of(value: float | str) -> float:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a duration in seconds")
    return float(value)


# The command-line supervisor.


@dataclass(frozen=True)
class Supervision:
    """How `lockwarden hold` watches COMMAND; all durations in seconds."""

    max_hold_s: float | None = None
    warn_every_s: float = 60.0
    kill_after_s: float | None = None
    kill_grace_s: float = 10.0


def hold_command(
    path: str,
    role: str,
    command: Sequence[str],
    *,
    as_file: bool,
    wait_s: float,
    break_stale: bool,
    supervision: Supervision,
    warn: Callable[[str], None],
) -> int:
    """Take the lock, run COMMAND in the foreground, let go; COMMAND's exit code, or 128+N
    when a signal N killed it (as a shell reports it).

    Signals are blocked and collected with sigtimedwait, so a SIGTERM or Ctrl-C at any moment
    (while waiting, while COMMAND runs) ends in the lock being removed, never in a dead
    supervisor that left it behind.
    """
    watched = {*FORWARDED, signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    record = record_for(role, command, supervision.max_hold_s)
    taken = acquire(
        path, record, as_file=as_file, wait_s=wait_s, break_stale=break_stale, sleep=_wake_on_signal
    )
    try:
        pending = set(TERMINATING) & signal.sigpending()
        if pending:
            raise Interrupted(min(pending))
        return supervise(command, taken, supervision, watched, warn)
    finally:
        release(taken)


def _wake_on_signal(seconds: float) -> None:
    """Sleep while waiting for the lock, but give up at once on SIGINT/SIGTERM/SIGHUP/SIGQUIT."""
    received = signal.sigtimedwait(TERMINATING, seconds)
    if received is not None:
        raise Interrupted(received.si_signo)


def supervise(
    command: Sequence[str],
    taken: TakenLock,
    supervision: Supervision,
    watched: set[signal.Signals],
    warn: Callable[[str], None],
) -> int:
    """Run COMMAND until it, and every process it started that still has the lock's descriptor
    open, have exited: the lock is theirs as long as any of them runs, and is removed only
    then. A daemon COMMAND started that closed its descriptors (gpg-agent, ssh-agent, a build
    daemon) holds nothing, and is not waited for."""
    tree = Tree.adopting(taken.key)
    try:
        child = spawn(command, taken.descriptor)
    except FileNotFoundError:
        warn(f"{command[0]}: command not found")
        return EXIT_NOT_FOUND
    except PermissionError:
        warn(f"{command[0]}: permission denied")
        return EXIT_NOT_EXECUTABLE
    tree.command = child.pid
    label = shlex.join(command)[:120]
    watch = Watch(supervision, time.monotonic(), taken, label, warn)
    while tree.reap():
        if tree.returncode is not None:
            tree.tell_left_behind(label, warn)
        watch.tick(tree, time.monotonic())
        timeout = max(0.0, watch.next_due() - time.monotonic())
        if tree.returncode is not None:  # a holder below may close the lock's descriptor
            timeout = min(timeout, HOLDERS_POLL_S)
        received = signal.sigtimedwait(watched, timeout)
        if received is not None and should_forward(received, tree.members()):
            tree.signal(received.si_signo)
    child.returncode = tree.returncode  # reaped here: Popen must not wait for it again
    return exit_code(tree.returncode if tree.returncode is not None else 0)


@dataclass
class Tree:
    """COMMAND and the processes it started, as the supervisor sees them: its children.

    The supervisor is their subreaper (PR_SET_CHILD_SUBREAPER): a process of the tree whose
    parent exits becomes the supervisor's child, not init's, so the tree's processes are
    always below it, and it is gone once none of the supervisor's children is of it. Children
    the supervisor had before COMMAND (the reader of `judge`, which may still be exiting) are
    not of it. A child's PID stays its own until this process reaps it, here alone, so
    signalling a child found by its parent PID never hits another process."""

    before: set[int]
    key: InodeKey
    command: int | None = None
    returncode: int | None = None
    told: bool = False

    @classmethod
    def adopting(cls, key: InodeKey) -> Tree:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
            number = ctypes.get_errno()
            raise LockUnavailable(f"cannot become the subreaper of COMMAND: {os.strerror(number)}")
        return cls(set(_children()), key)

    def reap(self) -> bool:
        """Collect every child that has ended (COMMAND's status kept); whether any process of
        the tree still runs."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                break
            self.before.discard(pid)
            if pid == self.command:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode is None or bool(self.holding())

    def members(self) -> list[int]:
        """The tree's processes that are the supervisor's children now (COMMAND, and those
        whose parents have exited)."""
        return [pid for pid in _children() if pid not in self.before]

    def holding(self) -> list[int]:
        """The tree's processes, at any depth, that still have the lock open: the work
        COMMAND left running."""
        below = [child.pid for child in _descendants() if child.pid not in self.before]
        return [pid for pid in below if _has_open(pid, self.key)]

    def signal(self, number: int) -> None:
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def tell_left_behind(self, label: str, warn: Callable[[str], None]) -> None:
        """Once: COMMAND has exited, yet processes it started still run under the lock."""
        if self.told:
            return
        self.told = True
        left = self.holding()
        pids = " ".join(str(pid) for pid in left)
        warn(
            f"`{label}` exited, but {len(left)} process(es) it started still run (PID {pids}): "
            f"the lock stays held until they exit; `kill {os.getpid()}` stops them"
        )


def _children() -> list[int]:
    return [child.pid for child in psutil.Process().children()]


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _has_open(pid: int, key: InodeKey) -> bool:
    """Whether the process has a descriptor open on the lock's inode, by the `ino:` line of
    its fdinfo: procfs alone, never the file systems its descriptors are on (a hung mount
    must not stall the supervisor). The device is not compared, so a file of another file
    system with the same inode number keeps it waiting: it errs towards holding. One whose
    descriptors may not be read counts as holding it."""
    directory = f"/proc/{pid}/fdinfo"
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    wanted = f"ino:\t{key[1]}\n"
    for name in names:
        try:
            with open(f"{directory}/{name}") as info:
                if wanted in info.read():
                    return True
        except OSError:
            continue
    return False


def spawn(command: Sequence[str], descriptor: int) -> subprocess.Popen[bytes]:
    """Start COMMAND in our process group (so the terminal's Ctrl-C, Ctrl-Z and window size
    reach it directly) with the terminal as its stdin/stdout/stderr, and the lock's
    descriptor: COMMAND, and what it starts, hold the lock's flock while they keep it open,
    through any change of user (setpriv, su, a setuid program), which no signal survives."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls it
    parent = os.getpid()

    def prepare_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        # The kernel clears this on a change of credentials: then only the descriptor holds.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the supervisor died before the death signal was armed
            os._exit(128 + signal.SIGKILL)

    return subprocess.Popen(list(command), preexec_fn=prepare_child, pass_fds=(descriptor,))


def should_forward(received: signal.struct_siginfo, members: Sequence[int]) -> bool:
    """Forward a signal sent to the supervisor with kill(2) (`kill PID`, systemd, a script);
    not one the terminal sent to the whole foreground group (COMMAND got it already), not
    SIGCHLD, and not one the tree sent to us."""
    if received.si_signo == signal.SIGCHLD:
        return False
    return received.si_code != SI_KERNEL and received.si_pid not in members


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Watch:
    """The timers of a hold: warn past --max-hold every --warn-every, and --kill-after."""

    supervision: Supervision
    started: float
    taken: TakenLock
    label: str
    warn: Callable[[str], None]
    next_warning: float | None = None
    terminate_at: float | None = None
    kill_at: float | None = None
    killing: bool = False

    def __post_init__(self) -> None:
        if self.supervision.max_hold_s is not None:
            self.next_warning = self.started + self.supervision.max_hold_s
        if self.supervision.kill_after_s is not None:
            self.terminate_at = self.started + self.supervision.kill_after_s

    def next_due(self) -> float:
        """When something is due next; at least once a second, to notice a lost SIGCHLD."""
        due = [self.next_warning, self.terminate_at, self.kill_at, time.monotonic() + 1.0]
        return min(moment for moment in due if moment is not None)

    def tick(self, tree: Tree, now: float) -> None:
        held = format_duration(now - self.started)
        if self.next_warning is not None and now >= self.next_warning:
            limit = format_limit(self.supervision.max_hold_s or 0)
            self.warn(
                f"WARNING: `{self.label}` has held {self.taken.path} for {held}, past its "
                f"declared --max-hold of {limit}; lockwarden hold PID {os.getpid()} is still "
                "waiting for it"
            )
            self.next_warning = now + self.supervision.warn_every_s
        if self.terminate_at is not None and now >= self.terminate_at:
            grace = format_duration(self.supervision.kill_grace_s)
            self.warn(
                f"`{self.label}` ran past --kill-after after {held}: sending SIGTERM "
                f"(SIGKILL in {grace} if it is still running)"
            )
            tree.signal(signal.SIGTERM)
            self.terminate_at = None
            self.kill_at = now + self.supervision.kill_grace_s
        if self.kill_at is not None and now >= self.kill_at:
            self.warn(f"`{self.label}` ignored SIGTERM: sending SIGKILL")
            self.killing = True
            self.kill_at = None
        if self.killing:  # each tick: a process whose parent this killed is a child now
            tree.signal(signal.SIGKILL)
