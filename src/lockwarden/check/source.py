"""One interface for every lock source: what the claims phase found of a lock, what it asks of
the run's one capture, and its judging from the frozen snapshot.

A file lock's claim comes from its files (formats/, read in the run's bounded child), a
database lock's from its server (databases/check.py, asked meanwhile, under its deadline); a
lock whose claim could not be read is judged already. The pipeline captures the host once
for all their questions, then judges each the same way, whatever it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import gather, question_for
from lockwarden.model import Claim, Finding, InodeKey, LeftWork
from lockwarden.procfs.reader import LockQuestion, Request
from lockwarden.procfs.snapshot import Snapshot


class Claimed(Protocol):
    """One lock as the claims phase found it."""

    @property
    def question(self) -> Request:
        """What the capture must read for it to be judged."""
        ...

    @property
    def keys(self) -> tuple[InodeKey, ...]:
        """Its files (a lock directory's record too, SQLite's -shm...)."""
        ...

    def judge(
        self,
        snapshot: Snapshot,
        policy: Policy,
        now: datetime,
        seen_since: Mapping[str, datetime] | None,
        what_if: bool,
    ) -> Finding:
        """Its finding. `seen_since`: the sighting memory of this lock (holder identity -> the
        first run of an unbroken series that saw it held). `what_if`: a run that journals
        nothing, whose `now` may ask about a later time (classify.projected)."""
        ...

    def unchanged(self, fresh: Claimed) -> bool:
        """Whether `fresh`, this lock's claim read again, shows the lock as this one did: the
        same record of the same holder (pipeline.inspect's proof that a lock outlived it)."""
        ...

    def in_place(self, snapshot: Snapshot) -> bool:
        """Whether the capture itself shows that what it found on this lock's inodes (kernel
        locks, open descriptors) is on this lock's files: every descriptor on them links to one
        of the lock's own paths. False when it cannot tell (a holder that reached the file by
        another name, a lock no descriptor here carries): the claim is then read again, and a
        lock whose inodes changed is looked at again (pipeline.inspect)."""
        ...


@dataclass(frozen=True, eq=False)
class FileClaim:
    """A lock on files, as its format read them."""

    name: str
    claim: Claim

    @property
    def question(self) -> Request:
        return Request(locks=(question_for(self.claim),))

    @property
    def keys(self) -> tuple[InodeKey, ...]:
        return self.claim.keys

    def judge(
        self,
        snapshot: Snapshot,
        policy: Policy,
        now: datetime,
        seen_since: Mapping[str, datetime] | None,
        what_if: bool,
    ) -> Finding:
        evidence = gather(self.claim, snapshot)
        return classify(self.name, self.claim, evidence, policy, now, seen_since, what_if)

    def unchanged(self, fresh: Claimed) -> bool:
        return isinstance(fresh, FileClaim) and fresh.claim == self.claim

    def in_place(self, snapshot: Snapshot) -> bool:
        """A file let go between the claim and the capture frees its inode, and the file system
        may give that inode to another file at once, which another process may lock: the
        capture then meets that process on this lock's inode. A descriptor's link shows the
        name its file has now (" (deleted)" once unlinked), so a link to one of the lock's
        own paths proves the inode is still the lock's."""
        paths = own_paths(self.claim)
        for key in self.claim.keys:
            locked = bool(snapshot.kernel_locks(key))
            if key not in snapshot.scanned_keys:
                if locked:
                    return False
                continue
            descriptors = snapshot.descriptors(key)
            if locked and not descriptors:
                return False
            for descriptor in descriptors:
                if descriptor.pid in snapshot.other_mounts:
                    return False  # its link names a path of its own mount namespace
                if snapshot.fd_target(descriptor.pid, descriptor.fd) not in paths:
                    return False
        return True


@dataclass(frozen=True, eq=False)
class Judged:
    """A lock judged in the claims phase already: its record could not be read, its mount did
    not answer. It asks nothing of the host."""

    finding: Finding

    @property
    def question(self) -> Request:
        return Request()

    @property
    def keys(self) -> tuple[InodeKey, ...]:
        return ()

    def judge(
        self,
        snapshot: Snapshot,
        policy: Policy,
        now: datetime,
        seen_since: Mapping[str, datetime] | None,
        what_if: bool,
    ) -> Finding:
        return self.finding

    def unchanged(self, fresh: Claimed) -> bool:
        return False  # judged without a claim: nothing to compare

    def in_place(self, snapshot: Snapshot) -> bool:
        return True  # judged without the capture


def own_paths(claim: Claim) -> frozenset[str]:
    """The paths of a lock's own files, as a descriptor's link shows them: its path, its
    record's, the one removal deletes, and the files its format named beside it (SQLite's
    -shm)."""
    paths = {claim.path, claim.record_path, claim.remove_path}
    directory = os.path.dirname(claim.path.rstrip("/"))
    paths.update(os.path.join(directory, name) for _key, name in claim.key_names)
    return frozenset(os.path.normpath(path) for path in paths if path)


def asking_after(question: Request, left: LeftWork | None) -> Request:
    """A lock's question, also asking after what ran below its record's holder when a run last
    saw it hold the lock (the sighting memory), should that holder be gone now."""
    if left is None:
        return question
    locks = tuple(
        lock._replace(left_work=left) if lock.twin_pid == left.holder else lock
        for lock in question.locks
    )
    return replace(question, locks=locks)


def combined(questions: Iterable[Request]) -> Request:
    """The one capture's request: every lock's question together."""
    locks: list[LockQuestion] = []
    pids: list[int] = []
    clients = Request().clients
    scan_keys: set[InodeKey] = set()
    for question in questions:
        locks.extend(question.locks)
        pids.extend(question.pids)
        scan_keys.update(question.scan_keys)
        clients = clients | question.clients
    return Request(
        locks=tuple(locks), scan_keys=frozenset(scan_keys), pids=tuple(pids), clients=clients
    )
