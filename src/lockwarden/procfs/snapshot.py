"""One snapshot of the host per run: kernel locks, their true holders, boot id, processes.

The frozen `Snapshot` is what a run judges by; `HostReader.capture` (reader.py) fills it once,
eagerly, with the facts the run's locks ask for, and nothing reads /proc after that. This
module holds the snapshot and the readers of each /proc file that the capture calls.

`/proc/locks` is read once and indexed by (device, inode). The PID printed there is whoever
*took* the lock (a dead parent, or -1 for OFD locks), so holders are resolved from the `lock:`
lines of `/proc/PID/fdinfo/FD`, in one scan of every process for all the inodes a run cares
about. Process details (command line, cgroup, user) are read only for the processes asked about.

psutil gives the process facts it offers (the process list, status, threads, user); raw /proc
is read only for what psutil lacks or cannot bound: /proc/locks, fdinfo, start ticks and the
kernel's name from stat (psutil gives seconds, identity needs the kernel's ticks; its name()
reads the command line, unbounded, for a name cut at 15 characters), cgroup -> unit,
namespaces, the boot id, and the command line (read on a thread under a deadline: a page fault
on a hung mount blocks it).
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from lockwarden.model import Credentials, FileMode, InodeKey, KernelLock, Process, Workers
from lockwarden.procfs.containers import cgroup_path, delegated_uid
from lockwarden.procfs.sockets import ClientSockets
from lockwarden.support.namespaces import namespace_id, nspid_levels
from lockwarden.support.safe_read import read_pointer

DEFAULT_PID_MAX = 4194304
# The [defaults] fs_timeout default (config.py); the run passes the configured one.
PROC_READ_TIMEOUT_S = 3.0

log = logging.getLogger(__name__)
_K = TypeVar("_K")
_V = TypeVar("_V")


class Descriptor(NamedTuple):
    """An open file descriptor of some process on a watched inode, with its lock lines."""

    pid: int
    fd: int
    locks: tuple[KernelLock, ...]
    write: bool
    tid: int | None = None
    """The thread whose own descriptor table (unshare(CLONE_FILES), or a main thread that
    exited) holds it; None for the process's table, /proc/PID/fd."""
    link: str | None = None
    """Where its /proc link pointed (the name its file has now, " (deleted)" once unlinked),
    read right after its fdinfo and stat matched, so that a descriptor number closed and used
    again for another file in between is all but ruled out; None when it could not be read."""
    file: FileMode | None = None
    """The owner, group and mode of the file it is open on (the stat that matched its inode)."""


@dataclass
class DescriptorScan:
    """Descriptors found on the watched inodes in one walk of /proc/*/fdinfo."""

    by_key: dict[InodeKey, list[Descriptor]] = field(default_factory=dict)
    unreadable_pids: int = 0
    hidden: list[int] = field(default_factory=list)  # the PIDs behind unreadable_pids

    def hide(self, entry: str) -> None:
        """A process whose descriptors could not be read (no ptrace right)."""
        self.unreadable_pids += 1
        self.hidden.append(int(entry))


def index_proc_locks(text: str) -> dict[int, list[str]]:
    """The raw /proc/locks lines grouped by inode number, without parsing them.

    A host can hold tens of thousands of locks while a run asks about a few inodes: grouping
    the lines costs a split per line, parsing them all would cost a typed object per line.
    The inode is the number after the last `:` (in `MAJ:MIN:INODE`; START/END have none).
    """
    index: dict[int, list[str]] = {}
    for line in text.splitlines():
        inode_text = line.rpartition(":")[2].split(" ", 1)[0]
        if inode_text.isdigit():
            index.setdefault(int(inode_text), []).append(line)
    return index


def parse_proc_locks(text: str) -> dict[InodeKey, list[KernelLock]]:
    """Index /proc/locks lines by (st_dev, inode); waiters (`->`) are kept, marked waiting."""
    index: dict[InodeKey, list[KernelLock]] = {}
    for line in text.splitlines():
        lock = parse_lock_line(line)
        if lock is not None:
            index.setdefault(lock.key, []).append(lock)
    return index


def parse_lock_line(line: str) -> KernelLock | None:
    """One `N: [-> ]TYPE ADVISORY|MANDATORY|ACTIVE READ|WRITE PID MAJ:MIN:INODE START END`."""
    parts = line.split()
    if len(parts) < 8 or not parts[0].endswith(":"):
        return None
    waiting = parts[1] == "->"
    fields = parts[2:] if waiting else parts[1:]
    if len(fields) < 7:
        return None
    kind, _advisory, mode, pid_text, location, start_text, end_text = fields[:7]
    try:
        major_text, minor_text, inode_text = location.split(":")
        key = (os.makedev(int(major_text, 16), int(minor_text, 16)), int(inode_text))
        number = int(parts[0].rstrip(":"))
        pid = int(pid_text)
        start = int(start_text)
        end = None if end_text == "EOF" else int(end_text)
    except ValueError:
        return None
    return KernelLock(number, kind, mode, pid, key, start, end, waiting)


# systemd's rule for a unit name (unit_name_is_valid): letters, digits and `:-_.\`, one `@`
# before an instance, a known suffix, at most 255 characters. A cgroup named otherwise was not
# made by systemd (a user made it in a subtree delegated to her) and names no unit to stop. Nor
# does one starting with `-` (systemd's own `-.mount` does): `systemctl stop -x.service` reads
# it as an option.
_UNIT_NAME = re.compile(
    r"[A-Za-z0-9:_.\\][A-Za-z0-9:_.\\-]*(?:@[A-Za-z0-9:_.\\-]*)?\.(?:service|scope)"
)


def valid_unit_name(name: str) -> bool:
    return len(name) <= 255 and _UNIT_NAME.fullmatch(name) is not None


def unit_from_cgroup(text: str) -> tuple[str | None, bool]:
    """The systemd service a process runs in, and whether it is a user service.

    `0::/system.slice/wa-resync.service` -> ("wa-resync.service", False);
    `0::/user.slice/user-1000.slice/user@1000.service/app.slice/sync.service` -> ("sync.service",
    True). A process in a scope (a login session, a terminal) has no unit to stop: None.
    From the path alone (unit_in_cgroup); who made its directory is the reader's to check.
    """
    found = unit_in_cgroup(text)
    return (found.unit, found.user_unit) if found is not None else (None, False)


class CgroupUnit(NamedTuple):
    """A service a cgroup path names (unit_in_cgroup)."""

    unit: str
    path: str
    """Its cgroup directory, from the hierarchy's root."""
    user_unit: bool
    delegated: int | None
    """The UID whose delegated subtree (`user.slice/user-UID.slice/user@UID.service/...`) it
    is in: that user's unit, whatever its name, made by that user; None: outside any."""


def unit_in_cgroup(text: str) -> CgroupUnit | None:
    """The service of a process's cgroup (the unified hierarchy's, else systemd's named one):
    its last directory, when that is a valid service name."""
    path = cgroup_path(text)
    components = [part for part in path.split("/") if part]
    if not components or not components[-1].endswith(".service"):
        return None
    if not valid_unit_name(components[-1]):  # a cgroup's name is anyone's data
        return None
    delegated = delegated_uid(components) if len(components) > 3 else None
    user_unit = any(part.startswith("user@") for part in components[:-1])
    return CgroupUnit(components[-1], "/" + "/".join(components), user_unit, delegated)


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_within(path: str, seconds: float, refusal: bool = False) -> str | None:
    """A /proc file that can block, read on a helper thread for at most `seconds`: None when
    it did not answer in time, "" when it could not be read (the process is gone); with
    `refusal`, a PermissionError (no right to read it) is raised rather than read as "".

    A process's `cmdline` is read from its memory under its mmap lock, which a page fault on a
    hung mount can keep from it (`ps` hangs there). A thread is enough here, unlike for file
    systems (bounded.py): that wait is killable, so a thread left in it ends with the run.
    """
    import threading

    found: list[str] = []
    refused: list[PermissionError] = []

    def read() -> None:
        try:
            found.append(_read_text(path))
        except PermissionError as error:
            if refusal:
                refused.append(error)
            else:
                found.append("")
        except OSError:
            found.append("")

    reader = threading.Thread(target=read, name="proc-read", daemon=True)
    reader.start()
    reader.join(seconds)
    if refused:
        raise refused[0]
    return found[0] if found else None


SMALL_READ = 65536
SMALL_LIMIT = 16 << 20  # an fdinfo entry's lock lines, ~60 bytes each: over 250,000 locks


def _read_small(
    path: str, directory: int | None = None, read_on: Callable[[bytes], bool] | None = None
) -> bytes | None:
    """A small /proc file (an fdinfo entry, `path` relative to the open `directory` if one is
    given) with no text layer; None if gone. PermissionError is raised: the kernel's ptrace
    check refused, which a scan must count.

    Called once per open descriptor on the host, so it avoids open()'s buffered text wrapper,
    which costs more than the read itself, and reads once. An entry that fills that read is
    read on only when `read_on(first part)` says its rest matters (a descriptor on a watched
    inode carrying 1,500 byte-range locks lists 94 KB of them; an inotify descriptor's
    thousands of watches are never wanted), up to SMALL_LIMIT and a whole line.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    except PermissionError:
        raise
    except OSError:
        return None
    try:
        data = os.read(descriptor, SMALL_READ)
        if len(data) < SMALL_READ or read_on is None or not read_on(data):
            return data
        chunks, size = [data], len(data)
        while size < SMALL_LIMIT and (more := os.read(descriptor, SMALL_READ)):
            chunks.append(more)
            size += len(more)
        whole = b"".join(chunks)
        return whole if size < SMALL_LIMIT else whole[: whole.rfind(b"\n") + 1]
    except PermissionError:
        raise
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _open_directory(path: str) -> int | None:
    """A /proc directory opened to open its entries by name; None if gone. PermissionError
    is raised, as by _read_small."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:
        raise
    except OSError:
        return None


class NotCaptured(LookupError):
    """A fact the run's capture did not read was looked up: the capture's request and the
    judging step disagree (a bug, found by any test), never a reason to read the host late."""


def _frozen(mapping: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """What the host looked like at one moment: every fact a run's judging needs, read once by
    `HostReader.capture` (reader.py). Frozen and holding no reader: a look-up of a fact that
    was not captured raises NotCaptured instead of reading /proc."""

    boot_id: str
    hostname: str
    captured_at: datetime
    uptime_s: float
    clock_ticks: int
    pid_max: int
    pid_namespace: int | None
    """The PID namespace whose numbers this /proc shows, which a record's PID must be in to be
    looked up here: not lockwarden's own where it entered one without mounting a /proc
    (support/namespaces.numbered_namespace); None when that cannot be told."""
    nested_pid_namespace: bool
    hosts_proc: bool = False
    """The /proc read is the host's (support/namespaces.proc_is_hosts), even from a nested
    namespace: its /proc/locks lists every flock, wherever its taker runs."""
    boottime_offset_s: float = 0.0
    """What lockwarden's time namespace adds to the boot clock (support/namespaces.py): the
    start ticks read here are shifted by it, a record's need not be."""
    lock_lines: Mapping[int, Sequence[str]] = field(default_factory=_frozen, repr=False)
    """The raw /proc/locks lines by inode number (see index_proc_locks)."""
    euid: int = 0
    ptrace_capable: bool = True
    """Whether this process may read other users' (and more privileged) processes'
    /proc/PID/fdinfo: root with CAP_SYS_PTRACE in its effective set."""
    parsed_locks: Mapping[InodeKey, tuple[KernelLock, ...]] = field(
        default_factory=_frozen, repr=False
    )
    scanned_keys: frozenset[InodeKey] = frozenset()
    found_descriptors: Mapping[InodeKey, tuple[Descriptor, ...]] = field(
        default_factory=_frozen, repr=False
    )
    unreadable_pids: int = 0
    hidden_pids: tuple[int, ...] = ()
    """The processes whose open files could not be read in the descriptor scan."""
    thread_tables: Mapping[InodeKey, tuple[Descriptor, ...]] | None = field(
        default=None, repr=False
    )
    processes: Mapping[int, Process | None] = field(default_factory=_frozen, repr=False)
    mappings: Mapping[InodeKey, tuple[int, ...]] = field(default_factory=_frozen, repr=False)
    blocked: Mapping[int, tuple[BlockedCall, ...]] = field(default_factory=_frozen, repr=False)
    twins: Mapping[int, tuple[int, ...]] = field(default_factory=_frozen, repr=False)
    survivors: Mapping[int, tuple[int, ...]] = field(default_factory=_frozen, repr=False)
    """For a gone PID a record names: the processes still in its process group or session."""
    work_left: Mapping[int, tuple[int, ...]] = field(default_factory=_frozen, repr=False)
    """For a PID a record names: what ran below it when a run last saw it hold the lock,
    still running (LockQuestion.left_work), whether or not the PID runs now."""
    work_untold: frozenset[int] = frozenset()
    """The PIDs among those whose remembered work is not all of it (LeftWork.more)."""
    cwds: WorkingDirectories | None = field(default=None, repr=False)
    working_in: Mapping[tuple[str, ...], tuple[int, ...]] = field(
        default_factory=_frozen, repr=False
    )
    hidden_workers: Mapping[tuple[str, ...], tuple[int, ...]] = field(
        default_factory=_frozen, repr=False
    )
    """Per work directories: processes that could be pointed at them but whose environment
    could not be read."""
    unfollowed_workers: Mapping[tuple[str, ...], tuple[int, ...]] = field(
        default_factory=_frozen, repr=False
    )
    """Per work directories: processes that could reach them by another path but could not be
    followed (a file system there did not answer, a `.git` file could not be read)."""
    fd_targets: Mapping[tuple[int, int], str] = field(default_factory=_frozen, repr=False)
    other_mounts: frozenset[int] = frozenset()
    """PIDs of found descriptors in a mount namespace neither lockwarden's nor PID 1's."""
    machine_id: int | None = None
    client_sockets: ClientSockets | None = field(default=None, repr=False)
    """The sockets of the database sessions a capture was asked about (sockets.py)."""
    children: Mapping[int, tuple[int, ...]] = field(default_factory=_frozen, repr=False)
    """The processes below each client of those sessions (its children, theirs, ...)."""
    commands: Mapping[str, tuple[int, ...] | None] = field(default_factory=_frozen, repr=False)
    """The processes whose command line matches each pattern asked (None: not every command
    line could be read)."""

    @property
    def booted_at(self) -> datetime:
        return self.captured_at - timedelta(seconds=self.uptime_s)

    def node_id(self) -> int:
        """This machine's id as borg records it beside the host name (`uuid.getnode()`)."""
        if self.machine_id is None:
            raise NotCaptured("the machine id was not captured")
        return self.machine_id

    def valid_pid(self, pid: object) -> bool:
        """Only an int in 2..pid_max names a process (0, -1 and True are traps for kill())."""
        return type(pid) is int and 2 <= pid <= self.pid_max

    @property
    def locks(self) -> dict[InodeKey, list[KernelLock]]:
        """Every /proc/locks entry, parsed (all of them: prefer kernel_locks(key)), with the
        locks only the descriptors showed (a nested PID namespace's hidden ones)."""
        every = parse_proc_locks(
            "\n".join(line for lines in self.lock_lines.values() for line in lines)
        )
        every.update((key, list(locks)) for key, locks in self.parsed_locks.items() if locks)
        return every

    def kernel_locks(self, key: InodeKey) -> list[KernelLock]:
        """The /proc/locks entries on this inode: parsed at capture for the keys asked about,
        else from the captured lines (see index_proc_locks)."""
        if key in self.parsed_locks:
            return list(self.parsed_locks[key])
        return locks_on(self.lock_lines, key)

    def process(self, pid: int) -> Process | None:
        """Identity and details of a live (or zombie) process, None when there is none."""
        if not self.valid_pid(pid):
            return None
        if pid not in self.processes:
            raise NotCaptured(f"PID {pid} was not captured")
        return self.processes[pid]

    def descriptors(self, key: InodeKey) -> list[Descriptor]:
        """Every open descriptor on this inode in the processes' tables (/proc/PID/fd)."""
        if key not in self.scanned_keys:
            raise NotCaptured(f"the descriptors on inode {key} were not captured")
        return list(self.found_descriptors.get(key, ()))

    def thread_descriptors(self, key: InodeKey) -> list[Descriptor]:
        """Descriptors on this inode in threads' own tables (/proc/PID/task/TID/fd), which
        /proc/PID/fd does not show: a thread that unshared its descriptor table, or every
        thread of a process whose main thread exited."""
        if self.thread_tables is None or key not in self.scanned_keys:
            raise NotCaptured(f"threads' descriptor tables were not captured for inode {key}")
        return list(self.thread_tables.get(key, ()))

    def blocked_calls(self, pid: int) -> list[BlockedCall]:
        """The lock calls this process's threads are blocked in (fcntl F_SETLKW/F_OFD_SETLKW,
        flock): how an OFD waiter, which /proc/locks shows as PID -1, is named."""
        if pid not in self.blocked:
            raise NotCaptured(f"PID {pid}'s blocked calls were not captured")
        return list(self.blocked[pid])

    def mapping_pids(self, key: InodeKey) -> tuple[int, ...]:
        """Processes that map this inode into memory (a mapping keeps the open file, and so its
        flock, alive after the descriptor is closed)."""
        if key not in self.mappings:
            raise NotCaptured(f"the memory mappings of inode {key} were not captured")
        return self.mappings[key]

    def group_survivors(self, pid: int) -> tuple[int, ...]:
        """The processes left in the process group or session of a gone recorded PID."""
        if pid not in self.survivors:
            raise NotCaptured(f"what PID {pid} left running was not captured")
        return self.survivors[pid]

    def left_running(self, pid: int) -> tuple[int, ...]:
        """What ran below a recorded PID when a run last saw it hold its lock, and still runs
        (LockQuestion.left_work); () when nothing was remembered of it."""
        return self.work_left.get(pid, ())

    def namespace_twins(self, pid: int) -> tuple[int, ...]:
        """Processes (by their PID here) whose PID in a nested namespace is `pid`."""
        if pid not in self.twins:
            raise NotCaptured(f"the namespace twins of PID {pid} were not captured")
        return self.twins[pid]

    def working_directories(self) -> WorkingDirectories:
        """Every process's working directory (captured only when a lock asks)."""
        if self.cwds is None:
            raise NotCaptured("working directories were not captured")
        return self.cwds

    def unfollowed(self, directories: Iterable[str]) -> tuple[int, ...]:
        """PIDs that may reach `directories` by another path but could not be followed."""
        return self.unfollowed_workers.get(tuple(directories), ())

    def processes_working_in(self, directories: Iterable[str]) -> list[int]:
        """PIDs whose working directory is one of `directories` or below it."""
        wanted = tuple(directories)
        if wanted not in self.working_in:
            raise NotCaptured(f"the processes working in {', '.join(wanted)} were not captured")
        return list(self.working_in[wanted])

    def sockets(self) -> ClientSockets:
        """The asked database sessions' sockets: their client ends and who has them open."""
        if self.client_sockets is None:
            raise NotCaptured("no database session's sockets were captured")
        return self.client_sockets

    def descendants(self, pid: int) -> tuple[int, ...]:
        """The processes below a session's client, oldest first (at most 64)."""
        if pid not in self.children:
            raise NotCaptured(f"the processes below PID {pid} were not captured")
        return self.children[pid]

    def running(self, pattern: str) -> tuple[int, ...] | None:
        """The processes whose command line (lower-cased) matches `pattern`, this one aside;
        None when not every command line could be read."""
        if pattern not in self.commands:
            raise NotCaptured(f"the processes running {pattern!r} were not captured")
        return self.commands[pattern]

    def fd_target(self, pid: int, fd: int) -> str | None:
        """Where a found descriptor's /proc/PID/fd link pointed: the name its file had then
        (`discover` shows it; check/source.py's in_place proves by it that an inode is still a
        lock's), None when it could not be read."""
        return self.fd_targets.get((pid, fd))


def locks_on(lock_lines: Mapping[int, Sequence[str]], key: InodeKey) -> list[KernelLock]:
    """The /proc/locks entries on this inode, parsed from the lines of its inode number."""
    lines = lock_lines.get(key[1])
    if not lines:
        return []
    return parse_proc_locks("\n".join(lines)).get(key, [])


def processes_under(cwds: WorkingDirectories, roots: Iterable[str]) -> tuple[int, ...]:
    """PIDs whose working directory is one of `roots` (resolved) or below it."""
    return tuple(
        pid
        for pid, cwd in cwds.by_pid.items()
        if any(cwd == root or cwd.startswith(root + "/") for root in roots)
    )


class Pointing(NamedTuple):
    """What the command lines and environments of a lock's workers say (`_pointing_into`)."""

    pointing: tuple[int, ...]
    """Workers a path they name ties to the directories."""
    hidden: tuple[int, ...]
    """Workers whose command line or environment could not be read."""
    untied: Mapping[int, tuple[str, ...]]
    """Every other worker, with the paths it names, as it wrote them: for `reached_from`."""


def _pointing_into(
    proc: str,
    cwds: WorkingDirectories,
    roots: Sequence[str],
    workers: Workers,
    skip: set[int],
    seconds: float = PROC_READ_TIMEOUT_S,
) -> Pointing:
    """Workers (not in `skip`) whose command line or environment names a path in `roots`,
    resolved against their working directory; those that cannot be ruled out because their
    command line or environment could not be read (no right, or it did not answer); and the
    others, with the paths they name. Paths are compared as written, normalised but not
    resolved: resolving one could hang on a dead mount."""
    pointing: list[int] = []
    hidden: list[int] = []
    untied: dict[int, tuple[str, ...]] = {}
    for pid, cwd in cwds.by_pid.items():
        if pid in skip or not _named(proc, pid, workers):
            continue
        try:
            command = read_within(f"{proc}/{pid}/cmdline", seconds, refusal=True)
            environment = read_within(f"{proc}/{pid}/environ", seconds, refusal=True)
        except PermissionError:
            hidden.append(pid)
            continue
        if command is None or environment is None:
            hidden.append(pid)
            continue
        values = [*_path_arguments(command), *_variables(environment, workers.variables)]
        if any(_inside(os.path.normpath(os.path.join(cwd, value)), roots) for value in values):
            pointing.append(pid)
        else:
            untied[pid] = tuple(values)
    return Pointing(tuple(pointing), tuple(hidden), untied)


def _named(proc: str, pid: int, workers: Workers) -> bool:
    if not workers.names:
        return True
    try:
        return workers.may_be(_read_text(f"{proc}/{pid}/comm").rstrip("\n"))
    except OSError:
        return False


MOST_LEVELS = 256
"""How far up from one place a worker is followed (PATH_MAX allows 2,048 levels of `x/`)."""


def reached_from(
    proc: str, pid: int, values: Sequence[str], pointers: Sequence[tuple[str, str]]
) -> frozenset[InodeKey]:
    """The identities of the directories a process may work on, as it sees the file system
    (through its /proc cwd and root, so that a bind mount, a symlink or another mount namespace
    changes nothing): its working directory and each path it names (`values`), each with every
    directory above it; and where a pointer file (`pointers`: name, prefix) lies in one of
    those, the directory it names and every one above that. Touches the file systems there:
    run it where a hung one cannot stall the run (bounded.py). Raises PermissionError when the
    process may not be followed, UnsafeRecord when a pointer file cannot be read."""
    base = f"{proc}/{pid}"
    if not os.path.lexists(f"{base}/cwd"):
        return frozenset()  # gone
    reached: set[InodeKey] = set()
    for start in (f"{base}/cwd", *(_as_seen_by(base, value) for value in values)):
        for path, key in _upwards(start):
            if key in reached:
                continue  # its pointer file, if any, was read already
            reached.add(key)
            for pointer in pointers:
                target = _pointed_from(base, path, pointer)
                if target is not None:
                    reached.update(key for _path, key in _upwards(target))
    return frozenset(reached)


def _as_seen_by(base: str, value: str) -> str:
    """A path a process named, through its own root or working directory, with the symlinks
    on the way resolved as the process would: the kernel restarts an absolute symlink met
    below /proc/PID/root at lockwarden's root, not the process's (a container's `/link ->
    /data` means its own /data). Raises OSError (ELOOP) on a symlink loop."""
    root = f"{base}/root"
    start = root if value.startswith("/") else f"{base}/cwd"
    return _resolved_below(root, start, value.split("/"))


SYMLINK_HOPS = 40  # the kernel's MAXSYMLINKS


def _resolved_below(root: str, path: str, parts: list[str]) -> str:
    """`parts` walked from `path` one name at a time, never above `root`; a name not there
    (or not a symlink) is taken as it is, for _upwards to find missing."""
    hops = 0
    pending = list(parts)
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == ".." and path == root:
            continue  # `..` of the process's root is its root
        candidate = f"{path}/{part}"
        try:
            target = os.readlink(candidate)
        except OSError:  # not a symlink, or not there
            path = candidate
            continue
        hops += 1
        if hops > SYMLINK_HOPS:
            raise OSError(errno.ELOOP, f"too many symlinks in {candidate}")
        pending = target.split("/") + pending
        if target.startswith("/"):
            path = root
    return path


def _upwards(start: str) -> list[tuple[str, InodeKey]]:
    """`start` (a file's directory for a file) and every directory above it, with their
    identities, climbing by `..` so that the climb stays in the process's view; none when it
    is not there."""
    path = start
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not stat.S_ISDIR(status.st_mode):
        path = os.path.dirname(path)
    found: list[tuple[str, InodeKey]] = []
    for _level in range(MOST_LEVELS):
        status = os.stat(path)
        key = (status.st_dev, status.st_ino)
        if found and key == found[-1][1]:  # `..` of a root is itself
            break
        found.append((path, key))
        path = f"{path}/.."
    return found


def _pointed_from(base: str, directory: str, pointer: tuple[str, str]) -> str | None:
    """Where the `pointer` file in `directory` points, through the process's own view."""
    name, prefix = pointer
    target = read_pointer(f"{directory}/{name}", prefix)
    if target is None:
        return None
    return _as_seen_by(base, target) if target.startswith("/") else f"{directory}/{target}"


def _path_arguments(command: str) -> list[str]:
    """Every argument that may name a path: `--opt=VALUE`'s value, and each other word."""
    found = []
    for argument in command.split("\0"):
        if argument.startswith("-") and "=" in argument:
            argument = argument.partition("=")[2]
        if argument and not argument.startswith("-"):
            found.append(argument)
    return found


def _variables(environment: str, names: tuple[str, ...]) -> list[str]:
    wanted = tuple(f"{name}=" for name in names)
    return [
        entry.partition("=")[2] for entry in environment.split("\0") if entry.startswith(wanted)
    ]


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


class WorkingDirectories(NamedTuple):
    """Every process's working directory, and the processes whose one could not be read."""

    by_pid: Mapping[int, str]
    unreadable_pids: tuple[int, ...]


def _read_working_directories(proc: str, entries: tuple[str, ...]) -> WorkingDirectories:
    by_pid: dict[int, str] = {}
    unreadable: list[int] = []
    for entry in entries:
        try:
            cwd = os.readlink(f"{proc}/{entry}/cwd")
        except PermissionError:
            unreadable.append(int(entry))
            continue
        except OSError:  # gone, or a kernel thread
            continue
        # A directory removed under a process (a linked work tree deleted while its git waits
        # for an editor) is still where it works: kept by the name it had, it ties the
        # process to a lock there as before; left out, that git would prove a live lock stale.
        by_pid[int(entry)] = cwd.removesuffix(" (deleted)")
    return WorkingDirectories(by_pid, tuple(unreadable))


class ProcessFacts(NamedTuple):
    """What one read of a process's status file tells (its credentials too, Credentials)."""

    state: str  # the kernel's one-letter state: R, S, D, Z, X, ...
    threads: int
    uid: int
    user: str


def _process_facts(status_text: str) -> ProcessFacts:
    """From /proc/PID/status (`State:\tS (sleeping)`, `Threads:`, `Uid:`'s real uid), read
    once with the credentials the same text gives; the user is the uid's passwd name, else
    the number. Raises ValueError when a line is missing (not a status file)."""
    fields = {
        name: value.split()
        for name, _, value in (line.partition(":") for line in status_text.splitlines())
    }
    try:
        state, threads, uid = fields["State"][0], int(fields["Threads"][0]), int(fields["Uid"][0])
    except (KeyError, IndexError) as error:
        raise ValueError(f"not a status file: {error}") from None
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return ProcessFacts(state=state, threads=threads, uid=uid, user=user)


def _scan_nested_pids(
    proc: str, entries: tuple[str, ...], own_namespace: int | None
) -> dict[int, tuple[int, ...]]:
    """Inner PID -> outer PIDs, from the `NSpid:` lines (one PID per level, the /proc's first)
    of the processes in another PID namespace than the one the /proc numbers (`own_namespace`);
    the namespace link is one readlink, so the status file is read only for those."""
    nested: dict[int, list[int]] = {}
    for part in _shared_walk(entries, lambda part: _nested_levels(proc, part, own_namespace)):
        for levels in part:
            for inner in levels[1:]:
                nested.setdefault(inner, []).append(levels[0])
    return {inner: tuple(outer) for inner, outer in nested.items()}


def children_lists(proc: str, pid: int, limit: int) -> list[int] | None:
    """The processes below `pid` (its children, theirs, ...), nearest first, at most `limit`,
    from the kernel's list of each thread's children (/proc/PID/task/TID/children): a few
    reads, where the parent of every process is one walk of them all. None when the kernel
    keeps no such lists (built without CONFIG_PROC_CHILDREN)."""
    if not os.path.exists(f"{proc}/{pid}/task/{pid}/children"):
        return None if os.path.exists(f"{proc}/{pid}/task/{pid}") else []
    found: list[int] = []
    queue, seen = [pid], {pid}
    while queue and len(found) < limit:
        parent = queue.pop(0)
        for child in _children_of(proc, parent):
            if child not in seen and len(found) < limit:
                seen.add(child)
                found.append(child)
                queue.append(child)
    return found


def _children_of(proc: str, pid: int) -> list[int]:
    """The children of every thread of `pid` (none once it is gone)."""
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            children.extend(
                int(part) for part in _read_text(f"{proc}/{pid}/task/{task}/children").split()
            )
        except OSError:
            continue  # the thread ended
    return children


def _scan_groups(
    proc: str, entries: tuple[str, ...], leaders: frozenset[int]
) -> dict[int, tuple[int, ...]]:
    """Leader PID -> the processes whose process group or session is that PID, from each
    process's stat (fields 5 and 6)."""
    found: dict[int, list[int]] = {}
    for part in _shared_walk(entries, lambda part: _group_members(proc, part, leaders)):
        for leader, pid in part:
            found.setdefault(leader, []).append(pid)
    return {leader: tuple(pids) for leader, pids in found.items()}


def _group_members(
    proc: str, entries: tuple[str, ...], leaders: frozenset[int]
) -> list[tuple[int, int]]:
    members = []
    for entry in entries:
        try:
            text = _read_text(f"{proc}/{entry}/stat")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        group, session = int(fields[2]), int(fields[3])
        leader = group if group in leaders else session if session in leaders else None
        if leader is not None and int(entry) != leader:
            members.append((leader, int(entry)))
    return members


def _nested_levels(
    proc: str, entries: tuple[str, ...], own_namespace: int | None
) -> list[list[int]]:
    """The NSpid levels of each process of `entries` outside the /proc's PID namespace."""
    found = []
    for entry in entries:
        if own_namespace is not None and namespace_id(f"{proc}/{entry}/ns/pid") == own_namespace:
            continue
        try:
            status = _read_text(f"{proc}/{entry}/status")
        except OSError:
            continue
        found.append(list(nspid_levels(status)))
    return found


# What a descriptor's link names when it cannot be a lock file: pipes, sockets, epoll and
# event descriptors, terminals and the character devices every daemon has open. One readlink
# (~5 us) tells, where reading its fdinfo costs an open, a read and a close (~9 us): on a host
# of 1,000 ordinary processes that is most descriptors.
NEVER_LOCK_PREFIXES = ("pipe:[", "socket:[", "anon_inode:", "/dev/pts/")
NEVER_LOCK_TARGETS = frozenset(
    {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}
)


SPLIT_AT = 256
"""Processes from which a whole-host walk is shared by two threads. The walk's time is the
kernel's (listing and readlinks in /proc, outside the GIL): two threads took the descriptor
walk of 1,000 processes from 25 to 16 ms on a 2-core machine. An agent takes no more."""

_T = TypeVar("_T")


def _shared_walk(entries: tuple[str, ...], walk: Callable[[tuple[str, ...]], _T]) -> list[_T]:
    """`walk` over `entries`, in two halves on two threads when there are many; the results
    in the order of the halves, and an error in either raised here."""
    if len(entries) < SPLIT_AT:
        return [walk(entries)]
    import threading

    half = len(entries) // 2
    other: list[_T] = []
    failed: list[BaseException] = []

    def second() -> None:
        try:
            other.append(walk(entries[half:]))
        except BaseException as error:  # re-raised in the run's own thread
            failed.append(error)

    thread = threading.Thread(target=second, name="proc-walk")
    try:
        thread.start()
    except RuntimeError:  # at the process limit (ulimit -u, a unit's TasksMax): walk alone
        return [walk(entries)]
    try:
        first = walk(entries[:half])
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return [first, *other]


class Names(NamedTuple):
    """What lets the descriptor walk pass over a file on its link alone (`_scan_descriptors`).

    Each watched inode has one name, verified in the claims phase: a directory (never hard
    linked) or a file with one link, lstat-ed at the path the claim read. A descriptor on it then
    shows that name as its link's last component, whatever directory the process reached it
    through (a bind mount, a chroot, a rename since: the kernel prints the entry's name now),
    unless the file itself is a mount point, a file bind-mounted under another name; so the
    names of the mount points whose mounted root has a watched name count too, read from the
    mount tables of `namespaces` (lockwarden's own and PID 1's). A process in any other mount
    namespace, a link that names no path or an unlinked entry (` (deleted)`: a hard link removed
    since), or one that cannot be read, has its fdinfo read as without Names."""

    accepted: frozenset[str]
    namespaces: frozenset[str]


def names_here(proc: str, names: frozenset[str]) -> Names:
    """`names` and the mount points that show one of them, in this process's and PID 1's mount
    namespaces (PID 1's, when not ours, is the host's: the shipped unit runs lockwarden in a
    private one). A namespace whose link cannot be read is left out: its processes' fdinfo is
    read."""
    pairs: list[tuple[str, str]] = []  # (the mounted root's name, the mount point's name)
    namespaces = set()
    for pid in ("self", "1"):
        namespace = _link(f"{proc}/{pid}/ns/mnt")
        if namespace is None or namespace in namespaces:
            continue
        namespaces.add(namespace)
        for mount in _mounts(f"{proc}/{pid}/mountinfo", errors="surrogateescape"):
            pair = (mount.root.rpartition("/")[2], mount.point.rpartition("/")[2])
            if all(pair):  # a whole file system's root has no name
                pairs.append(pair)
    # A file bind-mounted under another name shows that name, and a watched path that is
    # itself such a mount point is reached under its source's name too: both ways, to the
    # end of any chain of them.
    accepted = set(names)
    while True:
        more = {b for a, b in pairs if a in accepted} | {a for a, b in pairs if b in accepted}
        if more <= accepted:
            return Names(frozenset(accepted), frozenset(namespaces))
        accepted |= more


def _scan_descriptors(
    proc: str, keys: frozenset[InodeKey], entries: tuple[str, ...], names: Names | None = None
) -> DescriptorScan:
    """Every descriptor on these inodes. Called once per run, this walk visits every open
    descriptor on the host (tens of thousands on a busy one), so it stays lean: a readlink to
    pass over pipes, sockets and devices, else one open/read/close of its fdinfo and a byte
    comparison of its inode (fdinfo, not stat: a stat could hang on a dead network mount).
    With `names` (every inode's one name known), a file whose link shows none of them is
    passed over on its link alone, as a pipe is."""
    if not keys:
        return DescriptorScan()
    inodes = frozenset(str(inode).encode() for _device, inode in keys)
    parts = _shared_walk(entries, lambda part: _scan_part(proc, keys, inodes, part, names))
    scan = parts[0]
    for part in parts[1:]:
        for key, found in part.by_key.items():
            scan.by_key.setdefault(key, []).extend(found)
        scan.unreadable_pids += part.unreadable_pids
        scan.hidden.extend(part.hidden)
    return scan


def _scan_part(
    proc: str,
    keys: frozenset[InodeKey],
    inodes: frozenset[bytes],
    entries: tuple[str, ...],
    names: Names | None,
) -> DescriptorScan:
    scan = DescriptorScan()
    for entry in entries:
        base = f"{proc}/{entry}"
        try:
            fd_names = os.listdir(f"{base}/fd")
        except PermissionError:
            scan.hide(entry)
            continue
        except OSError:
            continue
        if not fd_names:
            continue
        if names is not None and _link(f"{base}/ns/mnt") in names.namespaces:
            fd_names = _named_only(base, fd_names, names.accepted)
        found, readable = _table_descriptors(base, int(entry), fd_names, keys, inodes)
        for key, descriptor in found:
            scan.by_key.setdefault(key, []).append(descriptor)
        if not readable:  # its fd list is visible, its fdinfo is not (no ptrace right)
            scan.hide(entry)
    return scan


def _named_only(base: str, fd_names: list[str], accepted: frozenset[str]) -> list[str]:
    """The descriptors of one table whose fdinfo must be read: those whose link shows one of
    the accepted names, an unlinked entry, no path, or could not be read (Names)."""
    links = f"{base}/fd/"
    wanted = []
    for fd_name in fd_names:
        try:
            target = os.readlink(links + fd_name)
        except FileNotFoundError:
            continue  # closed meanwhile
        except OSError:  # no right to it, or a path longer than PATH_MAX: fdinfo decides
            wanted.append(fd_name)
            continue
        if not _passed_over(target, accepted):
            wanted.append(fd_name)
    return wanted


def _passed_over(target: str, accepted: frozenset[str]) -> bool:
    """Whether the walk by names passes a descriptor with this link over: a pipe, socket or
    device, or a path whose last name is none of the accepted ones. Not an unlinked entry, nor
    a file of a detached mount (its link is only "/": no name), nor any other link."""
    if not target.startswith("/"):
        return target in NEVER_LOCK_TARGETS or target.startswith(NEVER_LOCK_PREFIXES)
    name = target.rpartition("/")[2]
    return bool(name) and name not in accepted and not target.endswith(DELETED)


def carrier_passed_over(proc: str, scan: DescriptorScan, names: Names) -> bool:
    """After a walk by names: whether a lock-carrying descriptor it found (in a process read in
    full, of another mount namespace) shows a name the walk passes over, or can no longer be
    read. Every descriptor sharing its open file shows the same link, so one in a process here
    may have been passed over, and "every lock carried" would not mean "every holder found":
    only a full walk is sure. (Read after the walk, a carrier closed since, or its number
    reused for another file, counts too: the sharer here may still hold the lock.)"""
    for descriptors in scan.by_key.values():
        for descriptor in descriptors:
            if not descriptor.locks:
                continue
            try:
                target = os.readlink(f"{proc}/{descriptor.pid}/fd/{descriptor.fd}")
            except OSError:
                return True
            if _passed_over(target, names.accepted):
                return True
    return False


def _table_descriptors(
    base: str,
    pid: int,
    fd_names: list[str],
    keys: frozenset[InodeKey],
    inodes: frozenset[bytes],
) -> tuple[list[tuple[InodeKey, Descriptor]], bool]:
    """The descriptors of one descriptor table (`base`/fd, `base`/fdinfo) on these inodes,
    and False when its fdinfo could not be read (what was found before is kept).

    A descriptor's inode comes from its fdinfo (an open, a read and a close); its link (one
    readlink) is cheaper and passes over pipes, sockets and devices, but a link that names a
    file was a wasted call. So the link is read first only while the descriptor before was not
    a file; after a file, fdinfo alone decides, and a descriptor on the same mount as that file
    is taken for a file too (descriptors come in runs: 50 data files, then 200 sockets). The
    order changes what a descriptor costs, never what is found. The fdinfo directory is opened
    once, at the first descriptor it must tell about, so each entry is opened by its name."""
    links = f"{base}/fd/"
    found: list[tuple[InodeKey, Descriptor]] = []
    infos: int | None = None
    file_mount: bytes | None = None  # the mount of the file before, while in a run of files
    try:
        for fd_name in fd_names:
            if file_mount is None:
                try:
                    target = os.readlink(links + fd_name)
                except FileNotFoundError:
                    continue  # closed meanwhile
                except OSError:  # no right to it, or a path longer than PATH_MAX: fdinfo decides
                    target = ""
                if target in NEVER_LOCK_TARGETS or target.startswith(NEVER_LOCK_PREFIXES):
                    continue
            if infos is None and (infos := _open_directory(f"{base}/fdinfo")) is None:
                break  # the process (or thread) is gone
            raw = _read_small(fd_name, infos, lambda first: _watched(first, inodes))
            if raw is None:  # closed meanwhile
                file_mount = None
                continue
            mount, inode = _fdinfo_identity(raw)
            # fdinfo alone goes on deciding while descriptors are files on one mount
            file_mount = mount if inode is not None and file_mount in (None, mount) else None
            if inode is not None and inode not in inodes:
                continue  # kernels before 5.14 print no ino: line; they pay for a stat instead
            descriptor = _descriptor(links + fd_name, pid, int(fd_name), raw, keys)
            if descriptor is not None:
                found.append(descriptor)
    except PermissionError:  # the kernel's ptrace check refused its fdinfo
        return found, False
    finally:
        if infos is not None:
            os.close(infos)
    return found, True


def _descriptor(
    link: str, pid: int, fd: int, raw: bytes, keys: frozenset[InodeKey] | None
) -> tuple[InodeKey, Descriptor] | None:
    """A descriptor whose fdinfo inode matched (`keys` None: any): stat its fd link for the
    device too, and read the link (what shows whether the file is still at a lock's path)."""
    try:
        status = os.stat(link)
    except OSError:
        return None
    key = (status.st_dev, status.st_ino)
    if keys is not None and key not in keys:
        return None
    try:
        target: str | None = os.readlink(link)
    except OSError:
        target = None
    flags, lock_lines = _fdinfo_details(raw.decode("utf-8", errors="replace"))
    locks = tuple(lock for lock in map(parse_lock_line, lock_lines) if lock is not None)
    write = flags is not None and (flags & os.O_ACCMODE) != os.O_RDONLY
    return key, Descriptor(pid, fd, locks, write, link=target, file=file_mode(status))


def _scan_locked_descriptors(proc: str, entries: tuple[str, ...]) -> DescriptorScan:
    """Every descriptor whose fdinfo shows a lock, whatever its inode: what discover lists in
    a nested PID namespace, where /proc/locks leaves out a lock whose taker is gone. A full
    walk (an fdinfo read per descriptor), paid only there."""
    scan = DescriptorScan()
    for entry in entries:
        base = f"{proc}/{entry}"
        try:
            fd_names = os.listdir(f"{base}/fdinfo")
        except PermissionError:
            scan.hide(entry)
            continue
        except OSError:
            continue
        for fd_name in fd_names:
            try:
                raw = _read_small(f"{base}/fdinfo/{fd_name}", read_on=lambda _: True)
            except PermissionError:
                scan.hide(entry)
                break
            if raw is None or b"\nlock:" not in raw:
                continue
            found = _descriptor(f"{base}/fd/{fd_name}", int(entry), int(fd_name), raw, None)
            if found is not None:
                scan.by_key.setdefault(found[0], []).append(found[1])
    return scan


def _watched(raw: bytes, inodes: frozenset[bytes]) -> bool:
    """Whether an fdinfo entry may be on one of these inodes (an entry with no `ino:`, before
    Linux 5.14, may be)."""
    inode = _fdinfo_identity(raw)[1]
    return inode is None or inode in inodes


DELETED = " (deleted)"


def descriptor_path(proc: str, pid: int, fd: int) -> str | None:
    """The path a descriptor was opened by (its link; an unlinked file's old name); None for
    a socket or pipe, or a descriptor gone or not ours to read."""
    try:
        target = os.readlink(f"{proc}/{pid}/fd/{fd}")
    except OSError:
        return None
    return target.removesuffix(DELETED) if target.startswith("/") else None


def reachable_path(proc: str, pid: int, path: str, fd: int | None = None) -> str:
    """`path` as a process names it (by its descriptor `fd`), as this process can reach it.

    Another mount namespace (a container's) names files by its own mounts: `/shared/x.lock` is
    no file of the host's. The descriptor's mount (fdinfo `mnt_id`, found in the process's
    mountinfo) says which file system and which directory of it the name is under; the same
    file system mounted here gives the name this process uses (the volume's host path). Only
    /proc is read, never the file system itself (a stat can hang on a dead mount). When no
    mount here shows that part of it, the file is reached through the process's own root
    (`/proc/PID/root/...`). The host's namespace is PID 1's; the shipped unit runs lockwarden
    in a private one of its own (ProtectSystem=, PrivateMounts=) with the host's paths."""
    try:
        theirs = os.readlink(f"{proc}/{pid}/ns/mnt")
    except OSError:
        return path
    ours = {_link(f"{proc}/self/ns/mnt"), _link(f"{proc}/1/ns/mnt")} - {None}
    if theirs in ours or not ours:
        return path
    translated = _translated(proc, pid, path, fd) if fd is not None else None
    return translated or f"{proc}/{pid}/root{path}"


def _link(path: str) -> str | None:
    """A link's target; None when it cannot be read (PID 1's may be refused to us)."""
    try:
        return os.readlink(path)
    except OSError:
        return None


class _Mount(NamedTuple):
    mount_id: int
    device: str  # MAJOR:MINOR
    root: str  # the directory of the file system mounted there
    point: str


def _mounts(path: str, errors: str = "replace") -> list[_Mount]:
    """The mounts of a mountinfo file; `errors="surrogateescape"` keeps a name that is not
    UTF-8 as os.readlink() returns it."""
    try:
        with open(path, encoding="utf-8", errors=errors) as handle:
            text = handle.read()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0].isdigit():
            root, point = (_unescape_mount(field) for field in fields[3:5])
            found.append(_Mount(int(fields[0]), fields[2], root, point))
    return found


def _unescape_mount(field: str) -> str:
    """mountinfo's octal escapes (`\\040` for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def _translated(proc: str, pid: int, path: str, fd: int) -> str | None:
    """The name here of the file the process's descriptor is open on (see reachable_path)."""
    try:
        raw = _read_small(f"{proc}/{pid}/fdinfo/{fd}")
    except PermissionError:
        return None
    match = re.search(rb"^mnt_id:\s*(\d+)", raw or b"", re.M)
    if match is None:
        return None
    mount_id = int(match.group(1))
    theirs = next((m for m in _mounts(f"{proc}/{pid}/mountinfo") if m.mount_id == mount_id), None)
    if theirs is None or not _under(path, theirs.point):
        return None
    inside = _join(theirs.root, path[len(theirs.point.rstrip("/")) :])  # path within the fs
    here = [
        mount
        for mount in _mounts(f"{proc}/self/mountinfo")
        if mount.device == theirs.device and _under(inside, mount.root)
    ]
    if not here:
        return None
    best = max(here, key=lambda mount: len(mount.root))
    return _join(best.point, inside[len(best.root.rstrip("/")) :])


def _under(path: str, directory: str) -> bool:
    directory = directory.rstrip("/")
    return path == directory or path.startswith(directory + "/") or directory == ""


def _join(base: str, rest: str) -> str:
    return (base.rstrip("/") + "/" + rest.lstrip("/")) if rest else base


def descriptor_inode(proc: str, pid: int, fd: int) -> int | None:
    """The inode of one descriptor, from its fdinfo (no stat: a stat can hang on a dead mount);
    None when it is gone, not ours to read, or the kernel prints no `ino:` (before 5.14)."""
    try:
        raw = _read_small(f"{proc}/{pid}/fdinfo/{fd}")
    except PermissionError:
        return None
    inode = _fdinfo_identity(raw)[1] if raw is not None else None
    return int(inode) if inode is not None else None


def held_locks(proc: str, pid: int, key: InodeKey) -> list[KernelLock] | None:
    """The kernel locks granted to `pid`'s descriptors on this inode, from their fdinfo `lock:`
    lines (a holder may hold several: a flock and byte ranges); None when its descriptors
    cannot all be read, so what it holds is not known."""
    try:
        names = os.listdir(f"{proc}/{pid}/fdinfo")
        held = []
        for name in names:
            raw = _read_small(f"{proc}/{pid}/fdinfo/{name}", read_on=lambda _: True)
            if raw is not None:  # else closed since it was listed
                held += [lock for lock in _granted_locks(raw) if lock.key == key]
    except OSError:
        return None
    return held


def descriptor_locks(proc: str, pid: int, fd: int) -> list[KernelLock] | None:
    """The kernel locks held through one descriptor (its fdinfo `lock:` lines: an OFD lock
    its open file description owns, a flock, a POSIX lock taken through it); None when it
    cannot be read."""
    try:
        raw = _read_small(f"{proc}/{pid}/fdinfo/{fd}", read_on=lambda _: True)
    except OSError:
        return None
    return None if raw is None else _granted_locks(raw)


def _granted_locks(raw: bytes) -> list[KernelLock]:
    """The granted locks an fdinfo entry's `lock:` lines list (most entries carry none)."""
    if b"\nlock:" not in raw:
        return []
    lines = _fdinfo_details(raw.decode("utf-8", errors="replace"))[1]
    return [lock for lock in map(parse_lock_line, lines) if lock is not None and not lock.waiting]


def _fdinfo_identity(raw: bytes) -> tuple[bytes | None, bytes | None]:
    """The digits of the `mnt_id:` and `ino:` fields of an fdinfo entry, None for a field it
    has not (no ino: before Linux 5.14, no mnt_id: before 3.15). Read once per descriptor on
    the host: the kernel prints `ino:` on the line after `mnt_id:`, which two partitions find;
    an entry laid out otherwise is searched field by field."""
    _before, found_mount, rest = raw.partition(b"\nmnt_id:\t")
    mount, found_inode, rest = rest.partition(b"\nino:\t")
    inode = rest.partition(b"\n")[0]
    if found_mount and found_inode and mount.isdigit() and inode.isdigit():
        return mount, inode
    return _fdinfo_field(raw, b"\nmnt_id:"), _fdinfo_field(raw, b"\nino:")


def _fdinfo_field(raw: bytes, name: bytes) -> bytes | None:
    """The digits of one numeric field of an fdinfo entry (`name`: `\\nino:`), or None."""
    start = raw.find(name)
    if start < 0:
        return None
    end = raw.find(b"\n", start + 1)
    value = raw[start + len(name) : end if end >= 0 else len(raw)].strip()
    return value if value.isdigit() else None


def _fdinfo_details(info: str) -> tuple[int | None, list[str]]:
    """The open flags (octal) and the `lock:` lines of an fdinfo entry."""
    flags = None
    lock_lines = []
    for line in info.splitlines():
        if line.startswith("flags:"):
            flags = int(line.split()[1], 8)
        elif line.startswith("lock:"):
            lock_lines.append(line[5:].strip())
    return flags, lock_lines


CAP_SYS_PTRACE = 19
CAP_DAC_OVERRIDE = 1


def file_mode(status: os.stat_result) -> FileMode:
    """The owner, group and permission bits a stat gave."""
    return FileMode(status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode))


def credentials_of(status_text: str, own_user_namespace: bool) -> Credentials | None:
    """A process's credentials from its /proc/PID/status (`Uid:`/`Gid:` real, effective,
    saved, file-system; `Groups:`; `CapEff:`); `own_user_namespace`: it runs in lockwarden's
    user namespace, the only one whose capabilities count against the host's files here.
    None when a line is missing or malformed."""
    fields = {
        name: value.split()
        for name, _, value in (line.partition(":") for line in status_text.splitlines())
    }
    try:
        fsuid, fsgid = int(fields["Uid"][3]), int(fields["Gid"][3])
        groups = frozenset(int(group) for group in fields.get("Groups", ()))
        effective = int(fields["CapEff"][0], 16)
    except (KeyError, IndexError, ValueError):
        return None
    override = own_user_namespace and bool(effective >> CAP_DAC_OVERRIDE & 1)
    return Credentials(fsuid, fsgid, groups, override)


def may_open_for_writing(who: Credentials, file: FileMode) -> bool:
    """The kernel's check of an open for writing (generic_permission), ACLs left aside: the
    owner's bits for the file's owner, else the group's for a member of its group, else the
    others'; CAP_DAC_OVERRIDE passes any of them. A user granted write by an ACL alone is not
    seen as one who may write (lockwarden reads no ACL)."""
    if who.dac_override:
        return True
    if who.fsuid == file.uid:
        return bool(file.mode & stat.S_IWUSR)
    if file.gid == who.fsgid or file.gid in who.groups:
        return bool(file.mode & stat.S_IWGRP)
    return bool(file.mode & stat.S_IWOTH)


def may_write(who: Credentials | None, file: FileMode | None, opened_for_writing: bool) -> bool:
    """Whether a process may write a file: it has it open for writing, or its credentials let
    it open it so. When either is unknown (its status or the file's stat unread) it may: a
    wait is never passed over on a guess."""
    if opened_for_writing or who is None or file is None:
        return True
    return may_open_for_writing(who, file)


def process_credentials(proc: str, pid: int, status_text: str | None = None) -> Credentials | None:
    """`pid`'s credentials (credentials_of), its status read now unless given."""
    if status_text is None:
        try:
            status_text = _read_text(f"{proc}/{pid}/status")
        except OSError:
            return None
    own = namespace_id(f"{proc}/self/ns/user")
    theirs = namespace_id(f"{proc}/{pid}/ns/user")
    return credentials_of(status_text, own is not None and own == theirs)


def _has_capability(proc: str, capability: int) -> bool:
    try:
        status = _read_text(f"{proc}/self/status")
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> capability & 1)
    return False


def _scan_thread_tables(
    proc: str, keys: frozenset[InodeKey], entries: tuple[str, ...]
) -> dict[InodeKey, list[Descriptor]]:
    """Descriptors of every thread's table other than the process's own, for these inodes."""
    found: dict[InodeKey, list[Descriptor]] = {}
    if not keys:
        return found
    inodes = frozenset(str(inode).encode() for _device, inode in keys)
    for entry in entries:
        try:
            tids = [tid for tid in os.listdir(f"{proc}/{entry}/task") if tid != entry]
        except OSError:
            continue
        for tid in tids:
            base = f"{proc}/{entry}/task/{tid}"
            try:
                fd_names = os.listdir(f"{base}/fd")
            except OSError:
                continue
            # an unreadable table is counted by the process-table scan already
            table, _readable = _table_descriptors(base, int(entry), fd_names, keys, inodes)
            for key, descriptor in table:
                found.setdefault(key, []).append(descriptor._replace(tid=int(tid)))
    return found


class BlockedCall(NamedTuple):
    """A thread blocked in a lock call on one of its descriptors."""

    tid: int
    fd: int
    call: str  # "fcntl" (F_SETLKW, F_OFD_SETLKW) or "flock"
    ofd: bool


# Syscall numbers of fcntl and flock, per architecture (the kernel's syscall tables).
_LOCK_SYSCALLS = {
    "x86_64": {72: "fcntl", 73: "flock"},
    "aarch64": {25: "fcntl", 32: "flock"},
    "riscv64": {25: "fcntl", 32: "flock"},
    "ppc64le": {55: "fcntl", 143: "flock"},
    "s390x": {55: "fcntl", 143: "flock"},
}
F_SETLKW, F_OFD_SETLKW = 7, 38


def blocked_calls(proc: str, pid: int) -> list[BlockedCall]:
    calls = _LOCK_SYSCALLS.get(os.uname().machine, {})
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return []
    found = []
    for tid in tids:
        try:
            fields = _read_text(f"{proc}/{pid}/task/{tid}/syscall").split()
            number, fd, command = int(fields[0]), int(fields[1], 16), int(fields[2], 16)
        except (OSError, ValueError, IndexError):
            continue  # running, not in a syscall, or not ours to read
        call = calls.get(number)
        if call == "flock" or (call == "fcntl" and command in (F_SETLKW, F_OFD_SETLKW)):
            found.append(BlockedCall(int(tid), fd, call, command == F_OFD_SETLKW))
    return found


def _mapping_pids(proc: str, key: InodeKey, entries: tuple[str, ...]) -> tuple[int, ...]:
    device = f"{os.major(key[0]):02x}:{os.minor(key[0]):02x}"
    needle = f" {device} {key[1]} "
    found = []
    for entry in entries:
        try:
            maps = _read_text(f"{proc}/{entry}/maps")
        except OSError:
            continue
        if needle in maps:
            found.append(int(entry))
    return tuple(found)
