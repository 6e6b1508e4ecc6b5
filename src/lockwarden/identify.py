"""Gather, from the host snapshot, the facts needed to judge a claim: who really holds it.

This is the identity check of the pipeline: kernel holders from fdinfo (never the PID printed
in /proc/locks alone), waiters, processes that merely have the lock open, and the process that
now owns the PID the record names. No judgement happens here; classify.py does that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from lockwarden.host import Descriptor, Snapshot
from lockwarden.model import Claim, Holder, InodeKey, KernelLock, Process, Waiter


@dataclass(frozen=True)
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

    @property
    def kernel_locked(self) -> bool:
        return bool(self.granted)


def holder_from_process(process: Process, lock_kind: str | None = None) -> Holder:
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
        lock_kind=lock_kind,
    )


def keys_to_scan(claims: Iterable[Claim], snapshot: Snapshot) -> set[InodeKey]:
    """Inodes whose descriptors the run must find: kernel-locked ones, and existence locks
    that name no PID (judged by who has them open)."""
    wanted: set[InodeKey] = set()
    for claim in claims:
        for key in claim.keys:
            if snapshot.kernel_locks(key) or (claim.existence_is_lock and claim.pid is None):
                wanted.add(key)
    return wanted


def gather(claim: Claim, snapshot: Snapshot) -> Evidence:
    kernel = [lock for key in claim.keys for lock in snapshot.kernel_locks(key)]
    granted = tuple(lock for lock in kernel if not lock.waiting)
    waiting = [lock for lock in kernel if lock.waiting]
    needs_openers = claim.present and claim.existence_is_lock and claim.pid is None
    descriptors = (
        [found for key in claim.keys for found in snapshot.descriptors(key)]
        if granted or needs_openers
        else []
    )
    return Evidence(
        boot_id=snapshot.boot_id,
        hostname=snapshot.hostname,
        booted_at=snapshot.booted_at,
        captured_at=snapshot.captured_at,
        pid_namespace=snapshot.pid_namespace,
        nested_pid_namespace=snapshot.nested_pid_namespace,
        granted=granted,
        kernel_holders=_kernel_holders(granted, descriptors, snapshot),
        waiters=_waiters(waiting, snapshot),
        openers=_openers(descriptors, snapshot) if needs_openers and not granted else (),
        record_process=snapshot.process(claim.pid) if claim.pid is not None else None,
        unreadable_pids=snapshot.unreadable_pids if (granted or needs_openers) else 0,
    )


def _kernel_holders(
    granted: tuple[KernelLock, ...], descriptors: list[Descriptor], snapshot: Snapshot
) -> tuple[Holder, ...]:
    """Processes whose descriptors carry the granted locks; the /proc/locks PID only as a
    fallback for POSIX locks (owned by the process itself) when fdinfo cannot be read."""
    if not granted:
        return ()
    holders: dict[int, Holder] = {}
    for descriptor in descriptors:
        held = [lock for lock in descriptor.locks if not lock.waiting]
        process = snapshot.process(descriptor.pid) if held else None
        if process is not None and descriptor.pid not in holders:
            holders[descriptor.pid] = holder_from_process(process, _kind(held[0]))
    if not holders:
        for lock in granted:
            process = snapshot.process(lock.pid) if lock.kind == "POSIX" else None
            if process is not None and process.pid not in holders:
                holders[process.pid] = holder_from_process(process, _kind(lock))
    return tuple(holders.values())


def _kind(lock: KernelLock) -> str:
    return f"{lock.kind} {lock.mode}"


def _waiters(waiting: list[KernelLock], snapshot: Snapshot) -> tuple[Waiter, ...]:
    waiters: dict[int, Waiter] = {}
    for lock in waiting:
        process = snapshot.process(lock.pid)
        if process is not None and lock.pid not in waiters:
            waiters[lock.pid] = Waiter(lock.pid, process.cmdline or (process.name,))
    return tuple(waiters.values())


def _openers(descriptors: list[Descriptor], snapshot: Snapshot) -> tuple[Holder, ...]:
    openers: dict[int, Holder] = {}
    for descriptor in descriptors:
        process = snapshot.process(descriptor.pid)
        if process is not None and descriptor.pid not in openers:
            openers[descriptor.pid] = holder_from_process(process, "open descriptor")
    return tuple(openers.values())
