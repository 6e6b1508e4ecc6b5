"""`lockwarden why [PID]`: the blocked writer's question, answered from its side.

A process waits on a kernel lock while one of its threads is in flock(2) or fcntl(F_SETLKW,
F_OFD_SETLKW) on a descriptor (`/proc/PID/task/TID/syscall`, the same reading that names OFD
waiters for `inspect`): that descriptor's file is the lock it waits for, judged like any lock
(`inspect`; an SQLite database as SQLite, formats.LOCKED_FILE, so a rollback journal's reader
in a transaction holds it and a writer waiting in COMMIT does not), so its holders come from
their descriptors, never from a guess; of them, those whose locks conflict with the request
(flock(2) and fcntl locks never meet, two read locks never conflict, byte ranges must overlap)
are the ones it waits for. A holder that
itself waits is followed to the end of the chain; a holder met twice is a deadlock. A process
in no lock call is not waiting on any lock lockwarden can see, and is said to be doing what its
state, wait channel and system call say.

A process in no kernel lock call may wait on a database server: its session waits on a lock
that one of the configured database locks watches (`inspect` of those names each waiting
session's local client, found through its socket, as it names holders). Such a process is
answered with that lock, its holding session and the holder's client process and unit, and a
client that itself waits is followed on as any holder.

Without a PID, every process the kernel lists as waiting in /proc/locks is answered for, and
every local client waiting on a configured database lock.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lockwarden.check.advice import advise_holder
from lockwarden.formats.sqlite import database_path, has_sqlite_header
from lockwarden.model import (
    Finding,
    Holder,
    InodeKey,
    KernelLock,
    Severity,
    State,
    Waiter,
    command_text,
)
from lockwarden.output.report import finding_document, json_text
from lockwarden.procfs.snapshot import (
    PROC_READ_TIMEOUT_S,
    BlockedCall,
    blocked_calls,
    descriptor_inode,
    descriptor_locks,
    descriptor_path,
    held_locks,
    index_proc_locks,
    parse_lock_line,
    reachable_path,
    read_within,
)
from lockwarden.support.durations import format_time
from lockwarden.support.escape import visible_lines
from lockwarden.support.namespaces import proc_is_hosts, proc_locks_may_omit

MAX_CHAIN = 8
"""How many holders-that-wait a chain is followed through."""
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible sleep (disk or a hung mount)",
    "T": "stopped",
    "t": "stopped by a debugger",
    "Z": "a zombie",
    "I": "idle",
}

Inspector = Callable[[str], Finding]
"""Judges the lock at a path (the `inspect` of one kernel lock, with the budgets given)."""
DatabaseLooks = Callable[[], Sequence[Finding]]
"""The findings of the configured database locks, asked of their servers now."""


@dataclass(frozen=True)
class Wait:
    """One lock call a process is blocked in: the file, the call, and that lock's finding."""

    pid: int
    path: str | None
    call: str
    finding: Finding | None
    behind: tuple[Answer, ...] = ()  # the holders that wait in turn
    blockers: tuple[Holder, ...] = ()  # the holders whose lock the request conflicts with


@dataclass(frozen=True)
class Answer:
    """Why one process does not go on: the locks it waits for, or what it does instead."""

    pid: int
    command: str
    waits: tuple[Wait, ...] = ()
    doing: str | None = None  # what it does, when it waits on no lock
    deadlock: bool = False
    problem: str | None = None  # why lockwarden cannot tell
    locked_open: tuple[Wait, ...] = ()
    """When it waits on no lock: files it has open that other processes hold a kernel lock on
    (a program that retries a lock in a loop, as SQLite's busy timeout does, sleeps between
    tries instead of waiting in a lock call). Candidates, not proof that it waits for them."""

    @property
    def severity(self) -> Severity:
        if self.problem is not None:
            return Severity.UNKNOWN
        found = [wait.finding.severity for wait in self.waits if wait.finding is not None]
        found += [answer.severity for wait in self.waits for answer in wait.behind]
        if self.deadlock:
            found.append(Severity.CRITICAL)
        return max(found, default=Severity.OK)


@dataclass
class Walk:
    """The processes a chain has met, to tell a deadlock from a long chain."""

    inspect: Inspector
    proc: str = "/proc"
    seen: list[int] = field(default_factory=list)
    databases: DatabaseLooks | None = None
    _database_findings: Sequence[Finding] | None = None
    _looked: dict[str, Finding] = field(default_factory=dict)

    def look(self, path: str) -> Finding:
        """The lock at `path` judged once per `why`: a waiter's lock and the same file among
        its holder's open files are one inspection (each walks every process's descriptors)."""
        if path not in self._looked:
            self._looked[path] = self.inspect(path)
        return self._looked[path]

    def database_findings(self) -> Sequence[Finding]:
        """Asked of the servers once per `why`, and only when a process waits on no kernel
        lock (a server may take seconds to answer)."""
        if self._database_findings is None:
            self._database_findings = self.databases() if self.databases is not None else ()
        return self._database_findings


def answer(pid: int, walk: Walk) -> Answer:
    command = _command(walk.proc, pid)
    if command is None:
        return Answer(pid, "?", problem=f"no process {pid} is running here")
    if pid in walk.seen:
        return Answer(pid, command, deadlock=True)
    if len(walk.seen) >= MAX_CHAIN:
        return Answer(pid, command, problem=f"a chain longer than {MAX_CHAIN} waits")
    walk.seen.append(pid)
    try:
        calls = blocked_calls(walk.proc, pid)
        if calls:
            return Answer(pid, command, waits=tuple(_wait(pid, call, walk) for call in calls))
        on_servers = _database_waits(pid, walk)
        if on_servers:
            return Answer(pid, command, waits=on_servers)
        doing = _doing(walk.proc, pid)
        silent = unanswered(walk.database_findings())
        if silent:  # a wait on a server that did not answer cannot be ruled out
            return Answer(pid, command, doing=doing, problem=f"{doing}; but {silent[0]}")
        return Answer(pid, command, doing=doing, locked_open=_locked_open(pid, walk))
    finally:
        walk.seen.pop()


def _wait(pid: int, call: BlockedCall, walk: Walk) -> Wait:
    kind = "OFD fcntl" if call.ofd else call.call
    named = descriptor_path(walk.proc, pid, call.fd)
    inode = descriptor_inode(walk.proc, pid, call.fd)
    if named is None:
        return Wait(pid, None, kind, None)
    path = reachable_path(walk.proc, pid, named, call.fd)  # a container's: its name here
    finding = walk.look(path)
    if inode is None or finding.key is None or finding.key[1] != inode:
        # unlinked and made again, or another mount namespace's path: not the waited-for file
        return Wait(pid, None, kind, None)
    asked = Asked(call, pid, _request(walk.proc, pid, inode, call.ofd), _own_ofd(walk, pid, call))
    blockers = tuple(
        holder
        for holder in finding.holders
        if holder.pid is not None and _blocks(walk.proc, holder, finding.key, asked)
    )
    behind = tuple(answer(holder.pid, walk) for holder in blockers if holder.pid is not None)
    waiting = tuple(item for item in behind if item.waits or item.deadlock or item.problem)
    return Wait(pid, path, kind, finding, waiting, blockers)


def _own_flock(call: BlockedCall) -> bool:
    """Whether a flock(2) the waiter itself holds on the file can be what it waits for: flock
    locks belong to open file descriptions, and a conversion on the one it waits through lets
    go of the old lock before it waits, so one it still holds is on another open of the file:
    a wait on itself, which never ends (a POSIX lock never waits on its own process; an OFD
    lock held through the same description would not block it, and which description holds
    it is not read here)."""
    return call.call == "flock" and not call.ofd


DATABASE_CALL = "a database session"
RETRY_CALL = "a retry loop?"
MAX_OPEN_LOOKED_AT = 4096
"""Descriptors of one process looked at for files others hold a lock on."""


def _locked_open(pid: int, walk: Walk) -> tuple[Wait, ...]:
    """The files `pid` has open that another process holds a kernel lock on, each judged as
    a wait would be (its holders, the action); only inodes /proc/locks lists are looked at."""
    try:
        with open(f"{walk.proc}/locks") as handle:
            listed = index_proc_locks(handle.read())
        names = os.listdir(f"{walk.proc}/{pid}/fd")[:MAX_OPEN_LOOKED_AT]
    except OSError:
        return ()
    found: dict[str, Wait] = {}
    for name in names:
        inode = descriptor_inode(walk.proc, pid, int(name))
        if inode is None or inode not in listed:
            continue
        named = descriptor_path(walk.proc, pid, int(name))
        if named is None:
            continue
        path = reachable_path(walk.proc, pid, named, int(name))
        if path in found or _judged_with_its_database(path):
            continue
        finding = walk.look(path)
        if finding.key is None or finding.key[1] != inode:
            continue
        others = tuple(h for h in finding.holders if h.pid is not None and h.pid != pid)
        if others:
            found[path] = Wait(pid, path, RETRY_CALL, finding, blockers=others)
    return tuple(found.values())


def _judged_with_its_database(path: str) -> bool:
    """SQLite's `-shm` (or `-wal`, `-journal`) beside a database: judged with the database,
    which the process has open too. Beside any other file it is a lock of its own."""
    database = database_path(path)
    return database != path and has_sqlite_header(database)


def local_client(waiter: Waiter) -> bool:
    """A database lock's waiter named by its client process on this host (a session whose
    client is not here is listed by its backend, its command in brackets)."""
    return bool(waiter.cmdline) and not waiter.cmdline[0].startswith("[")


def _database_waits(pid: int, walk: Walk) -> tuple[Wait, ...]:
    """The configured database locks whose waiting sessions include one of this process's."""
    waits = []
    for finding in walk.database_findings():
        if not any(w.pid == pid and local_client(w) for w in finding.waiters):
            continue
        blockers = tuple(holder for holder in finding.holders if holder.pid != pid)
        behind = tuple(answer(h.pid, walk) for h in blockers if h.pid is not None)
        waiting = tuple(item for item in behind if item.waits or item.deadlock or item.problem)
        waits.append(Wait(pid, finding.path, DATABASE_CALL, finding, waiting, blockers))
    return tuple(waits)


def unanswered(findings: Sequence[Finding]) -> list[str]:
    """The database locks whose server could not be asked, each with why."""
    return [
        f"{finding.path} could not be asked: {finding.reason}"
        for finding in findings
        if finding.state is State.UNKNOWN
    ]


def database_waiting_pids(findings: Sequence[Finding]) -> list[int]:
    """The local clients whose sessions wait on a configured database lock."""
    return sorted(
        {
            waiter.pid
            for finding in findings
            for waiter in finding.waiters
            if waiter.pid is not None and local_client(waiter)
        }
    )


@dataclass(frozen=True)
class Asked:
    """What a waiter asks for, and what cannot be in its way because it is its own."""

    call: BlockedCall
    pid: int
    requests: tuple[KernelLock, ...]
    """The lock it asks for (flock, POSIX: /proc/locks names it by its PID), or for an OFD
    request, which /proc/locks lists with no PID, every OFD request waiting on the inode: one
    of them is its own. Empty when none is listed: then it is not known."""
    own: frozenset[tuple[str, int, int | None]]
    """For an OFD request, the OFD locks the open file description it waits through holds
    (the `lock:` lines of that descriptor's fdinfo), as (mode, start, end): an owner never
    waits on itself, and every process that shares that description lists them too."""


def _request(proc: str, pid: int, inode: int, ofd: bool) -> tuple[KernelLock, ...]:
    """The lock `pid` asks for on this inode, as /proc/locks lists its blocked request; an OFD
    request shows no PID there, so every OFD request waiting on the inode."""
    try:
        with open(f"{proc}/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ()
    found = []
    for line in lines:
        lock = parse_lock_line(line)
        if lock is None or not lock.waiting or lock.key[1] != inode:
            continue
        if (lock.kind == "OFDLCK" and lock.pid <= 0) if ofd else lock.pid == pid:
            found.append(lock)
    return tuple(found) if ofd else tuple(found[:1])


def _own_ofd(walk: Walk, pid: int, call: BlockedCall) -> frozenset[tuple[str, int, int | None]]:
    """The OFD locks held through the descriptor an OFD request waits through."""
    if not call.ofd:
        return frozenset()
    held = descriptor_locks(walk.proc, pid, call.fd) or []
    return frozenset((lock.mode, lock.start, lock.end) for lock in held if lock.kind == "OFDLCK")


KERNEL_KINDS = ("FLOCK", "POSIX", "OFDLCK")
FAMILIES = {"flock": ("FLOCK",), "fcntl": ("POSIX", "OFDLCK")}
"""The kernel locks each lock call can wait for: flock(2) locks and fcntl's POSIX and OFD
locks are kept apart and never block each other."""


def _blocks(proc: str, holder: Holder, key: InodeKey, asked: Asked) -> bool:
    """Whether a holder holds a lock the request conflicts with: every lock it holds on the
    file, read from its descriptors (a process may hold a flock and byte ranges at once), but
    those of the request's own owner; when they cannot be read, or none carries the lock (a
    memory mapping keeps a flock), the lock it is named with."""
    assert holder.pid is not None
    call = asked.call.call
    held = held_locks(proc, holder.pid, key)
    if held:
        return any(
            _conflicts(lock.kind, lock.mode, lock.start, lock.end, call, asked.requests)
            for lock in held
            if not _same_owner(lock, holder.pid, asked)
        )
    if holder.pid == asked.pid and not _own_flock(asked.call):
        return False  # what of its own is in its way is not known
    kind, _space, mode = (holder.lock_kind or "").partition(" ")
    return _conflicts(kind, mode, holder.lock_start, holder.lock_end, call, asked.requests)


def _same_owner(lock: KernelLock, pid: int, asked: Asked) -> bool:
    """Whether a held lock belongs to the request's owner, which never waits on itself: a POSIX
    request's is its process (its POSIX locks), an OFD request's the open file description it
    waits through. A process's POSIX lock is in the way of its own OFD request, and its OFD
    locks through another description in the way of either: waits that never end."""
    if lock.kind == "POSIX":
        return pid == asked.pid and asked.call.call == "fcntl" and not asked.call.ofd
    if lock.kind == "OFDLCK":
        return asked.call.ofd and (lock.mode, lock.start, lock.end) in asked.own
    return False


def _conflicts(
    kind: str,
    mode: str,
    start: int | None,
    end: int | None,
    call: str,
    requests: Sequence[KernelLock],
) -> bool:
    """Whether a held lock can be what the request waits for: one of the family the call waits
    on, not a read lock when a read lock is asked for, on bytes that overlap (a POSIX lock on
    other bytes of the file blocks nobody here); of several candidate requests, any. What is
    unknown of either side: yes."""
    if kind in KERNEL_KINDS and kind not in FAMILIES.get(call, KERNEL_KINDS):
        return False
    if not requests:
        return True
    return any(_conflicts_with(mode, start, end, request) for request in requests)


def _conflicts_with(mode: str, start: int | None, end: int | None, request: KernelLock) -> bool:
    if mode == "READ" and request.mode == "READ":
        return False
    if start is None:
        return True
    held_end = math.inf if end is None else end
    request_end = math.inf if request.end is None else request.end
    return start <= request_end and request.start <= held_end


def _command(proc: str, pid: int) -> str | None:
    """Its command line, read on a helper thread (a stuck process's can hang: a page fault on
    a hung mount holds its memory lock), else its kernel name; None when it is gone."""
    try:
        with open(f"{proc}/{pid}/comm") as handle:
            name = f"[{handle.read().strip()}]"
    except OSError:
        return None
    raw = read_within(f"{proc}/{pid}/cmdline", PROC_READ_TIMEOUT_S)
    parts = tuple(part for part in (raw or "").split("\0") if part)
    return command_text(parts, 80) if parts else name


def _doing(proc: str, pid: int) -> str:
    """What a process that waits on no lock is doing: its state, wait channel, system call."""
    facts = []
    try:
        with open(f"{proc}/{pid}/stat") as handle:
            stat = handle.read()
        state = stat[stat.rfind(")") + 2 :].split()[0]
        facts.append(STATES.get(state, f"in state {state}"))
    except (OSError, IndexError):
        pass
    for name, label in (("wchan", "waiting in the kernel at"), ("syscall", "in system call")):
        try:
            with open(f"{proc}/{pid}/{name}") as handle:
                value = handle.read().split()
        except OSError:
            continue
        if value and value[0] not in ("0", "running", "-1"):
            facts.append(f"{label} {value[0]}")
    return ", ".join(facts) or "nothing lockwarden can read"


def waiting_pids(proc: str = "/proc") -> list[int]:
    """Every process /proc/locks lists as waiting (OFD waiters show no PID there)."""
    with open(f"{proc}/locks") as handle:
        text = handle.read()
    pids = {
        lock.pid
        for lines in index_proc_locks(text).values()
        for lock in map(parse_lock_line, lines)
        if lock is not None and lock.waiting and lock.pid > 0
    }
    return sorted(pids)


def hidden_waiters(proc: str = "/proc") -> str | None:
    """Why the list of waiting processes may be short, when it may: in a PID namespace with a
    /proc of its own, /proc/locks leaves out a lock whose holder lives outside it (or whose
    taker has exited), and with it every process waiting behind that lock."""
    if not proc_locks_may_omit(proc) or proc_is_hosts(proc):
        return None
    return (
        "this PID namespace's /proc/locks leaves out every lock held from outside it (or whose "
        "taker has exited), and the processes waiting behind it: only the waits it shows are "
        "listed; ask about a process that seems stuck with `lockwarden why PID`"
    )


def render_text(answers: Sequence[Answer]) -> str:
    if not answers:
        return "no process waits on a kernel lock here\n"
    # Each line is escaped whole once composed (support/escape.py): a file name or a
    # process's command line can neither end a line nor move the cursor to forge another.
    return visible_lines([line for each in answers for line in _answer_lines(each, "")])


def _answer_lines(item: Answer, indent: str) -> list[str]:
    who = f"PID {item.pid} ({item.command})"
    if item.problem:
        return [f"{indent}{who}: cannot tell: {item.problem}"]
    if item.deadlock:
        return [f"{indent}{who} is waiting already, earlier in this chain: a deadlock"]
    if not item.waits:
        lines = [f"{indent}{who} is not waiting on any lock lockwarden can see: {item.doing}"]
        for wait in item.locked_open:
            lines.append(
                f"{indent}    but a file it has open is {_what(wait)}; a program that retries "
                "a lock in a loop (SQLite's busy timeout) sleeps between tries like this"
            )
        return lines
    lines = []
    for wait in item.waits:
        lines.append(f"{indent}{who} waits in {wait.call} for {_what(wait)}")
        for behind in wait.behind:
            lines.extend(_answer_lines(behind, indent + "    "))
    return lines


def to_free_it(wait: Wait) -> str | None:
    """What frees the lock this wait is for: its action, or, for one held within its budget,
    the action it would get past its budget for the holders this request conflicts with (the
    same advice), which a person whose command waits may take rather than wait. None when no
    holder in its way is named."""
    finding = wait.finding
    if finding is None or not wait.blockers:
        return None
    if finding.action:
        return finding.action
    first, *others = wait.blockers
    if finding.state is not State.HELD or first.pid is None or wait.call == DATABASE_CALL:
        return None  # a database session's action is judged with its client (check/database)
    return advise_holder(first, tuple(others), finding.format)


def _what(wait: Wait) -> str:
    finding = wait.finding
    if wait.path is None or finding is None:
        return "a lock on a file lockwarden cannot name"
    action = f" — {finding.action}" if finding.action else ""
    if not action and (early := to_free_it(wait)):
        ending = (
            "a deadlock never ends by itself"
            if _deadlocked(wait)
            else ("no action is due yet: it may end by itself")
        )
        action = f" — to free it now: {early} ({ending})"
    if not wait.blockers:
        return f"a lock on {wait.path}: {finding.reason}"
    names = ", ".join(holder.describe() for holder in wait.blockers)
    held = f" {_held(finding)}" if finding.held_for_s is not None else ""
    return f"a lock on {wait.path}, held{held} by {names}{action}"


def _deadlocked(wait: Wait) -> bool:
    """Whether the chain behind this wait meets a process already in it: a deadlock."""
    return any(
        item.deadlock or any(_deadlocked(further) for further in item.waits) for item in wait.behind
    )


def _held(finding: Finding) -> str:
    from lockwarden.support.durations import format_duration

    assert finding.held_for_s is not None
    return f"{finding.held_bound.words}{format_duration(finding.held_for_s)}"


def render_json(answers: Sequence[Answer], now: datetime) -> str:
    processes = [_doc(item) for item in answers]
    document = {"version": 1, "checked_at": format_time(now), "processes": processes}
    return json_text(document)


def _doc(item: Answer) -> dict[str, object]:
    return {
        "pid": item.pid,
        "command": item.command,
        "blocked": bool(item.waits),
        "deadlock": item.deadlock,
        "doing": item.doing,
        "problem": item.problem,
        "severity": item.severity.label,
        "locked_open": [
            {
                "path": wait.path,
                "lock": finding_document(wait.finding) if wait.finding else None,
                "held_by": [h.pid for h in wait.blockers if h.pid is not None],
                "to_free_it": to_free_it(wait),
            }
            for wait in item.locked_open
        ],
        "waits": [
            {
                "call": wait.call,
                "path": wait.path,
                "lock": finding_document(wait.finding) if wait.finding else None,
                "blocked_by": [h.pid for h in wait.blockers if h.pid is not None],
                "to_free_it": to_free_it(wait),
                "behind": [_doc(behind) for behind in wait.behind],
            }
            for wait in item.waits
        ],
    }
