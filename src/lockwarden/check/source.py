"""One interface for every lock source: what the claims phase found of a lock, what it asks of
the run's one capture, and its judging from the frozen snapshot.

A file lock's claim comes from its files (formats/, read in the run's bounded child), a
database lock's from its server (databases/check.py, asked meanwhile, under its deadline); a
lock whose claim could not be read is judged already. The pipeline captures the host once
for all their questions, then judges each the same way, whatever it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import gather, question_for
from lockwarden.model import Claim, Finding, InodeKey
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
