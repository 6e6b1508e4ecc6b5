"""The shared vocabulary of every stage: states, severities, claims, holders, findings."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from lockwarden.support.escape import visible
from lockwarden.support.redact import redact_argv


class State(enum.StrEnum):
    FREE = "free"
    HELD = "held"
    HELD_TOO_LONG = "held_too_long"
    STALE = "stale"
    UNKNOWN = "unknown"


class Severity(enum.IntEnum):
    """Nagios plugin codes. The run's exit code is the worst of them, where critical outranks
    unknown: one lock that cannot be judged (or a degraded state file) must not turn a run
    with a blocked store from 2 into 3."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.OK: 0, Severity.WARNING: 1, Severity.UNKNOWN: 2, Severity.CRITICAL: 3}


def worst(severities: Iterable[Severity]) -> Severity:
    return max(severities, key=lambda severity: severity.rank, default=Severity.OK)


InodeKey = tuple[int, int]
"""(major:minor device number as st_dev, inode) — how /proc/locks and stat() name a file."""


class StaleProof(enum.StrEnum):
    """What, for a lock left behind, proves that its holder is gone.

    A format picks the one its program makes true, with the fact that makes it sound
    (Staleness).
    """

    RECORD = "record"
    """The PID the record names is dead, reused, or from another boot (the default)."""
    NO_OPENER = "no-opener"
    """The holder keeps the lock file open while it holds it: no opener means released."""
    NO_KERNEL_LOCK = "no-kernel-lock"
    """The holder keeps a kernel lock on `Claim.keys` while it holds it (a leftover record)."""
    NO_WORKER = "no-worker"
    """A process of `Claim.workers` works on its directories while it holds it; with none
    there, the lock is stale once older than the policy's `stale_after`."""
    NEVER = "never"
    """A kernel lock: nothing is left behind, so it is never stale."""


NEEDS_A_FACT = frozenset({StaleProof.NO_OPENER, StaleProof.NO_KERNEL_LOCK, StaleProof.NO_WORKER})


@dataclass(frozen=True)
class Staleness:
    """How a lock of one format left behind is proven stale: the proof, and for a proof from
    what is missing now (no opener, no kernel lock, no worker) the fact about its program that
    makes the absence a proof ("git removes its lock files before it exits"), said in the
    proof. A proof that needs the fact cannot be built without one."""

    proof: StaleProof = StaleProof.RECORD
    fact: str | None = None

    def __post_init__(self) -> None:
        if self.proof in NEEDS_A_FACT and not self.fact:
            raise ValueError(f"the {self.proof} proof needs the fact that makes it sound")


class ByteRange(NamedTuple):
    """Bytes start..end (inclusive) of one file: where a WRITE lock means a writer."""

    key: InodeKey
    start: int
    end: int

    def overlaps(self, lock: KernelLock) -> bool:
        if lock.key != self.key:
            return False
        return lock.start <= self.end and (lock.end is None or lock.end >= self.start)


class LockName(NamedTuple):
    """What a program calls a kernel lock of `mode` (READ or WRITE) on `span`: SQLite's SHARED
    is a READ lock on its SHARED range, its EXCLUSIVE a WRITE lock on the same bytes."""

    span: ByteRange
    mode: str
    name: str


class RetryLock(NamedTuple):
    """A WRITE lock on `flag` that says its holder is on its way to a WRITE lock on `wanted` and
    tries again until it gets it, in a loop the kernel does not see (SQLite's PENDING byte,
    taken before EXCLUSIVE and kept while its busy handler sleeps). While another process holds
    a lock that blocks writers on `wanted`, the flag's holder waits for that process: it is a
    waiter, and that process is the one in the way."""

    flag: ByteRange
    wanted: ByteRange


@dataclass(frozen=True)
class Workers:
    """The processes that work on a lock's directories, and so may hold it: the proof of a
    lock no record names (git's index.lock, StaleProof.NO_WORKER) and of a holder's helpers
    (a dead postmaster's backends). A candidate is never named the holder: nothing proves which
    of them took it."""

    directories: tuple[str, ...]
    """A process whose working directory is inside one of these works there."""
    names: tuple[str, ...] = ()
    """Only processes the kernel names so (comm) can be workers; empty: any (`may_be`)."""
    variables: tuple[str, ...] = ()
    """Environment variables that point a worker at the directories from elsewhere (git's
    GIT_DIR); when set, so may its command-line paths (`-C`, `--git-dir=`), and a worker whose
    environment cannot be read cannot be ruled out."""
    identities: tuple[InodeKey, ...] = ()
    """The directories' own identities (st_dev, st_ino), read with the claim. When set, a
    worker that no path ties to them is followed by identity: its working directory and the
    paths it is pointed at, each with every directory above it, as the worker itself sees
    them (through a bind mount, a symlink, another mount namespace); one that cannot be
    followed cannot be ruled out."""
    pointer: tuple[str, str] | None = None
    """A file (name, the prefix before the path it holds) that, in a directory a worker is
    followed through, points it at the directory it works on (git's `.git` file in a work
    tree whose git directory is elsewhere: `gitdir: PATH`): that directory, and those above
    it, are followed too."""

    def may_be(self, name: str) -> bool:
        """Whether a process the kernel names so (comm) can be a worker: any, when `names` is
        empty; a name ending in `*` takes every name it begins (`git-*`: git-receive-pack)."""
        if not self.names:
            return True
        return any(
            name == wanted or (wanted.endswith("*") and name.startswith(wanted[:-1]))
            for wanted in self.names
        )


@dataclass(frozen=True)
class PathControl:
    """Who besides root can change where a lock's path leads (formats/trust.py), which decides
    how it may be removed by hand. The default: only root can (a command run as root through
    the path goes where lockwarden looked)."""

    owner: tuple[int, int] | None = None
    """The lock's owner (uid, gid) can change a directory on the way: a removal by hand runs
    as them, so it can do nothing they could not do themselves."""
    refused: str | None = None
    """Someone else can change the path (or it passes through a symlink a user made): no
    command through it is offered, and this says why."""


@dataclass(frozen=True)
class PidProof:
    """What a record says beyond its PID (with `start_ticks`, `boot_id`, `pid_namespace` and
    `host`, which every record may carry) that tells its holder from a process that merely has
    the PID now, or names more PIDs. Each is a mechanism classify applies whatever the format."""

    executables: tuple[str, ...] = ()
    """The programs known to hold this lock (Chromium's and Firefox's profile locks): a live PID
    running one of them is the holder; anything else is probably a reused PID, but no proof
    (an Electron app takes a Chromium profile's lock under its own name)."""
    others_prove_reuse: bool = False
    """A live PID running none of `executables` is proof of a reused PID: the program of any
    name that holds this lock also holds a kernel lock, which decides first (a Firefox profile's
    `.parentlock`: a Firefox fork holds it too)."""
    machine_id: int | None = None
    """The machine id recorded beside the host name (borg's `uuid.getnode()`): a host of the
    same name with another id is another machine."""
    started_at_is_start: bool = False
    """The claim's `started_at` is the holder's own start time (postmaster.pid), so a process
    that started clearly before it is not the holder either."""
    others: tuple[int, ...] = ()
    """Further holders the record lists (borg's roster)."""
    candidates: tuple[int, ...] = ()
    """The layout names one of these PIDs and cannot say which (lockfile's names)."""


@dataclass(frozen=True)
class Claim:
    """What a lock's files say, read by a format; no judgement, no policy.

    ``present`` means the lock's own artefact exists (the file, the directory, the symlink).
    ``existence_is_lock`` is true for layouts where the artefact alone blocks writers (mkdir
    locks, O_EXCL files, symlink locks, pidfiles); false where only a kernel lock counts.
    ``problem`` is set when the record exists but cannot be trusted; the claim's pid is then None.
    ``break_command`` is the command the lock's own program offers to break it when stale.
    ``max_hold_s`` is the holder's own declared limit (`lockwarden hold --max-hold`), if any.
    ``started_at_naive``: the record's time gave no offset. It is read as UTC in
    ``started_at``, but its writer may have meant its local time (`datetime.now()`), which this
    host's zone reads otherwise (classify.record_start).

    Mechanisms a format can switch on (classify.py applies them, whatever the format):
    ``writer_ranges``: only a WRITE kernel lock overlapping one of them blocks writers; any other
    kernel lock is a reader (listed, but the lock is free for writes), unless it is a READ lock
    overlapping one of ``blocking_reads`` (SQLite's SHARED range in rollback-journal mode, where
    no writer commits while a reader holds it): that one blocks writers too.
    ``retry_locks``: kernel locks that say their holder waits, in a retry loop, for the holders
    of other bytes (RetryLock): it is listed as a waiter, not a holder, while they hold them.
    ``lock_names``: what the lock's program calls its kernel locks, first the one that says most
    (LockName); a holder is described by the first it holds.
    ``stale``: what proves a left-behind lock stale, and the fact about its program that makes
    that proof sound.
    ``workers``: the processes that work on the lock's directories, and so may hold it.
    ``hidden_locks``: POSIX locks on its files that the kernel reported (F_OFD_GETLK) but
    /proc/locks leaves out, held from outside lockwarden's PID namespace (formats/hidden.py).
    ``pid_proof``: what the record says beyond its PID that tells its holder from a process
    that merely has the PID now (PidProof).
    ``never_remove``: why the lock file must never be deleted; no action ever says to.
    ``distrust`` is set when the record parsed but someone other than its writer could have put
    it there (formats/trust.py); its PID must then decide nothing.
    ``missing_directory`` is set when the lock is absent and so is the directory it should be
    in (read with the claim, within its deadline): then its absence says nothing.
    ``path_control``: who besides root can change where the path to its `remove_path` leads
    (PathControl); read with the claim, a stale lock's printed removal depends on it.
    ``key_names``: the one name of each of its inodes that has exactly one (a directory, or a
    file with one link), lstat-ed at a path the claim read (formats.read_claim): a descriptor
    on it shows that name, which spares the descriptor walk most fdinfo reads (snapshot.Names).
    """

    format: str
    path: str
    present: bool
    existence_is_lock: bool
    keys: tuple[InodeKey, ...] = ()
    pid: int | None = None
    role: str | None = None
    host: str | None = None
    user: str | None = None
    started_at: datetime | None = None
    started_at_naive: bool = False
    start_ticks: int | None = None
    boot_id: str | None = None
    pid_namespace: int | None = None
    created_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    note: str | None = None
    record_path: str | None = None
    owner_uid: int | None = None
    remove_path: str | None = None
    break_command: str | None = None
    max_hold_s: float | None = None
    writer_ranges: tuple[ByteRange, ...] = ()
    blocking_reads: tuple[ByteRange, ...] = ()
    retry_locks: tuple[RetryLock, ...] = ()
    lock_names: tuple[LockName, ...] = ()
    stale: Staleness = Staleness()
    workers: Workers | None = None
    hidden_locks: tuple[KernelLock, ...] = ()
    pid_proof: PidProof = PidProof()
    never_remove: str | None = None
    distrust: str | None = None
    missing_directory: str | None = None
    key_names: tuple[tuple[InodeKey, str], ...] = ()
    path_control: PathControl = PathControl()


@dataclass(frozen=True)
class Container:
    """The container a process runs in, as the host sees it (procfs/containers.py)."""

    runtime: str
    """podman, docker, systemd-nspawn or lxc."""
    name: str
    """The runtime's name for it (a short ID when no name could be read)."""
    ident: str | None = None
    """The runtime's full ID (podman, docker)."""
    init: bool = False
    """The process is the container's own PID 1: its job, which stopping the container ends."""
    by_name: bool = True
    """Its runtime reaches it by this name (an nspawn container systemd-machined does not know
    is reached by no name: `machinectl` and `systemctl -M` cannot stop it)."""
    owner: str | None = None
    """The user whose rootless container it is (in their delegated cgroup subtree, named from
    their own records, which they write); None: root's."""

    def describe(self) -> str:
        """`docker container prod-db`; a user's `lw-mallory's podman container prod-db`: a name
        a user gave is never read as root's container of that name."""
        mine = f"{self.owner}'s " if self.owner is not None else ""
        return f"{mine}{self.runtime} container {self.name}"


class Descendant(NamedTuple):
    """A process below another, with its process group (stopping an ancestor's group stops it
    only while it is still in that group), its name (stat's comm), the signals it ignores
    (Process.ignored) and its start ticks (with the PID, which process it is: LeftWork)."""

    pid: int
    group: int
    name: str
    ignored: int = 0
    start_ticks: int = 0


class LeftWork(NamedTuple):
    """What ran below a record-named holder when a run last saw it hold its lock (the
    sighting memory, check/sightings.py). Its work may outlive it: a worker that left the
    holder's group and session (`setsid`) is tied to it by nothing the kernel keeps once the
    holder is gone (`kill -9`), and while one of these still runs, the record naming the gone
    holder is not proof the lock was left behind."""

    holder: int
    """The holder's PID, as its record names it."""
    boot_id: str
    """The boot the processes ran in: PIDs and start ticks name a process only within it."""
    work: tuple[tuple[int, int, str], ...]
    """Each process below it: PID, start ticks, name (stat's comm)."""
    more: bool = False
    """More ran below it than `work` lists (Process.more_below): what else may still run is
    not known, so its work is never proven ended."""


class Credentials(NamedTuple):
    """What the kernel checks a process's open of a file against (its /proc/PID/status, in
    the host's numbers): the file-system user and group, the supplementary groups, and
    whether CAP_DAC_OVERRIDE lets it past a file's mode bits."""

    fsuid: int
    fsgid: int
    groups: frozenset[int]
    dac_override: bool
    """Effective, and held in lockwarden's own user namespace: a capability held only in a
    user namespace of the process's own (any user can make one) overrides nothing here."""


class FileMode(NamedTuple):
    """A file's owner, group and permission bits (st_mode), as a stat of it gave them."""

    uid: int
    gid: int
    mode: int


@dataclass(frozen=True)
class Process:
    """One process as the host snapshot saw it."""

    pid: int
    start_ticks: int
    state: str
    threads: int
    uid: int
    user: str
    cmdline: tuple[str, ...]
    name: str
    unit: str | None
    user_unit: bool
    pid_namespace: int | None
    started_at: datetime
    container: Container | None = None
    kernel_thread: bool = False
    """A kernel thread (PF_KTHREAD in its stat flags): it never takes a lock a record names."""
    group: int = 0
    """Its process group and session (0: not read). Only a process's descendants (and, for a
    group, the other commands of its shell job) carry its PID as theirs, and they keep it when
    it exits: while one lives, that PID is not handed to another process."""
    session: int = 0
    below: tuple[Descendant, ...] = ()
    """What runs below it (its children, theirs, ...; at most 64, live ones), read only for a
    process that may be named a holder: the work a tool runs in a child, which a holder
    stopped alone leaves running."""
    more_below: bool = False
    """More runs below it than `below` lists."""
    ignored: int = 0
    """The signals it ignores, 1..31 as bits 0..30 (stat's sigignore): SIGTERM ignored, only
    SIGKILL ends it."""
    credentials: Credentials | None = None
    """What its opens of a file are checked against; None when its status could not be read."""

    @property
    def alive(self) -> bool:
        """A zombie only has let go once no other thread of it runs."""
        return not (self.state in ("Z", "X") and self.threads <= 1)


class KernelLock(NamedTuple):
    """One line of /proc/locks."""

    number: int
    kind: str
    mode: str
    pid: int
    key: InodeKey
    start: int
    end: int | None
    waiting: bool

    @property
    def exclusive(self) -> bool:
        return self.mode == "WRITE"


@dataclass(frozen=True)
class Party:
    """A process in a lock's story, whatever its part: one that holds the lock (or, among a
    finding's `openers`, has it open), one blocked in /proc/locks behind it (a waiter), or one
    a record names. The same facts for each, so each is named the same way."""

    pid: int | None
    alive: bool | None = True
    role: str | None = None
    host: str | None = None
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    name: str | None = None
    started_at: datetime | None = None
    start_ticks: int | None = None
    unit: str | None = None
    user_unit: bool = False
    lock_kind: str | None = None
    """How it holds or awaits the lock: `FLOCK WRITE`, `POSIX READ`, `OFDLCK WRITE` (a kernel
    lock), `open descriptor`, `working directory`, or None when a record names it."""
    lock_start: int | None = None
    lock_end: int | None = None
    """The byte range of its kernel lock (end None: to the end of the file)."""
    lock_name: str | None = None
    """What the lock's program calls the kernel locks it holds or awaits (Claim.lock_names:
    SQLite's `SHARED`, `RESERVED`, `PENDING`, `EXCLUSIVE`), when the format names them."""
    container: Container | None = None
    leads_group: bool = False
    """It leads its process group (a service, `setsid`, a shell job): what it started is in
    the group too, and stopping the group stops the work with it."""
    below: tuple[Descendant, ...] = ()
    """What runs below it (Process.below): stopped with it, or the work goes on."""
    more_below: bool = False
    ignored: int = 0
    """The signals it ignores (Process.ignored)."""

    def describe(self) -> str:
        """`PID 64969 (maintenance-job, wa-resync.service)`; in a container, `PID 13678 (flock,
        podman container wa-sync)`. One no process names is its role (a database session whose
        client is not on this host: `postgresql backend 4242`; a prepared transaction)."""
        where = self.container.describe() if self.container is not None else None
        if self.pid is None and self.role:
            details = [part for part in (self.unit, where) if part]
            return self.role + (f" ({', '.join(details)})" if details else "")
        details = [part for part in (self.role or self.name, self.unit, where) if part]
        suffix = f" ({', '.join(details)})" if details else ""
        return f"PID {self.pid}{suffix}" if self.pid is not None else f"an unnamed process{suffix}"


Holder = Party
"""A Party that holds the lock (the name says its part where a signature takes one)."""
Waiter = Party
"""A Party blocked waiting for the lock."""


class Bound(enum.StrEnum):
    """What a held duration is: the whole truth, a floor, a ceiling, or nothing known.

    Only an exact or an at-least duration may make a lock `held_too_long` (a page): a ceiling
    (the holder's running time, when it took the lock itself) says nothing about how long the
    lock has really been held."""

    EXACT = "exact"
    """From a recorded acquisition (the lock's own record or file describes this holder)."""
    AT_LEAST = "at_least"
    """Seen held by the same holder by every run since an earlier one, or inherited by a
    holder younger than the process that took it."""
    AT_MOST = "at_most"
    """The holder's running time: it took the lock itself, some time since it started."""
    UNKNOWN = "unknown"

    @property
    def words(self) -> str:
        """How a report states a duration with this bound: `at least 5m`, `up to 9s`."""
        return _BOUND_WORDS[self]


_BOUND_WORDS = {
    Bound.EXACT: "",
    Bound.AT_LEAST: "at least ",
    Bound.AT_MOST: "up to ",
    Bound.UNKNOWN: "",
}


@dataclass(frozen=True)
class Held:
    """How long a lock has been held (or its writers blocked), what kind of figure that is, and
    when the hold began: one value for every kind of lock, file, kernel or database.

    `since` is `now - seconds` for the `now` it was judged at, with the same bound, and None
    exactly when `seconds` is: build it with `Held.of` or `Held.began`, the one place the three
    are put together."""

    seconds: float | None = None
    bound: Bound = Bound.UNKNOWN
    since: datetime | None = None

    def __post_init__(self) -> None:
        if (self.seconds is None) != (self.since is None):
            raise ValueError("a hold's start is known exactly when its duration is: Held.of")

    @classmethod
    def of(cls, seconds: float | None, bound: Bound, now: datetime) -> Held:
        """Held for `seconds` as of `now` (None: for an unknown time, whatever the bound)."""
        if seconds is None:
            return NOT_HELD
        return cls(seconds, bound, now - timedelta(seconds=seconds))

    @classmethod
    def began(cls, moment: datetime, bound: Bound, now: datetime) -> Held:
        """Held since a recorded moment; one after `now` (the recorder's clock runs ahead of
        ours) is a hold just taken."""
        return cls.of(max((now - moment).total_seconds(), 0.0), bound, now)


NOT_HELD = Held()
"""Nothing known of how long: free, unknown, or held for a time nothing tells."""


class UnknownCause(enum.StrEnum):
    """Why a lock's state cannot be told, for a machine to route on (the reason says it in
    words, naming the path, host or right involved)."""

    OTHER_HOST = "other_host"
    """The record was written on another host (or on one of this name with another machine id)."""
    OTHER_PID_NAMESPACE = "other_pid_namespace"
    """The recorded PID is, or may be, of another PID namespace (lockwarden in a container)."""
    PID_REUSE_SUSPECTED = "pid_reuse_suspected"
    """The recorded PID runs, but by wall-clock times it may be another process."""
    AMBIGUOUS = "ambiguous"
    """More than one running process could be the holder."""
    UNREADABLE_RECORD = "unreadable_record"
    """The lock's record could not be read or parsed, or no format knows the layout."""
    UNTRUSTED_RECORD = "untrusted_record"
    """Someone other than the lock's writer could have written its record."""
    MISSING_RIGHT = "missing_right"
    """lockwarden may not read the lock, or its holders' descriptors or working directories."""
    NO_ANSWER = "no_answer"
    """The lock's file system did not answer in time (a hung mount)."""
    MISSING_DIRECTORY = "missing_directory"
    """The lock's directory does not exist (a wrong path, or a volume not mounted)."""
    UNPROVEN = "unproven"
    """No live holder is named, and nothing proves the lock left behind either."""
    DATABASE = "database"
    """The database server could not be asked (unreachable, login refused, timed out, ...)."""
    INTERNAL_ERROR = "internal_error"
    """lockwarden failed while inspecting it (a bug: run with -v for details)."""


@dataclass(frozen=True)
class Unattributed:
    """Kernel-lock holders or waiters no process could be named for, and why (only the causes
    that are so: unreadable descriptor tables, another PID namespace, a descriptor that no
    process table or mapping holds, i.e. in flight in a unix socket)."""

    holders: int
    waiters: int
    why: str
    outside: bool = False
    """A holder lives outside lockwarden's PID namespace: the kernel reported its POSIX lock
    (F_OFD_GETLK) with no PID here, and /proc/locks left it out."""


class RemovalStep(enum.StrEnum):
    """Where guarded removal (`remove_stale = true`) of one stale lock stands this run."""

    SEEN_ONCE = "seen_once"
    """First seen stale (this sighting is recorded): removed after stale_confirm if still so."""
    CONFIRMING = "confirming"
    """Seen stale before, by the same proof; stale_confirm has not passed yet."""
    WOULD_REMOVE = "would_remove"
    """Confirmed; a dry run, so left in place."""
    REMOVED = "removed"
    """Moved aside (and deleted, unless the text says it could not be) by this run."""
    NOT_REMOVED = "not_removed"
    """Refused this run; the text says why (the state journal, an opener, a change)."""


@dataclass(frozen=True)
class Removal:
    """What guarded removal did or will do about one stale lock: the step for a machine, the
    sentence for a person, and the moments the sentence names."""

    step: RemovalStep
    text: str
    stale_since: datetime | None = None
    """The first sighting this removal counts from (None before one is recorded)."""
    remove_at: datetime | None = None
    """When a run may remove it, if still stale (SEEN_ONCE, CONFIRMING)."""
    moved_aside_as: str | None = None
    """REMOVED: the name it was moved aside to before being deleted."""


@dataclass(frozen=True)
class Finding:
    """The verdict on one configured lock: state, severity, reason, holder and action."""

    name: str
    path: str
    format: str
    state: State
    severity: Severity
    reason: str
    held: Held = NOT_HELD
    """How long it has been held, what that figure is (see Bound), and since when."""
    proof: str | None = None
    holder: Holder | None = None
    waiters: tuple[Waiter, ...] = ()
    sharers: tuple[Holder, ...] = ()
    action: str | None = None
    identity: str | None = None
    note: str | None = None
    readers: tuple[Holder, ...] = ()
    never_remove: str | None = None
    removal: Removal | None = None
    """With `remove_stale`, for a stale lock: what removal did or will do."""
    key: InodeKey | None = None
    """(st_dev, st_ino) of the lock file, when it exists."""
    unattributed: Unattributed | None = None
    store: str | None = None
    """What the store is, from the lock's config (`role = "WhatsApp session store"`)."""
    unknown_cause: UnknownCause | None = None
    """Why the state is unknown; None for every other state (and for lockwarden's own
    `lockwarden:state`, `lockwarden:notify` and `lockwarden:prometheus` findings, whose names
    say it)."""
    gone_pids: tuple[int, ...] = ()
    """For a stale lock: the PIDs its record names as holders, each proven gone (dead, or now
    another process: never a PID to kill), as the proof says."""
    work_seen: tuple[Holder, ...] = ()
    """For a lock its record-named holder holds: what an earlier run saw below it that still
    runs, below it now or not (a worker whose parent ended): the sighting memory keeps it."""

    @property
    def held_for_s(self) -> float | None:
        """How long it has been held, as far as `held_bound` says."""
        return self.held.seconds

    @property
    def held_bound(self) -> Bound:
        return self.held.bound

    @property
    def held_since(self) -> datetime | None:
        """When the hold began, with the same bound as held_for_s."""
        return self.held.since

    @property
    def holders(self) -> tuple[Holder, ...]:
        """Every process that holds it, the primary first."""
        return (self.holder, *self.sharers) if self.holder is not None else self.sharers

    @property
    def unseen(self) -> bool:
        """Unknown and naming no holder: this run could not see who holds it (its database
        server did not answer, its mount hung, a right was missing), which says nothing of
        whether an earlier holder still does. What was known of it is carried, not ended."""
        return self.state is State.UNKNOWN and self.identity is None


def own_finding(name: str, path: str, format: str, reason: str) -> Finding:
    """One of lockwarden's own findings (`lockwarden:state`, `lockwarden:notify`,
    `lockwarden:prometheus`): its own job failed. Unknown, so the exit code and the unit's
    result show it (a critical lock still outranks it); no unknown_cause, its name says it."""
    return Finding(
        name=name,
        path=path,
        format=format,
        state=State.UNKNOWN,
        severity=Severity.UNKNOWN,
        reason=reason,
    )


def command_text(cmdline: Iterable[str], limit: int = 300) -> str:
    """A command line for one line of a report or an alert: its secrets hidden (support/
    redact.py: every output that shows a command line shows this text), control characters
    escaped, so a holder's argv cannot add or forge lines, and long ones cut."""
    # Only the first limit + 1 characters can show (escaping never shortens one), and a report
    # of 1,000 held locks must not escape 1,000 whole scripts character by character. Redacted
    # before the cut, with room past it, so a secret the cut splits is still recognized whole.
    shown = redact_argv(_leading(cmdline, limit + REDACT_MARGIN))
    text = visible(" ".join(shown)[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


REDACT_MARGIN = 4096  # characters read past what shows: a secret longer than this is cut


def _leading(cmdline: Iterable[str], budget: int) -> tuple[str, ...]:
    """The words of the first `budget` characters of a command line."""
    words: list[str] = []
    for word in cmdline:
        words.append(word[:budget])
        budget -= len(word) + 1
        if budget <= 0:
            break
    return tuple(words)
