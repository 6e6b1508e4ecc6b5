"""The shared vocabulary of every stage: states, severities, claims, holders, findings."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class State(enum.StrEnum):
    FREE = "free"
    HELD = "held"
    HELD_TOO_LONG = "held_too_long"
    STALE = "stale"
    UNKNOWN = "unknown"


class Severity(enum.IntEnum):
    """Nagios plugin codes; the run's exit code is the worst (highest) of them."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


InodeKey = tuple[int, int]
"""(major:minor device number as st_dev, inode) — how /proc/locks and stat() name a file."""


@dataclass(frozen=True)
class Claim:
    """What a lock's files say, read by a format; no judgement, no policy.

    ``present`` means the lock's own artefact exists (the file, the directory, the symlink).
    ``existence_is_lock`` is true for layouts where the artefact alone blocks writers (mkdir
    locks, O_EXCL files, symlink locks, pidfiles); false where only a kernel lock counts.
    ``problem`` is set when the record exists but cannot be trusted; the claim's pid is then None.
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
    stale_hint: str | None = None
    executable_hint: tuple[str, ...] = ()


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

    @property
    def alive(self) -> bool:
        """A zombie only has let go once no other thread of it runs."""
        return not (self.state in ("Z", "X") and self.threads <= 1)


@dataclass(frozen=True)
class KernelLock:
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
class Holder:
    """A process that holds (or, for `openers`, has open) a lock, as shown in a finding."""

    pid: int | None
    alive: bool | None
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

    def describe(self) -> str:
        """`PID 64969 (maintenance-job, wa-resync.service)`."""
        details = [part for part in (self.role or self.name, self.unit) if part]
        suffix = f" ({', '.join(details)})" if details else ""
        return f"PID {self.pid}{suffix}" if self.pid is not None else f"an unnamed process{suffix}"


@dataclass(frozen=True)
class Waiter:
    """A process blocked in /proc/locks behind a held lock."""

    pid: int
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    """The verdict on one configured lock: state, severity, reason, holder and action."""

    name: str
    path: str
    format: str
    state: State
    severity: Severity
    reason: str
    held_for_s: float | None = None
    proof: str | None = None
    holder: Holder | None = None
    waiters: tuple[Waiter, ...] = ()
    sharers: tuple[Holder, ...] = ()
    action: str | None = None
    identity: str | None = None
    note: str | None = None
