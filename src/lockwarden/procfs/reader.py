"""The one reader of /proc in a run: `HostReader.capture(request)` reads, eagerly and once,
everything the judging step will need, and returns a frozen Snapshot (snapshot.py).

What is read depends on what the locks ask (a `Request` built from their claims by
check/identify.py) and on what the first reads found, under the same conditions that keep a
quiet run cheap as when these reads were made on demand:

* the descriptor scan only for inodes that are kernel-locked, or judged by who has them open;
* threads' own descriptor tables only when a lock has a holder the process tables did not show;
* memory mappings only for a lock still unattributed after that, when nothing else explains it;
* blocked calls only for the openers of a lock with an OFD waiter;
* namespace twins only for a record-named existence lock that no kernel lock holds;
* working directories only when a present lock names directories its workers work in; and
  for a lock whose workers are followed by identity, only the named workers no path ties to
  it are followed up from where they work, in a disposable child (they touch file systems);
* process details for every PID the record names, /proc/locks names, or a descriptor shows;
* database sessions' client sockets, their owners and what runs below them, and command lines
  looked for, only for what the servers' answers (asked before the capture) name
  (sockets.py, databases/check.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import NamedTuple, TypeVar

import psutil

from lockwarden.model import (
    Container,
    Descendant,
    InodeKey,
    KernelLock,
    LeftWork,
    Process,
    Workers,
)
from lockwarden.procfs.containers import (
    ContainerNames,
    cgroup_hierarchy,
    cgroup_path,
    container_of,
    made_by_owner,
    runtime_of,
)
from lockwarden.procfs.snapshot import (
    CAP_SYS_PTRACE,
    DEFAULT_PID_MAX,
    PROC_READ_TIMEOUT_S,
    BlockedCall,
    Descriptor,
    DescriptorScan,
    Names,
    Snapshot,
    WorkingDirectories,
    _has_capability,
    _link,
    _mapping_pids,
    _named,
    _pointing_into,
    _process_facts,
    _read_text,
    _read_working_directories,
    _scan_descriptors,
    _scan_groups,
    _scan_locked_descriptors,
    _scan_nested_pids,
    _scan_thread_tables,
    blocked_calls,
    carrier_passed_over,
    children_lists,
    index_proc_locks,
    locks_on,
    log,
    names_here,
    parse_lock_line,
    parse_proc_locks,
    process_credentials,
    processes_under,
    reached_from,
    read_within,
    unit_in_cgroup,
)
from lockwarden.procfs.sockets import (
    NO_CLIENTS,
    ClientQuestion,
    ClientSockets,
    read_client_sockets,
)
from lockwarden.support.bounded import BoundedRun
from lockwarden.support.namespaces import (
    PF_KTHREAD,
    boottime_offset,
    namespace_id,
    nspid_levels,
    numbered_namespace,
    proc_is_hosts,
    proc_locks_may_omit,
    sees_every_holder,
)

BELOW_LIMIT = 64
"""What runs below a process that may be named a holder, listed at most (Process.below)."""

Clock = Callable[[], datetime]
"""The wall clock a capture is dated by; the caller passes it (tests step it)."""


def wall_clock() -> datetime:
    return datetime.now(UTC)


class LockQuestion(NamedTuple):
    """What one lock asks of the host, from its claim (check/identify.py builds it)."""

    keys: tuple[InodeKey, ...] = ()
    by_openers: bool = False
    """Judged by who has it open: its descriptors are wanted even with no kernel lock."""
    pids: tuple[int, ...] = ()
    """The PIDs its record names (the holder, others listed, candidates)."""
    twin_pid: int | None = None
    """A record-named existence lock's PID: its namespace twins decide it when no kernel lock
    holds the lock."""
    workers: Workers | None = None
    """A present lock's workers: the working directories are read, and with `variables` the
    command lines and environments of those named so that may point into the directories."""
    machine_id: bool = False
    hidden_locks: tuple[KernelLock, ...] = ()
    """POSIX locks on its files that the kernel reported to the claim's F_OFD_GETLK, held from
    outside this PID namespace, which /proc/locks leaves out (formats/hidden.py)."""
    names: tuple[tuple[InodeKey, str], ...] = ()
    """The one name of each of its inodes that has one (Claim.key_names): with every inode's,
    the descriptor walk passes over other files on their links alone (snapshot.Names)."""
    left_work: LeftWork | None = None
    """What ran below `twin_pid` when a run last saw it hold the lock (the sighting memory):
    read for what of it still runs (Snapshot.work_left)."""


@dataclass(frozen=True, slots=True, eq=False)
class Request:
    """Everything a capture is asked for: the locks' questions, and what a caller beyond the
    pipeline needs (removal, hold, discover)."""

    locks: tuple[LockQuestion, ...] = ()
    read_locks: bool = True
    """False skips /proc/locks (thousands of lines) for a caller that needs only identities."""
    scan_keys: frozenset[InodeKey] = frozenset()
    """Inodes whose descriptors are wanted whatever their locks (removal's "nobody has it")."""
    all_locked: bool = False
    """Every inode /proc/locks lists, with its descriptors and their link targets (discover)."""
    pids: tuple[int, ...] = ()
    """Processes whose details are wanted whatever the locks say (hold: its own)."""
    name_hidden: bool = False
    """Details of every process whose descriptors could not be read (removal)."""
    clients: ClientQuestion = NO_CLIENTS
    """Database sessions' clients, and command lines looked for (databases/check.py)."""
    waits: bool = False
    """Every inode a process waits on in /proc/locks, with its descriptors (found in the same
    walk as the locks') and its waiters' blocked calls: how the pipeline names the file a
    blocked writer waits on (an OFD wait shows no PID) without a second walk."""


class _WorkersFound(NamedTuple):
    """What a capture found of the locks' workers, per lock's directories (HostReader's
    `_working_directories`)."""

    cwds: WorkingDirectories | None
    working_in: dict[tuple[str, ...], tuple[int, ...]]
    hidden_in: dict[tuple[str, ...], tuple[int, ...]]
    unfollowed_in: dict[tuple[str, ...], tuple[int, ...]]


class _Follow(NamedTuple):
    """A worker to follow by identity: the paths it names, and the pointer files to read."""

    pid: int
    values: tuple[str, ...]
    pointers: tuple[tuple[str, str], ...]


@dataclass
class _Look:
    """One lock's first facts, from which its follow-up reads are decided."""

    question: LockQuestion
    granted: tuple[KernelLock, ...]
    waiting: tuple[KernelLock, ...]
    descriptors: list[Descriptor] = field(default_factory=list)
    unmatched: bool = False
    """A granted lock that no descriptor found so far carries."""

    def found(self, descriptors: list[Descriptor]) -> None:
        self.descriptors = descriptors
        self.unmatched = bool(self.granted) and unmatched_locks(self.granted, descriptors) > 0


def lock_identity(lock: KernelLock) -> tuple[str, str, int, int, int | None]:
    """What a /proc/locks line and an fdinfo `lock:` line of the same lock have in common
    (their ordinal numbers differ)."""
    return (lock.kind, lock.mode, lock.pid, lock.start, lock.end)


def unmatched_locks(granted: Iterable[KernelLock], descriptors: Iterable[Descriptor]) -> int:
    """How many granted locks no descriptor carries."""
    return len(uncarried(granted, descriptors))


def uncarried(granted: Iterable[KernelLock], descriptors: Iterable[Descriptor]) -> list[KernelLock]:
    """The granted locks no descriptor carries."""
    carried = {
        (lock.kind, lock.mode, lock.pid, lock.start, lock.end)  # lock_identity, inlined: a
        for found in descriptors  # run computes it for every held lock
        for lock in found.locks
    }
    return [lock for lock in granted if lock_identity(lock) not in carried]


def _with_locks_proc_hides(
    parsed: Mapping[InodeKey, tuple[KernelLock, ...]], scan: DescriptorScan
) -> dict[InodeKey, tuple[KernelLock, ...]]:
    """The kernel locks of each inode with those only the descriptors' fdinfo `lock:` lines
    show. In a PID namespace other than the host's, the kernel's locks_show() skips a lock
    whose taker's PID does not translate into it (the taker exited, or lives outside): the
    `( flock -n 9 || exit 1; job ) 9>FILE` idiom, where flock(1) took the lock and its parent
    shell holds it. fdinfo prints such a lock with PID 0; it is the same lock on every
    descriptor that shares the open file description, so it is counted once."""
    merged = dict(parsed)
    for key, descriptors in scan.by_key.items():
        found = (lock._replace(key=key) for found in descriptors for lock in found.locks)
        _add_unlisted(merged, key, found)
    return merged


def _with_locks_asked(
    parsed: Mapping[InodeKey, tuple[KernelLock, ...]], questions: Iterable[LockQuestion]
) -> dict[InodeKey, tuple[KernelLock, ...]]:
    """The kernel locks of each inode with those the claims' F_OFD_GETLK found and neither
    /proc/locks nor a descriptor's fdinfo showed: POSIX locks held from outside this PID
    namespace, whose holder no descriptor here carries."""
    merged = dict(parsed)
    for question in questions:
        for lock in question.hidden_locks:
            _add_unlisted(merged, lock.key, (lock,))
    return merged


def _add_unlisted(
    merged: dict[InodeKey, tuple[KernelLock, ...]], key: InodeKey, found: Iterable[KernelLock]
) -> None:
    """Add to an inode's locks each of `found` not listed yet, counting one lock once."""
    listed = merged.get(key, ())
    known = {lock_identity(lock) for lock in listed}
    added: list[KernelLock] = []
    for lock in found:
        if lock_identity(lock) not in known:
            known.add(lock_identity(lock))
            added.append(lock)
    if added:
        merged[key] = (*listed, *added)


@dataclass(frozen=True, eq=False)
class _Base:
    """The facts every capture reads first: the moment, the boot, this process's place."""

    captured_at: datetime
    uptime_s: float
    boot_id: str
    pid_namespace: int | None
    """The PID namespace whose numbers the /proc read shows (support/namespaces.py)."""
    nested_pid_namespace: bool
    proc_locks_may_omit: bool
    hosts_proc: bool
    boottime_offset_s: float
    euid: int
    ptrace_capable: bool

    @property
    def booted_at(self) -> datetime:
        return self.captured_at - timedelta(seconds=self.uptime_s)


class HostReader:
    """Reads /proc for one run (`capture`)."""

    def __init__(
        self, clock: Clock, proc: str = "/proc", read_timeout: float = PROC_READ_TIMEOUT_S
    ) -> None:
        """`clock`: the wall clock each capture is dated by (and the boot time derived from).
        `read_timeout`: the longest a process's details that can block may take to read."""
        self.clock = clock
        self.proc = proc
        self.read_timeout = read_timeout
        self.clock_ticks = os.sysconf("SC_CLK_TCK")
        self.hostname = os.uname().nodename  # gethostname() without importing socket
        self._pid_max: int | None = None
        self._base: _Base | None = None
        self._processes: dict[int, Process | None] = {}
        self._entries: tuple[str, ...] | None = None
        self._container_names = ContainerNames()

    @property
    def pid_max(self) -> int:
        """The largest PID of this host (a record's PID beyond it names no process)."""
        if self._pid_max is None:
            try:
                self._pid_max = int(_read_text(f"{self.proc}/sys/kernel/pid_max").strip())
            except (OSError, ValueError):
                self._pid_max = DEFAULT_PID_MAX
        return self._pid_max

    @property
    def nested_pid_namespace(self) -> bool:
        return self._host().nested_pid_namespace

    def capture(self, request: Request) -> Snapshot:
        """Read everything `request` will need, then freeze it. A reader captures afresh each
        time (its process cache is emptied): removal's last look must not reuse the first."""
        self._processes, self._entries = {}, None
        base, index = self.read_host(request.read_locks)
        self._base = base
        waiters = waits_in(index) if request.waits else {}
        if waiters:
            request = replace(request, scan_keys=request.scan_keys | waiters.keys())
        parsed = self._parse(request, index)
        if request.all_locked and base.proc_locks_may_omit:
            locked = _scan_locked_descriptors(self.proc, self.pid_entries())
            parsed = _with_locks_proc_hides(parsed, locked)
        scan_keys = self._scan_keys(request, parsed, base.proc_locks_may_omit)
        names = self._names(request, parsed, scan_keys, base.proc_locks_may_omit)
        scan = self.scan_descriptors(scan_keys, names)
        if names is not None and carrier_passed_over(self.proc, scan, names):
            # A holder found under a name passed over here may share its file with a process
            # here: every descriptor's fdinfo decides.
            names = None
            scan = self.scan_descriptors(scan_keys)
        if base.proc_locks_may_omit:
            parsed = _with_locks_proc_hides(parsed, scan)
            parsed = _with_locks_asked(parsed, request.locks)
        looks = [_first_look(question, parsed, scan) for question in request.locks]
        if names is not None and any(look.unmatched for look in looks):
            # A lock no descriptor passed by name carries: its holder reached the file by a
            # name the walk could not know (Names). Every descriptor's fdinfo decides.
            scan = self.scan_descriptors(scan_keys)
            looks = [_first_look(question, parsed, scan) for question in request.locks]
        threads = self._thread_tables(looks, scan_keys)
        hidden_or_nested = bool(scan.unreadable_pids) or base.nested_pid_namespace
        mappings = {} if hidden_or_nested else self._mappings(looks)
        cwds, working_in, hidden_workers, unfollowed = self._working_directories(request.locks)
        wanted = _pids_to_read(request, looks, working_in, cwds, scan.hidden)
        wanted.update(
            pid for hidden in (*hidden_workers.values(), *unfollowed.values()) for pid in hidden
        )
        sockets, children, clients = self._clients(request.clients)
        commands = {pattern: self._running(pattern) for pattern in request.clients.commands}
        wanted.update(clients, *(found for found in commands.values() if found))
        survivors = self._survivors(looks)
        wanted.update(pid for found in survivors.values() for pid in found)
        work_left = self._work_left(looks, base.boot_id)
        wanted.update(pid for found in work_left.values() for pid in found)
        processes = {pid: self.process(pid) for pid in sorted(wanted)}
        processes = self._with_below(processes, _holder_pids(looks))
        return Snapshot(
            boot_id=base.boot_id,
            hostname=self.hostname,
            captured_at=base.captured_at,
            uptime_s=base.uptime_s,
            clock_ticks=self.clock_ticks,
            pid_max=self.pid_max,
            pid_namespace=base.pid_namespace,
            nested_pid_namespace=base.nested_pid_namespace,
            hosts_proc=base.hosts_proc,
            boottime_offset_s=base.boottime_offset_s,
            lock_lines=_frozen({inode: tuple(lines) for inode, lines in index.items()}),
            euid=base.euid,
            ptrace_capable=base.ptrace_capable,
            parsed_locks=_frozen(parsed),
            scanned_keys=scan_keys,
            found_descriptors=_frozen({key: tuple(found) for key, found in scan.by_key.items()}),
            unreadable_pids=scan.unreadable_pids,
            hidden_pids=tuple(scan.hidden),
            thread_tables=None if threads is None else _frozen(threads),
            mappings=_frozen(mappings),
            blocked=_frozen(self._blocked(looks, waiters)),
            twins=_frozen(self._twins(looks)),
            survivors=_frozen(survivors),
            work_left=_frozen(work_left),
            work_untold=frozenset(_untold(looks, work_left)),
            cwds=cwds,
            working_in=_frozen(working_in),
            hidden_workers=_frozen(hidden_workers),
            unfollowed_workers=_frozen(unfollowed),
            fd_targets=_frozen(_fd_targets(scan)),
            other_mounts=self._other_mounts(scan),
            processes=_frozen(processes),
            machine_id=_machine_id() if _wants_machine_id(request) else None,
            client_sockets=sockets,
            children=_frozen(children),
            commands=_frozen(commands),
        )

    def read_host(self, read_locks: bool) -> tuple[_Base, dict[int, list[str]]]:
        """What every capture reads first: the moment and the boot, and /proc/locks (indexed
        by inode) unless `read_locks` is false."""
        base = self._read_base()
        index = index_proc_locks(_read_text(f"{self.proc}/locks")) if read_locks else {}
        return base, index

    def _read_base(self) -> _Base:
        proc = self.proc
        captured_at = self.clock()
        return _Base(
            captured_at=captured_at,
            uptime_s=float(_read_text(f"{proc}/uptime").split()[0]),
            boot_id=_read_text(f"{proc}/sys/kernel/random/boot_id").strip(),
            pid_namespace=numbered_namespace(proc),
            nested_pid_namespace=not sees_every_holder(proc),
            proc_locks_may_omit=proc_locks_may_omit(proc),
            hosts_proc=proc_is_hosts(proc),
            boottime_offset_s=boottime_offset(proc),
            euid=os.geteuid(),
            ptrace_capable=_has_capability(proc, CAP_SYS_PTRACE),
        )

    def _host(self) -> _Base:
        """The base facts of the last capture (read now when nothing was captured yet)."""
        if self._base is None:
            self._base = self._read_base()
        return self._base

    @staticmethod
    def _parse(
        request: Request, index: Mapping[int, list[str]]
    ) -> dict[InodeKey, tuple[KernelLock, ...]]:
        """The kernel locks on every inode asked about (all of them for `all_locked`)."""
        if request.all_locked:
            every = parse_proc_locks("\n".join(line for lines in index.values() for line in lines))
            parsed = {key: tuple(locks) for key, locks in every.items()}
        else:
            parsed = {}
        keys = {key for question in request.locks for key in question.keys}
        for key in keys | request.scan_keys:
            if key not in parsed:
                parsed[key] = tuple(locks_on(index, key))
        return parsed

    @staticmethod
    def _scan_keys(
        request: Request, parsed: Mapping[InodeKey, tuple[KernelLock, ...]], may_omit: bool
    ) -> frozenset[InodeKey]:
        """Inodes whose descriptors the run must find: kernel-locked ones, every inode of a
        lock some kernel lock is granted on, and existence locks judged by who has them open.
        Outside the host's PID namespace every inode asked about: /proc/locks there leaves out
        a lock whose taker is gone while a child still holds it, so only the descriptors' fdinfo
        can tell such a lock from a free one."""
        wanted = set(request.scan_keys)
        if may_omit:
            wanted.update(key for question in request.locks for key in question.keys)
        if request.all_locked:
            wanted.update(key for key, locks in parsed.items() if locks)
        for question in request.locks:
            locked = [key for key in question.keys if parsed[key]]
            wanted.update(locked)
            granted = any(not lock.waiting for key in locked for lock in parsed[key])
            if granted or question.by_openers:  # judging looks at every inode of such a lock
                wanted.update(question.keys)
        return frozenset(wanted)

    def scan_descriptors(
        self, keys: frozenset[InodeKey], names: Names | None = None
    ) -> DescriptorScan:
        """One walk of /proc/*/fdinfo for all these inodes (none at all for no inode); with
        `names`, only the fdinfo of descriptors whose links may be on them."""
        if not keys:
            return DescriptorScan()
        return _scan_descriptors(self.proc, keys, self.pid_entries(), names)

    def _names(
        self,
        request: Request,
        parsed: Mapping[InodeKey, tuple[KernelLock, ...]],
        keys: frozenset[InodeKey],
        may_omit: bool,
    ) -> Names | None:
        """What lets the walk pass over files by their links (snapshot.Names), or None.

        Only on the host's view of locks, where every granted lock is in /proc/locks and one
        that no descriptor found carries sends the walk round again in full; and only where
        that check cannot be fooled: each lock's identity in /proc/locks is its own (two OFD
        readers both show PID -1, one taker's two flocks the same PID, and a holder found by
        name would pass for the other), and no OFD waiter is there (it is named only by its
        descriptor, and a waiter left unfound leaves nothing unmatched). Never where a
        descriptor's absence decides (a lock judged by its openers, removal's last look,
        discover, blocked writers' files), nor with an inode whose one name is not known."""
        if may_omit or request.all_locked or request.scan_keys or not keys:
            return None
        if any(question.by_openers for question in request.locks):
            return None
        known: dict[InodeKey, set[str]] = {}
        for question in request.locks:
            for key, name in question.names:
                known.setdefault(key, set()).add(name)  # two locks may name it two ways
        if not keys <= known.keys():
            return None
        for question in request.locks:
            kernel = [lock for key in question.keys for lock in parsed[key]]
            granted = [lock_identity(lock) for lock in kernel if not lock.waiting]
            if len(set(granted)) < len(granted):
                return None
            if any(lock.waiting and lock.pid <= 0 for lock in kernel):
                return None
        return names_here(self.proc, frozenset(name for key in keys for name in known[key]))

    def _thread_tables(
        self, looks: list[_Look], keys: frozenset[InodeKey]
    ) -> dict[InodeKey, tuple[Descriptor, ...]] | None:
        """Threads' own descriptor tables, walked once and only when some lock has a holder
        the process tables did not show; that lock's descriptors then include them."""
        missing = [look for look in looks if look.unmatched]
        if not missing:
            return None
        walked = _scan_thread_tables(self.proc, keys, self.pid_entries())
        for look in missing:
            more = [found for key in look.question.keys for found in walked.get(key, ())]
            look.found(look.descriptors + more)
        return {key: tuple(found) for key, found in walked.items()}

    def _mappings(self, looks: list[_Look]) -> dict[InodeKey, tuple[int, ...]]:
        """Processes mapping each inode of a lock no descriptor explains (a mapping keeps a
        closed descriptor's lock alive). Not read when unreadable tables or a container's
        namespace already explain it."""
        mappings: dict[InodeKey, tuple[int, ...]] = {}
        for look in looks:
            if not look.unmatched:
                continue
            for key in look.question.keys:
                if key not in mappings:
                    mappings[key] = _mapping_pids(self.proc, key, self.pid_entries())
        return mappings

    def _blocked(
        self, looks: list[_Look], waiters: Mapping[InodeKey, tuple[int, ...]]
    ) -> dict[int, tuple[BlockedCall, ...]]:
        """The blocked lock calls of the openers of each lock with an OFD waiter (/proc/locks
        shows those as PID -1), and of each waiter /proc/locks names (`Request.waits`)."""
        blocked: dict[int, tuple[BlockedCall, ...]] = {}
        for pid in sorted({pid for pids in waiters.values() for pid in pids}):
            blocked[pid] = tuple(blocked_calls(self.proc, pid))
        for look in looks:
            if not any(lock.pid <= 0 for lock in look.waiting):
                continue
            for descriptor in look.descriptors:
                if descriptor.pid not in blocked:
                    blocked[descriptor.pid] = tuple(blocked_calls(self.proc, descriptor.pid))
        return blocked

    def _twins(self, looks: list[_Look]) -> dict[int, tuple[int, ...]]:
        """Namespace twins of the PIDs of record-named existence locks no kernel lock holds:
        one walk of the processes in other PID namespaces, only when such a lock is there."""
        pids = [
            look.question.twin_pid
            for look in looks
            if look.question.twin_pid is not None and not look.granted
        ]
        if not pids:
            return {}
        nested = _scan_nested_pids(self.proc, self.pid_entries(), self._host().pid_namespace)
        return {pid: nested.get(pid, ()) for pid in pids}

    def _survivors(self, looks: list[_Look]) -> dict[int, tuple[int, ...]]:
        """What the gone PIDs of record-named existence locks no kernel lock holds left running
        in their process group or session: one walk of every process's stat, only when such
        a PID is gone (a lock about to be called stale)."""
        gone = frozenset(
            pid
            for look in looks
            if (pid := look.question.twin_pid) is not None
            and not look.granted
            and not _alive(self.process(pid))
        )
        if not gone:
            return {}
        found = _scan_groups(self.proc, self.pid_entries(), gone)
        return {pid: found.get(pid, ()) for pid in sorted(gone)}

    def _work_left(self, looks: list[_Look], boot_id: str) -> dict[int, tuple[int, ...]]:
        """Of what ran below a record's PID when a run last saw it hold the lock
        (LockQuestion.left_work), what still runs: each process by its PID and start ticks, so
        a process that took a worker's PID since is not counted. Read whether or not the PID
        runs now: a process that took the holder's PID since is not the holder, and the
        holder's work may have left it (its parent, below the holder, ended)."""
        found: dict[int, tuple[int, ...]] = {}
        for look in looks:
            pid, left = look.question.twin_pid, look.question.left_work
            if left is None or pid != left.holder or left.boot_id != boot_id or look.granted:
                continue
            running = []
            for worker, ticks, _name in left.work:
                process = self.process(worker)
                if process is not None and process.alive and process.start_ticks == ticks:
                    running.append(worker)
            # two locks may remember the same holder's work: each process once
            found[pid] = tuple(dict.fromkeys((*found.get(pid, ()), *running)))
        return found

    def _working_directories(self, questions: Iterable[LockQuestion]) -> _WorkersFound:
        """Every process's working directory, read once and only when a lock asks; for each
        lock's directories, the processes working in them (by working directory, or pointed
        there by their command line or environment, or reaching them by identity); the
        workers that could be there but could not be read; and those that could not be
        followed."""
        asked = {
            question.workers.directories: question.workers
            for question in questions
            if question.workers is not None
        }
        if not asked:
            return _WorkersFound(None, {}, {}, {})
        cwds = _read_working_directories(self.proc, self.pid_entries())
        cwds = WorkingDirectories(MappingProxyType(dict(cwds.by_pid)), cwds.unreadable_pids)
        working_in, hidden_in, unfollowed_in = {}, {}, {}
        untied: dict[tuple[str, ...], Mapping[int, tuple[str, ...]]] = {}
        for directories, workers in asked.items():
            roots = [os.path.realpath(directory).rstrip("/") for directory in directories]
            under = processes_under(cwds, roots)
            if not (workers.variables or workers.identities):
                # by name here: details are read for each worker, and `/` has every process
                working_in[directories] = tuple(
                    pid for pid in under if _named(self.proc, pid, workers)
                )
                continue
            written = [os.path.normpath(directory) for directory in directories]
            found = _pointing_into(
                self.proc, cwds, [*roots, *written], workers, set(under), self.read_timeout
            )
            working_in[directories] = (*under, *found.pointing)
            hidden_in[directories] = found.hidden
            if workers.identities:
                untied[directories] = found.untied
        reached = self._follow(asked, untied, cwds)
        for directories, found_untied in untied.items():
            keys = set(asked[directories].identities)
            followed = {pid: reached[pid] for pid in found_untied}
            working_in[directories] += tuple(
                pid for pid, reach in followed.items() if reach is not None and keys & reach
            )
            unfollowed_in[directories] = tuple(
                pid for pid, reach in followed.items() if reach is None
            )
        return _WorkersFound(cwds, working_in, hidden_in, unfollowed_in)

    def _follow(
        self,
        asked: Mapping[tuple[str, ...], Workers],
        untied: Mapping[tuple[str, ...], Mapping[int, tuple[str, ...]]],
        cwds: WorkingDirectories,
    ) -> dict[int, frozenset[InodeKey] | None]:
        """The directories each worker no path tied to a lock reaches (snapshot.reached_from),
        in a disposable child within the read timeout each (a worker may work on a mount that
        no longer answers); None for one that could not be followed."""
        wanted: dict[int, tuple[set[str], set[tuple[str, str]]]] = {}
        for directories, found in untied.items():
            pointer = asked[directories].pointer
            for pid, values in found.items():
                places, pointers = wanted.setdefault(pid, (set(), set()))
                places.update(values)
                pointers.update([pointer] if pointer is not None else [])
        if not wanted:
            return {}
        proc = self.proc

        def follow(item: _Follow) -> tuple[frozenset[InodeKey], tuple[()]]:
            return reached_from(proc, item.pid, item.values, item.pointers), ()

        items = [
            _Follow(pid, tuple(sorted(places)), tuple(sorted(pointers)))
            for pid, (places, pointers) in sorted(wanted.items())
        ]
        following = BoundedRun(
            follow, lambda item: cwds.by_pid[item.pid], lambda _item: self.read_timeout
        )
        return {
            item.pid: outcome if isinstance(outcome, frozenset) else None
            for item, outcome in following.run(items)
        }

    def _other_mounts(self, scan: DescriptorScan) -> frozenset[int]:
        """The PIDs of found descriptors whose mount namespace is neither lockwarden's nor PID
        1's (or cannot be read): their links name paths as that namespace sees them, which
        prove nothing of where a file is here (check/source.py's in_place)."""
        ours = {_link(f"{self.proc}/{pid}/ns/mnt") for pid in ("self", "1")} - {None}
        pids = {descriptor.pid for found in scan.by_key.values() for descriptor in found}
        return frozenset(pid for pid in pids if _link(f"{self.proc}/{pid}/ns/mnt") not in ours)

    def _clients(
        self, question: ClientQuestion
    ) -> tuple[ClientSockets | None, dict[int, tuple[int, ...]], set[int]]:
        """The sessions' client sockets and who has them open, and the processes below each
        of those; the other sessions' too when some client has processes below it (they may
        run the work under its lock: databases/check.py's work_under). And every process
        judging them may name: the backends (is the server's process here the session's?),
        the sockets' owners and what runs below them."""
        if not question.sessions:
            return None, {}, set()
        entries = self.pid_entries()
        found = read_client_sockets(self.proc, question.sessions, entries)
        children = {pid: self.descendants(pid) for pid in _owners(found)}
        backends = set(question.sessions.backends)
        if question.others and any(children.values()):
            theirs = read_client_sockets(self.proc, question.others, entries)
            found = found | theirs
            backends.update(question.others.backends)
            shared = {pid for pids in theirs.owners.values() if len(pids) > 1 for pid in pids}
            children.update((pid, self.descendants(pid)) for pid in sorted(shared - set(children)))
        below = {pid for pids in children.values() for pid in pids}
        return found, children, backends | set(_owners(found)) | below

    def _running(self, pattern: str) -> tuple[int, ...] | None:
        """The processes (this one aside) whose lower-cased command line matches `pattern`,
        each read under the deadline; None when one could not be read or did not answer, or
        the host's processes are not all visible (a nested PID namespace)."""
        if self._host().nested_pid_namespace:
            return None
        wanted = re.compile(pattern)
        found = []
        for entry in self.pid_entries():
            if int(entry) == os.getpid():
                continue
            try:
                command = read_within(f"{self.proc}/{entry}/cmdline", self.read_timeout, True)
            except PermissionError:
                return None
            if command is None:
                return None
            if wanted.search(command.lower()):
                found.append(int(entry))
        return tuple(found)

    def pid_entries(self) -> tuple[str, ...]:
        """The process directories of /proc, listed once per capture for every walk."""
        if self._entries is None:
            self._entries = tuple(str(pid) for pid in psutil.pids())
        return self._entries

    def _with_below(
        self, processes: dict[int, Process | None], holders: set[int]
    ) -> dict[int, Process | None]:
        """The processes that may be named holders, each with what runs below it (this run and
        its ancestors aside: a person may run lockwarden from the shell that holds a lock)."""
        found = dict(processes)
        for pid in sorted(holders):
            process = found.get(pid)
            if process is not None and process.alive:
                below = self.below(pid, BELOW_LIMIT + 1)
                if any(each.pid == os.getpid() for each in below):
                    ours = self._line_below(pid)
                    below = tuple(each for each in below if each.pid not in ours)
                more = len(below) > BELOW_LIMIT
                found[pid] = replace(process, below=below[:BELOW_LIMIT], more_below=more)
        return found

    def _line_below(self, ancestor: int) -> set[int]:
        """This process and its ancestors up to `ancestor`, which is one of them."""
        line, pid = set(), os.getpid()
        while pid not in (ancestor, 0, 1) and pid not in line:
            line.add(pid)
            try:
                text = _read_text(f"{self.proc}/{pid}/stat")
            except OSError:
                break
            pid = int(text[text.rfind(")") + 2 :].split()[1])
        return line

    def below(self, pid: int, limit: int = 64) -> tuple[Descendant, ...]:
        """The live processes below `pid` (descendants), at most `limit`, each with its
        process group and name."""
        found = []
        for child in self.descendants(pid, limit):
            try:
                text = _read_text(f"{self.proc}/{child}/stat")
            except OSError:
                continue  # ended meanwhile
            fields = text[text.rfind(")") + 2 :].split()
            # a zombie whose other threads run is still at work (Process.alive)
            if fields[0] not in ("Z", "X") or int(fields[17]) > 1:  # stat's num_threads
                name = text[text.find("(") + 1 : text.rfind(")")]
                ticks = int(fields[19])  # stat's starttime, its 22nd field
                namespace = namespace_id(f"{self.proc}/{child}/ns/pid")
                ignored = self._ignored(child, fields, namespace)
                found.append(Descendant(child, int(fields[2]), name, ignored, ticks))
        return tuple(found)

    def descendants(self, pid: int, limit: int = 64) -> tuple[int, ...]:
        """The processes below `pid` (its children, theirs, ...), read now, oldest first: the
        work a migration tool runs in a child. At most `limit` of them, the nearest: from the
        kernel's children lists (a few reads), else one walk of every process's parent."""
        found = children_lists(self.proc, pid, limit)
        if found is None:
            try:
                found = [child.pid for child in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return ()
        return tuple(sorted(found)[:limit])

    def process(self, pid: int) -> Process | None:
        """Identity and details of a live (or zombie) process, None when there is none; read
        once per capture."""
        if not (type(pid) is int and 2 <= pid <= self.pid_max):
            return None
        if pid not in self._processes:
            self._processes[pid] = self._read_process(pid)
        return self._processes[pid]

    def _read_process(self, pid: int) -> Process | None:
        base = f"{self.proc}/{pid}"
        try:
            # one read of its status: its state, threads, user and credentials
            status = _read_text(f"{base}/status")
            facts = _process_facts(status)
            # start ticks, not psutil's create_time: an identity must match the kernel's count
            stat_text = _read_text(f"{base}/stat")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return None  # gone (a zombie is still there: its status and stat still read)
        name = stat_text[stat_text.find("(") + 1 : stat_text.rfind(")")]
        fields = stat_text[stat_text.rfind(")") + 2 :].split()
        start_ticks = int(fields[19])
        raw_cmdline = read_within(f"{base}/cmdline", self.read_timeout)
        if raw_cmdline is None:  # still named by its PID and kernel name, from stat
            log.warning(
                "the command line of PID %d did not answer within %gs (a process stuck on a "
                "hung mount?); named by its PID",
                pid,
                self.read_timeout,
            )
            raw_cmdline = ""
        try:
            cgroup = _read_text(f"{base}/cgroup")
        except OSError:
            cgroup = ""
        container = self._container(cgroup, status)
        unit, user_unit = self._unit(cgroup, facts.uid, container)
        booted_at = self._host().booted_at
        namespace = namespace_id(f"{base}/ns/pid")
        return Process(
            pid=pid,
            start_ticks=start_ticks,
            state=facts.state,
            threads=facts.threads,
            uid=facts.uid,
            user=facts.user,
            cmdline=tuple(part for part in raw_cmdline.split("\0") if part),
            name=name,
            unit=unit,
            user_unit=user_unit,
            pid_namespace=namespace,
            started_at=booted_at + timedelta(seconds=start_ticks / self.clock_ticks),
            container=container,
            kernel_thread=bool(int(fields[6]) & PF_KTHREAD),
            ignored=self._ignored(pid, fields, namespace),
            group=int(fields[2]),
            session=int(fields[3]),
            credentials=process_credentials(self.proc, pid, status),
        )

    def _ignored(self, pid: int, fields: list[str], namespace: int | None) -> int:
        """The signals a process ignores as a signal sent from here finds it: its ignored set,
        and for the init of a PID namespace below the one the /proc numbers (`namespace`: its
        own; `unshare --pid --fork`'s work, a container's PID 1), every signal it has no
        handler for, which the kernel drops."""
        ignored = _ignored(fields)
        if namespace is None or namespace == self._host().pid_namespace:
            return ignored
        if not _namespace_init(self.proc, pid):
            return ignored
        caught = int(fields[31]) if len(fields) > 31 and fields[31].isdigit() else 0
        return ignored | (~caught & ALL_SIGNALS)

    @staticmethod
    def _unit(cgroup: str, uid: int, container: Container | None) -> tuple[str | None, bool]:
        """Its service (unit_in_cgroup), named only from a cgroup its owner made: a unit in a
        user's delegated subtree is that user's, whatever its name (any user may name a
        directory there `sshd.service`), so it is named only for a process of that user
        (its action runs as them, `systemctl --user -M USER@`); any other unit only when
        root made its directory (procfs/containers.made_by_owner: the parent is root's and
        no one else may write in it; a service's own directory may be its User='s, given by
        Delegate=). Inside a container (a cgroup its runtime made) the unit is the
        container's, stopped through its machine."""
        found = unit_in_cgroup(cgroup)
        if found is None:
            return None, False
        if found.delegated is not None:
            return (found.unit, True) if found.delegated == uid else (None, False)
        if container is not None:
            return found.unit, found.user_unit
        if not made_by_owner(cgroup_hierarchy(cgroup), found.path, 0, own=False):
            return None, False
        return found.unit, found.user_unit

    def _container(self, cgroup: str, status: str) -> Container | None:
        """The container it runs in (procfs/containers.py)."""
        if runtime_of(cgroup_path(cgroup)) is None:
            return None
        return container_of(cgroup, status, self._container_names)


def _first_look(
    question: LockQuestion,
    parsed: Mapping[InodeKey, tuple[KernelLock, ...]],
    scan: DescriptorScan,
) -> _Look:
    kernel = [lock for key in question.keys for lock in parsed[key]]
    if not (kernel or question.by_openers):  # most locks of a quiet run: nothing to follow
        return _Look(question, (), ())
    granted = tuple([lock for lock in kernel if not lock.waiting])
    look = _Look(question, granted, () if len(granted) == len(kernel) else _waiting(kernel))
    if look.granted or question.by_openers:
        look.found([found for key in question.keys for found in scan.by_key.get(key, ())])
    return look


def waits_in(index: Mapping[int, Sequence[str]]) -> dict[InodeKey, tuple[int, ...]]:
    """Every inode some process waits on in /proc/locks (its lines indexed by inode), with the
    waiters' PIDs (none for an OFD wait, which shows PID -1)."""
    found: dict[InodeKey, set[int]] = {}
    for lines in index.values():
        for line in lines:
            if "->" in line and (lock := parse_lock_line(line)) is not None and lock.waiting:
                found.setdefault(lock.key, set()).update([lock.pid] if lock.pid > 0 else [])
    return {key: tuple(sorted(pids)) for key, pids in found.items()}


def _waiting(kernel: list[KernelLock]) -> tuple[KernelLock, ...]:
    return tuple([lock for lock in kernel if lock.waiting])


def _pids_to_read(
    request: Request,
    looks: list[_Look],
    working_in: Mapping[tuple[str, ...], tuple[int, ...]],
    cwds: WorkingDirectories | None,
    hidden: list[int],
) -> set[int]:
    """Every process judging may name: the records' PIDs, the PIDs /proc/locks prints (takers,
    waiters), the descriptors' owners, the workers (and those whose directory is hidden), and
    a few of the processes whose tables are hidden, which an unattributed lock names."""
    wanted = set(request.pids)
    for look in looks:
        wanted.update(look.question.pids)
        if not (look.granted or look.waiting or look.descriptors or look.question.workers):
            continue
        wanted.update(lock.pid for lock in (*look.granted, *look.waiting) if lock.pid > 0)
        wanted.update(descriptor.pid for descriptor in look.descriptors)
        if look.question.workers is not None:
            wanted.update(working_in[look.question.workers.directories])
            wanted.update(cwds.unreadable_pids if cwds is not None else ())
    if request.name_hidden:
        wanted.update(hidden)
    elif any(look.unmatched or look.waiting for look in looks):
        wanted.update(hidden[:SOME_HIDDEN])
    return wanted


ALL_SIGNALS = (1 << 31) - 1
"""Signals 1..31 as bits 0..30 (stat's signal masks)."""


def _namespace_init(proc: str, pid: int) -> bool:
    """Whether the process is PID 1 of its own PID namespace (the last of its `NSpid:`)."""
    try:
        status = _read_text(f"{proc}/{pid}/status")
    except OSError:
        return False
    return nspid_levels(status)[-1:] == (1,)


def _ignored(fields: list[str]) -> int:
    """Stat's sigignore (its 33rd field; `fields` start at the 3rd): the signals 1..31 a
    process ignores, one bit each. 0 where a kernel leaves it out."""
    return int(fields[30]) if len(fields) > 30 and fields[30].isdigit() else 0


def _holder_pids(looks: list[_Look]) -> set[int]:
    """The processes judging may name holders: the records' PIDs, the kernel locks' takers,
    and the owners of the descriptors found on the locks' files."""
    pids: set[int] = set()
    for look in looks:
        pids.update(look.question.pids)
        pids.update(lock.pid for lock in look.granted if lock.pid > 0)
        pids.update(descriptor.pid for descriptor in look.descriptors)
    return pids


def _owners(found: ClientSockets) -> list[int]:
    return sorted({pid for pids in found.owners.values() for pid in pids})


SOME_HIDDEN = 3
"""How many of the processes whose tables are hidden an unattributed lock names."""


def _wants_machine_id(request: Request) -> bool:
    return any(question.machine_id for question in request.locks)


def _machine_id() -> int:
    import uuid  # only borg records a machine id; most runs never ask

    return uuid.getnode()


_K = TypeVar("_K")
_V = TypeVar("_V")


def _frozen(mapping: Mapping[_K, _V]) -> Mapping[_K, _V]:
    return MappingProxyType(dict(mapping))


def _fd_targets(scan: DescriptorScan) -> dict[tuple[int, int], str]:
    """Where each found descriptor's link pointed, as the walk read it next to its fdinfo
    (procfs links, read without touching the file); a link that could not be read is left
    out."""
    return {
        (descriptor.pid, descriptor.fd): descriptor.link
        for found in scan.by_key.values()
        for descriptor in found
        if descriptor.link is not None
    }


def _untold(looks: list[_Look], work_left: Mapping[int, tuple[int, ...]]) -> set[int]:
    """The recorded PIDs whose remembered work was read (_work_left) and is not all of it."""
    return {
        left.holder
        for look in looks
        if (left := look.question.left_work) is not None and left.more and left.holder in work_left
    }


def _alive(process: Process | None) -> bool:
    return process is not None and process.alive
