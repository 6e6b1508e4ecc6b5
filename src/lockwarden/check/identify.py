"""Gather, from the host snapshot, the facts needed to judge a claim: who really holds it.

This is the identity check of the pipeline: kernel holders from fdinfo (never the PID printed
in /proc/locks alone), waiters, processes that merely have the lock open, and the process that
now owns the PID the record names. No judgement happens here; classify.py does that.

Two halves: `request_for` says what the claims need of the host (the capture reads it all,
eagerly, before any lock is judged), and `gather` only looks facts up in the frozen snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from lockwarden.model import (
    Claim,
    Holder,
    InodeKey,
    KernelLock,
    Process,
    Unattributed,
    Waiter,
    Workers,
)
from lockwarden.procfs.reader import LockQuestion, Request, uncarried, unmatched_locks
from lockwarden.procfs.snapshot import Descriptor, Snapshot


@dataclass(frozen=True, eq=False)
class Evidence:
    """What the host snapshot says about one claim: kernel locks, holders, waiters."""

    boot_id: str
    hostname: str
    booted_at: datetime
    captured_at: datetime
    pid_namespace: int | None
    nested_pid_namespace: bool
    granted: tuple[KernelLock, ...]
    kernel_holders: tuple[Holder, ...]
    waiters: tuple[Waiter, ...]
    openers: tuple[Holder, ...]
    record_process: Process | None
    unreadable_pids: int
    other_processes: tuple[Process | None, ...] = ()
    host_node: int | None = None
    readers: tuple[Holder, ...] = ()
    workers: tuple[Holder, ...] = ()
    unreadable_cwds: int = 0
    unfollowed_workers: int = 0
    """Workers that may reach the lock's directories by another path but could not be
    followed there (procfs/snapshot.py's reached_from)."""
    candidate_processes: dict[int, Process | None] = field(default_factory=dict)
    namespace_twins: tuple[int, ...] = ()
    survivors: tuple[Holder, ...] = ()
    """What the recorded PID, gone, left running in its process group or session."""
    work_left: tuple[Holder, ...] = ()
    """What ran below the recorded PID when a run last saw it hold the lock, still running
    (the sighting memory's LeftWork): the holder's work, should the holder be gone."""
    work_untold: bool = False
    """More ran below it then than was remembered (LeftWork.more): its work may still run."""
    hosts_proc: bool = False
    """The /proc read is the host's: its /proc/locks lists every flock (Snapshot.hosts_proc)."""
    boottime_offset_s: float = 0.0
    """The start ticks read here are shifted by it (Snapshot.boottime_offset_s)."""
    takers: dict[int, Process | None] = field(default_factory=dict)
    """The processes /proc/locks names as having taken the granted writer locks (PID > 0): the
    holder when it took the lock itself, else a parent that passed it on (maybe dead)."""
    unattributed: Unattributed | None = None
    euid: int = 0
    ptrace_capable: bool = True

    @property
    def kernel_locked(self) -> bool:
        return bool(self.granted)


def holder_from_process(
    process: Process, lock_kind: str | None = None, lock: KernelLock | None = None
) -> Holder:
    """The holder `process` is; `lock`: the kernel lock it holds (its kind and bytes)."""
    return Holder(
        pid=process.pid,
        alive=process.alive,
        user=process.user,
        cmdline=process.cmdline,
        name=process.name,
        started_at=process.started_at,
        start_ticks=process.start_ticks,
        unit=process.unit,
        user_unit=process.user_unit,
        lock_kind=_kind(lock) if lock is not None else lock_kind,
        lock_start=lock.start if lock is not None else None,
        lock_end=lock.end if lock is not None else None,
        container=process.container,
        leads_group=process.group == process.pid,
        below=process.below,
        more_below=process.more_below,
        ignored=process.ignored,
    )


def request_for(
    claims: Iterable[Claim],
    scan_keys: Iterable[InodeKey] = (),
    name_hidden: bool = False,
) -> Request:
    """What the host must be asked for these claims to be judged (procfs/reader.py captures it,
    with the follow-up reads that depend on what it finds). `scan_keys`, `name_hidden`: what
    removal needs beyond judging (every opener of the files it would remove)."""
    return Request(
        locks=tuple(question_for(claim) for claim in claims),
        scan_keys=frozenset(scan_keys),
        name_hidden=name_hidden,
    )


def question_for(claim: Claim) -> LockQuestion:
    """What one claim asks of the host: its inodes, the PIDs its record names, and which of
    the costlier reads its judging may need."""
    return LockQuestion(
        keys=claim.keys,
        by_openers=_judged_by_openers(claim),
        pids=(() if claim.pid is None else (claim.pid,))
        + claim.pid_proof.others
        + claim.pid_proof.candidates,
        twin_pid=claim.pid if claim.present and claim.existence_is_lock else None,
        workers=claim.workers if claim.present else None,
        machine_id=claim.pid_proof.machine_id is not None,
        hidden_locks=claim.hidden_locks,
        names=claim.key_names,
    )


def is_writer_lock(lock: KernelLock, claim: Claim) -> bool:
    """Does this kernel lock block writers? Any lock does, unless the claim names the byte
    ranges where only a WRITE lock does (SQLite's RESERVED/PENDING/EXCLUSIVE bytes), and those
    where a READ lock does too (a rollback journal's SHARED range: no writer commits past it)."""
    if not claim.writer_ranges:
        return True
    ranges = claim.writer_ranges if lock.exclusive else claim.blocking_reads
    return any(span.overlaps(lock) for span in ranges)


def retrying_pids(claim: Claim, blocking: tuple[KernelLock, ...]) -> frozenset[int]:
    """The processes whose locks say they wait for others' (Claim.retry_locks: SQLite's
    PENDING without EXCLUSIVE, while another process holds SHARED). A POSIX lock is its
    process's own, and /proc/locks names that process; a lock with no PID (an OFD lock, one
    held from outside this PID namespace) is someone else's."""
    waiting: set[int] = set()
    for retry in claim.retry_locks:
        flagged = {lock.pid for lock in blocking if lock.exclusive and retry.flag.overlaps(lock)}
        for pid in flagged - {0, -1}:
            own = [lock for lock in blocking if lock.pid == pid]
            if any(lock.exclusive and retry.wanted.overlaps(lock) for lock in own):
                continue  # it has what it wanted: it holds, it does not wait
            if any(lock.pid != pid and retry.wanted.overlaps(lock) for lock in blocking):
                waiting.add(pid)
    return frozenset(waiting)


def lock_name(claim: Claim, locks: Iterable[KernelLock]) -> str | None:
    """What the lock's program calls the most telling of these locks (Claim.lock_names)."""
    found = named_lock(claim, locks)
    return found[0] if found is not None else None


def named_lock(claim: Claim, locks: Iterable[KernelLock]) -> tuple[str, KernelLock] | None:
    """The most telling of these locks by the lock's program's names, and its name."""
    held = list(locks)
    for named in claim.lock_names:
        for lock in held:
            if lock.mode == named.mode and named.span.overlaps(lock):
                return named.name, lock
    return None


def _judged_by_openers(claim: Claim) -> bool:
    """An existence lock naming no PID is judged by who has it open. One whose record is
    unreadable or untrusted is `unknown` whoever has it open: it need not pay the host-wide
    descriptor scan (a hostile directory full of bad records must not slow the run down)."""
    return (
        claim.present
        and claim.existence_is_lock
        and claim.pid is None
        and not claim.problem
        and not claim.distrust
    )


def gather(claim: Claim, snapshot: Snapshot) -> Evidence:
    kernel = [lock for key in claim.keys for lock in snapshot.kernel_locks(key)]
    granted = tuple(lock for lock in kernel if not lock.waiting)
    blocking = tuple(lock for lock in granted if is_writer_lock(lock, claim))
    retrying = retrying_pids(claim, blocking)
    writing = tuple(lock for lock in blocking if lock.pid not in retrying)
    reading = tuple(lock for lock in granted if not is_writer_lock(lock, claim))
    waiting = [lock for lock in kernel if lock.waiting]
    needs_openers = _judged_by_openers(claim)
    descriptors = (
        [found for key in claim.keys for found in snapshot.descriptors(key)]
        if granted or needs_openers
        else []
    )
    if granted and unmatched_locks(granted, descriptors):  # the capture counted the same
        descriptors += [found for key in claim.keys for found in snapshot.thread_descriptors(key)]
    writers = _named(
        claim,
        granted,
        _kernel_holders(
            writing,
            descriptors,
            snapshot,
            lambda lock: is_writer_lock(lock, claim) and lock.pid not in retrying,
        ),
    )
    readers = _named(
        claim,
        granted,
        _kernel_holders(
            reading, descriptors, snapshot, lambda lock: not is_writer_lock(lock, claim)
        ),
    )
    writer_pids = {holder.pid for holder in writers} | retrying
    workers, unreadable_cwds, unfollowed = _workers(claim, snapshot)
    waiters, unnamed_waiters = _waiters(waiting, descriptors, snapshot)
    known = {waiter.pid for waiter in waiters}
    waiters += tuple(
        waiter
        for waiter in _retrying_waiters(claim, blocking, retrying, snapshot)
        if waiter.pid not in known
    )
    return Evidence(
        boot_id=snapshot.boot_id,
        hostname=snapshot.hostname,
        booted_at=snapshot.booted_at,
        captured_at=snapshot.captured_at,
        pid_namespace=snapshot.pid_namespace,
        nested_pid_namespace=snapshot.nested_pid_namespace,
        hosts_proc=snapshot.hosts_proc,
        boottime_offset_s=snapshot.boottime_offset_s,
        granted=writing,
        kernel_holders=writers,
        waiters=waiters,
        openers=_openers(descriptors, snapshot) if needs_openers and not granted else (),
        record_process=snapshot.process(claim.pid) if claim.pid is not None else None,
        unreadable_pids=snapshot.unreadable_pids if (granted or needs_openers) else 0,
        other_processes=tuple(snapshot.process(pid) for pid in claim.pid_proof.others),
        host_node=snapshot.node_id() if claim.pid_proof.machine_id is not None else None,
        readers=tuple(holder for holder in readers if holder.pid not in writer_pids),
        workers=workers,
        unreadable_cwds=unreadable_cwds,
        unfollowed_workers=unfollowed,
        candidate_processes={pid: snapshot.process(pid) for pid in claim.pid_proof.candidates},
        namespace_twins=_namespace_twins(claim, snapshot, granted),
        survivors=_survivors(claim, snapshot, granted),
        work_left=_work_left(claim, snapshot, granted),
        work_untold=claim.pid in snapshot.work_untold and not granted,
        takers={lock.pid: snapshot.process(lock.pid) for lock in writing if lock.pid > 0},
        unattributed=_unattributed(claim, granted, descriptors, unnamed_waiters, snapshot),
        euid=snapshot.euid,
        ptrace_capable=snapshot.ptrace_capable,
    )


def _unattributed(
    claim: Claim,
    granted: tuple[KernelLock, ...],
    descriptors: list[Descriptor],
    unnamed_waiters: int,
    snapshot: Snapshot,
) -> Unattributed | None:
    """Granted locks (and waiters) no process could be named for, and the one true reason."""
    unnamed = uncarried(granted, descriptors)
    if not (unnamed or unnamed_waiters):
        return None
    why, outside = _why_unattributed(claim, snapshot, unnamed)
    return Unattributed(len(unnamed), unnamed_waiters, why, outside=outside)


OUTSIDE = (
    "a process outside lockwarden's PID namespace holds it: the kernel reports a POSIX lock "
    "whose owner has no PID in this namespace, which /proc/locks leaves out and no descriptor "
    "here carries"
)


def _why_unattributed(
    claim: Claim, snapshot: Snapshot, unnamed: list[KernelLock]
) -> tuple[str, bool]:
    """The one true reason, and whether it is (or may be) a holder outside lockwarden's PID
    namespace, whose hold lockwarden cannot time."""
    # Only F_OFD_GETLK's answer (formats/hidden.py) gives a lock no descriptor carries PID 0:
    # its owner has no PID in this namespace (fdinfo's PID-0 locks are carried), whatever else
    # could not be read.
    if any(lock.pid == 0 for lock in unnamed):
        return OUTSIDE, True
    hidden = snapshot.unreadable_pids
    if hidden:
        unless = "" if snapshot.nested_pid_namespace else f"; if none of them holds it, {IN_FLIGHT}"
        return (
            f"{processes(hidden)} descriptor tables could not be read "
            f"({_some_processes(snapshot.hidden_pids, snapshot)}): {missing_right(snapshot)}"
            f"{unless}"
        ), False
    if snapshot.nested_pid_namespace:
        return (
            "lockwarden runs in a container's PID namespace: a process outside it, which it "
            "cannot see, holds the descriptor, or the descriptor is in flight in a unix socket"
        ), False
    if not unnamed:  # every holder was named; only blocked requests were not
        return (
            "no process could be found for a blocked request: an OFD waiter is found by the "
            "fcntl(F_OFD_SETLKW) call its thread is blocked in, and it may have just been "
            "granted or given up"
        ), False
    mapped = sorted({pid for key in claim.keys for pid in snapshot.mapping_pids(key)})
    if mapped:
        pids = ", ".join(str(pid) for pid in mapped[:5])
        return (
            f"no process has it in a descriptor table, but PID {pids} maps the file into "
            "memory, which keeps a closed descriptor's lock alive"
        ), False
    return f"no process has it in a descriptor table or a memory mapping: {IN_FLIGHT}", False


IN_FLIGHT = (
    "the descriptor is in flight in a unix socket (sent with SCM_RIGHTS and not yet received) "
    "or held by the kernel itself (io_uring)"
)


def _some_processes(pids: tuple[int, ...], snapshot: Snapshot, shown: int = 3) -> str:
    """`PID 1 (init), PID 812 (dockerd) and 4 more`."""
    named = []
    for pid in pids[:shown]:
        process = snapshot.process(pid)
        named.append(f"PID {pid} ({process.name})" if process is not None else f"PID {pid}")
    more = f" and {len(pids) - shown} more" if len(pids) > shown else ""
    return ", ".join(named) + more


def processes(count: int) -> str:
    """`1 process's` / `3 processes'`, ready for a possessive noun."""
    return f"{count} process's" if count == 1 else f"{count} processes'"


def missing_right(snapshot: Snapshot | Evidence) -> str:
    """Which privilege would let lockwarden read the processes it could not (their
    /proc/PID/fd, fdinfo and cwd pass the kernel's ptrace check): never "run as root" to a
    process that already runs as root."""
    if snapshot.euid != 0:
        return (
            "they belong to other users; reading another user's /proc/PID/fdinfo needs root "
            "with CAP_SYS_PTRACE"
        )
    if not snapshot.ptrace_capable:
        return (
            "reading a more privileged process's /proc/PID/fdinfo needs CAP_SYS_PTRACE, which "
            "lockwarden runs without (add it to the unit's CapabilityBoundingSet and "
            "AmbientCapabilities)"
        )
    return (
        "the kernel refused even with CAP_SYS_PTRACE (a process in another user namespace, or "
        "a security module's rule)"
    )


def _workers(claim: Claim, snapshot: Snapshot) -> tuple[tuple[Holder, ...], int, int]:
    """Processes working in the claim's directories, oldest first, and how many more could
    not be read or followed; the cwd map is read only for a lock that is there and asks for
    it."""
    workers = claim.workers
    if not claim.present or workers is None:
        return (), 0, 0
    found = []
    for pid in snapshot.processes_working_in(workers.directories):
        process = snapshot.process(pid)
        if process is None or not process.alive:
            continue
        if not workers.may_be(process.name):
            continue
        found.append(holder_from_process(process, _how_it_works_there(workers, snapshot, pid)))
    found.sort(key=lambda holder: holder.start_ticks or 0)
    unfollowed = _live_workers(workers, snapshot, snapshot.unfollowed(workers.directories))
    return tuple(found), len(_hidden_workers(workers, snapshot)), len(unfollowed)


def _how_it_works_there(workers: Workers, snapshot: Snapshot, pid: int) -> str:
    """The evidence that ties a worker to the lock's directories."""
    cwd = snapshot.working_directories().by_pid.get(pid, "")
    if any(cwd == path or cwd.startswith(path.rstrip("/") + "/") for path in workers.directories):
        return "working directory"
    if workers.identities:
        return "its working directory, command line or environment leads to the directory"
    return "its command line or environment names the directory"


def _hidden_workers(workers: Workers, snapshot: Snapshot) -> list[int]:
    """Processes that could be workers but cannot be ruled out: their working directory (or,
    for a claim whose workers can be pointed there, their environment) cannot be read. When
    the claim names its workers, one whose name says otherwise cannot be one."""
    unreadable = (
        *snapshot.working_directories().unreadable_pids,
        *snapshot.hidden_workers.get(workers.directories, ()),
    )
    return _live_workers(workers, snapshot, unreadable)


def _live_workers(workers: Workers, snapshot: Snapshot, pids: Iterable[int]) -> list[int]:
    """Those of `pids` that still run, under a name a worker may have."""
    live = []
    for pid in pids:
        process = snapshot.process(pid)
        if process is not None and process.alive and workers.may_be(process.name):
            live.append(pid)
    return live


def _namespace_twins(
    claim: Claim, snapshot: Snapshot, granted: tuple[KernelLock, ...]
) -> tuple[int, ...]:
    """Only a record-named existence lock is judged by its PID; only then is the scan paid."""
    if claim.pid is None or granted or not (claim.present and claim.existence_is_lock):
        return ()
    return snapshot.namespace_twins(claim.pid)


def _survivors(
    claim: Claim, snapshot: Snapshot, granted: tuple[KernelLock, ...]
) -> tuple[Holder, ...]:
    """Asked, as the twins are, only of a record-named existence lock no kernel lock holds;
    the capture looked only when the PID is gone."""
    if claim.pid is None or granted or not (claim.present and claim.existence_is_lock):
        return ()
    recorded = snapshot.process(claim.pid)
    if recorded is not None and recorded.alive:
        return ()
    found = (snapshot.process(pid) for pid in snapshot.group_survivors(claim.pid))
    return tuple(
        holder_from_process(process) for process in found if process is not None and process.alive
    )


def _work_left(
    claim: Claim, snapshot: Snapshot, granted: tuple[KernelLock, ...]
) -> tuple[Holder, ...]:
    """Asked as the survivors are; the capture read them only for a remembered holder."""
    if claim.pid is None or granted or not (claim.present and claim.existence_is_lock):
        return ()
    found = (snapshot.process(pid) for pid in snapshot.left_running(claim.pid))
    return tuple(
        holder_from_process(process) for process in found if process is not None and process.alive
    )


def _kernel_holders(
    granted: tuple[KernelLock, ...],
    descriptors: list[Descriptor],
    snapshot: Snapshot,
    counts: Callable[[KernelLock], bool],
) -> tuple[Holder, ...]:
    """Processes whose descriptors carry the granted locks (those `counts` accepts); the
    /proc/locks PID only as a fallback for POSIX locks (owned by the process itself) when
    fdinfo cannot be read."""
    if not granted:
        return ()
    holders: dict[int, Holder] = {}
    for descriptor in descriptors:
        held = [lock for lock in descriptor.locks if not lock.waiting and counts(lock)]
        held.sort(key=lambda lock: not lock.exclusive)  # a WRITE lock says most of a holder
        process = snapshot.process(descriptor.pid) if held else None
        if process is not None and descriptor.pid not in holders:
            holders[descriptor.pid] = holder_from_process(process, lock=held[0])
    if not holders:
        for lock in granted:
            process = snapshot.process(lock.pid) if lock.kind == "POSIX" else None
            if process is not None and process.pid not in holders:
                holders[process.pid] = holder_from_process(process, lock=lock)
    return tuple(holders.values())


def _named(
    claim: Claim, granted: tuple[KernelLock, ...], holders: tuple[Holder, ...]
) -> tuple[Holder, ...]:
    """Each holder with what the lock's program calls its locks (Claim.lock_names), the one
    holding the most telling first: SQLite's EXCLUSIVE, then PENDING, RESERVED, SHARED. A POSIX
    lock is its process's own, as /proc/locks names it."""
    if not claim.lock_names:
        return holders
    names = [named.name for named in claim.lock_names]
    named = [_with_name(claim, holder, _own(granted, holder.pid)) for holder in holders]
    return tuple(sorted(named, key=lambda holder: _rank(names, holder.lock_name)))


def _with_name(claim: Claim, holder: Holder, own: list[KernelLock]) -> Holder:
    """The holder named by its most telling lock, shown with that lock's bytes (a process
    holds several: SQLite's EXCLUSIVE is the SHARED range, not the PENDING byte beside it)."""
    found = named_lock(claim, own)
    if found is None:
        return replace(holder, lock_name=None)
    name, lock = found
    return replace(holder, lock_name=name, lock_start=lock.start, lock_end=lock.end)


def _own(locks: Iterable[KernelLock], pid: int | None) -> list[KernelLock]:
    return [lock for lock in locks if lock.pid == pid and lock.kind == "POSIX"]


def _rank(names: list[str], name: str | None) -> int:
    return names.index(name) if name in names else len(names)


def _retrying_waiters(
    claim: Claim, blocking: tuple[KernelLock, ...], retrying: frozenset[int], snapshot: Snapshot
) -> tuple[Waiter, ...]:
    """The processes Claim.retry_locks shows waiting (a committing SQLite writer whose busy
    handler retries until the readers let go): waiters, named by the lock that says so."""
    found = []
    for pid in sorted(retrying):
        process = snapshot.process(pid)
        own = _own(blocking, pid)
        flag = next(
            (lock for lock in own for retry in claim.retry_locks if retry.flag.overlaps(lock)),
            None,
        )
        if process is not None and flag is not None:
            waiter = replace(_waiter(process, flag), lock_name=lock_name(claim, own))
            found.append(waiter)
    return tuple(found)


def _kind(lock: KernelLock) -> str:
    return f"{lock.kind} {lock.mode}"


def _waiters(
    waiting: list[KernelLock], descriptors: list[Descriptor], snapshot: Snapshot
) -> tuple[tuple[Waiter, ...], int]:
    """The processes blocked on the lock, and how many blocked requests none could be named
    for. /proc/locks names FLOCK and POSIX waiters; an OFD waiter shows as PID -1, so it is
    found among the file's openers by the fcntl(F_OFD_SETLKW) call a thread of it is in."""
    waiters: dict[int, Waiter] = {}
    unnamed = 0
    ofd_requests = [lock for lock in waiting if lock.pid <= 0]
    for lock in waiting:
        process = snapshot.process(lock.pid) if lock.pid > 0 else None
        if process is None:
            unnamed += lock.pid > 0
            continue
        waiters.setdefault(lock.pid, _waiter(process, lock))
    if ofd_requests:
        blocked = _ofd_waiters(ofd_requests, descriptors, snapshot)
        unnamed += len(ofd_requests) - len(blocked)
        for pid, waiter in blocked:
            waiters.setdefault(pid, waiter)
    return tuple(waiters.values()), unnamed


def _ofd_waiters(
    requests: list[KernelLock], descriptors: list[Descriptor], snapshot: Snapshot
) -> list[tuple[int, Waiter]]:
    """One waiter per thread blocked in F_OFD_SETLKW on a descriptor of this file (at most
    as many as there are OFD requests)."""
    found: list[tuple[int, Waiter]] = []
    seen: set[tuple[int, int]] = set()
    for descriptor in descriptors:
        for call in snapshot.blocked_calls(descriptor.pid):
            in_table = descriptor.tid is None or descriptor.tid == call.tid
            thread = (descriptor.pid, call.tid)
            if not (call.ofd and call.fd == descriptor.fd and in_table) or thread in seen:
                continue
            process = snapshot.process(descriptor.pid)
            if process is not None and len(found) < len(requests):
                seen.add(thread)
                found.append((descriptor.pid, _waiter(process, requests[len(found)])))
    return found


def _waiter(process: Process, lock: KernelLock) -> Waiter:
    """A writer blocked behind the lock: a Party like its holder, named by its command line
    (its kernel name when it has none)."""
    waiter = holder_from_process(process, lock=lock)
    return replace(waiter, cmdline=process.cmdline or (process.name,))


def _openers(descriptors: list[Descriptor], snapshot: Snapshot) -> tuple[Holder, ...]:
    openers: dict[int, Holder] = {}
    for descriptor in descriptors:
        process = snapshot.process(descriptor.pid)
        if process is not None and descriptor.pid not in openers:
            openers[descriptor.pid] = holder_from_process(process, "open descriptor")
    return tuple(openers.values())
