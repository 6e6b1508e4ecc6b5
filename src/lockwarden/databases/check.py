"""One database lock, checked: ask the server, say what the host must show, judge.

A server is asked in the run's claims phase (pipeline.py), while the file locks' claims are
read, under its deadline. Which processes are worth reading here (a session's client socket,
the Liquibase processes) is known only from its answer, so the answer says what the run's one
capture must read as well (`host_question`: procfs/sockets.py reads the sockets, their owners
and what runs below them, and command lines under the capture's deadline). Judging
(check/database.py) then looks them up in the frozen snapshot: nothing here reads the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from lockwarden.check.classify import Policy
from lockwarden.check.database import (
    LiquibaseHost,
    judge_holds,
    judge_liquibase,
    names_this_host,
)
from lockwarden.check.identify import holder_from_process
from lockwarden.check.observation import WAITS, Backend, Client, Observation, Prepared, Tree
from lockwarden.check.source import Claimed
from lockwarden.config import DatabaseWatch, LockConfig
from lockwarden.databases.peers import client_question, find_clients
from lockwarden.databases.session import answer_deadline_s, unanswered
from lockwarden.model import Descendant, Finding, Holder, InodeKey
from lockwarden.procfs.reader import HostReader, Request
from lockwarden.procfs.snapshot import Snapshot
from lockwarden.procfs.sockets import ClientQuestion
from lockwarden.support import abandon

# What a running Liquibase looks like: its launcher script, its jar, or its Java main class
# (a path that merely contains the word, such as a config file's, is not Liquibase).
LIQUIBASE_COMMAND = re.compile(
    r"(?:^|\0)(?:[^\0]*/)?liquibase(?:\.sh|\.bat)?(?:\0|$)"
    r"|liquibase[^\0/]*\.jar(?:\0|$)|(?:^|\0)liquibase\.integration\."
)


def format_name(watch: DatabaseWatch) -> str:
    """How reports name what a database lock is: `postgresql-advisory`, `liquibase`, ..."""
    if watch.watch == "liquibase_table":
        return "liquibase"
    if watch.engine == "mysql":
        return "mysql-user-lock"
    if watch.watch == WAITS:
        return "postgresql-waits"
    return "postgresql-advisory" if watch.watch == "advisory_key" else "postgresql-table"


# The most round trips one check makes after the login (the server's version, the watched
# key or table, the sessions; MySQL's init command, instrument check, metadata locks, lock
# registry, a holder only the registry named, the sessions): each is bounded by
# statement_timeout (PostgreSQL's, on the server) or read_timeout (MySQL's, its ceiling).
QUERIES_PER_CHECK = 6

Unanswered = dict[tuple[str, str], str]
"""Servers (engine, connection) that did not answer this run, and what was said of them."""


def observe(
    watch: DatabaseWatch, environ: Mapping[str, str], silent: Unanswered | None = None
) -> Observation:
    """What the server says, within answer_deadline_s: a server that stops answering costs
    this lock (unknown), never the run; the check is left to end in its thread. `silent`: the
    servers that did not answer earlier in this run, not asked again (as a hung mount is not
    touched again), so N locks on one dead server cost one deadline, not N."""
    server = watch.server
    if silent is not None and server in silent:
        return Observation(watch.describe(), problem=f"not asked again: {silent[server]}")
    deadline = answer_deadline_s(watch, QUERIES_PER_CHECK)
    answered, observation = abandon.within(lambda: _ask(watch, environ), "database", deadline)
    if answered and observation is not None:
        return observation
    problem = unanswered(deadline, QUERIES_PER_CHECK)
    if silent is not None:
        silent[server] = problem
    return Observation(watch.describe(), problem=problem)


def _ask(watch: DatabaseWatch, environ: Mapping[str, str]) -> Observation:
    if watch.engine == "mysql":
        from lockwarden.databases import mysql

        return mysql.observe(watch, environ)
    from lockwarden.databases import postgres

    return postgres.observe(watch, environ)


@dataclass(frozen=True, eq=False)
class ServerClaim:
    """A lock inside a database server, as its server answered in the claims phase: what the
    answer asks of the capture, and its judging (check/source.py's Claimed)."""

    lock: LockConfig
    observation: Observation
    clients: ClientQuestion

    @property
    def question(self) -> Request:
        return Request(clients=self.clients)

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
        return judge_database(
            self.lock, self.observation, snapshot, policy, now, seen_since, what_if
        )

    def unchanged(self, fresh: Claimed) -> bool:
        """The same Liquibase row (locked, granted, by), or the same holding sessions."""
        if not isinstance(fresh, ServerClaim) or fresh.observation.problem is not None:
            return False
        before, after = self.observation, fresh.observation
        return before.liquibase == after.liquibase and _holders(before) == _holders(after)

    def in_place(self, snapshot: Snapshot) -> bool:
        return True  # no inode: the server named its sessions itself


def _holders(observation: Observation) -> list[tuple[str, int, datetime | None, Prepared | None]]:
    return [
        (hold.what, hold.holder.pid, hold.holder.backend_start, hold.holder.prepared)
        for hold in observation.holds
    ]


def ask_server(lock: LockConfig, hostname: str, silent: Unanswered | None = None) -> ServerClaim:
    """The claims phase of a database lock: its server asked within its deadline (`silent`:
    the run's servers that did not answer, not asked again), and what the answer names."""
    watch = lock.database
    assert watch is not None, "ask_server is for database locks"
    observation = observe(watch, os.environ, silent)
    return ServerClaim(lock, observation, host_question(lock, observation, hostname))


def host_question(lock: LockConfig, observation: Observation, hostname: str) -> ClientQuestion:
    """What the run's capture must read for this lock, given its server's answer: the clients
    of the sessions that hold or wait (and of the database's other sessions, which may work
    under a hold), or the Liquibase processes when a locked row names this host and no open
    transaction holds it (whose session is then the holder, as any session's)."""
    watch = lock.database
    assert watch is not None, "host_question is for database locks"
    if watch.watch == "liquibase_table" and not observation.holds:
        row = observation.liquibase
        names = (hostname, *lock.host_aliases)
        if row is None or not row.locked or not names_this_host(row.locked_by, names):
            return ClientQuestion()
        return ClientQuestion(commands=frozenset({LIQUIBASE_COMMAND.pattern}))
    return _sessions_question(observation)


def _sessions_question(observation: Observation) -> ClientQuestion:
    sessions = [backend for hold in observation.holds for backend in (hold.holder, *hold.waiters)]
    if not sessions:
        return ClientQuestion()
    return ClientQuestion(client_question(sessions), client_question(observation.sessions))


def judge_database(
    lock: LockConfig,
    observation: Observation,
    snapshot: Snapshot,
    policy: Policy,
    now: datetime,
    first_seen: Mapping[str, datetime] | None = None,
    what_if: bool = False,
) -> Finding:
    """The server's answer and the host as the capture saw it (asked `host_question`) into
    a finding. `first_seen`: the sighting memory of this lock (session identity -> first
    sighting). `what_if`: a run that journals nothing, whose `now` may ask about a later time
    (classify.projected, from when the host was seen)."""
    watch = lock.database
    assert watch is not None, "judge_database is for database locks"
    if watch.watch == "liquibase_table" and not observation.holds:
        here = liquibase_host(snapshot, lock.host_aliases, observation)
        return judge_liquibase(lock.name, lock.path, observation, here, policy, now)
    seen_at = snapshot.captured_at if what_if else None
    sessions = [backend for hold in observation.holds for backend in (hold.holder, *hold.waiters)]
    clients = find_clients(sessions, snapshot, "client") if sessions else {}
    trees = {
        hold.holder.pid: work_under(hold.holder, clients, observation.sessions, snapshot)
        for hold in observation.holds
    }
    return judge_holds(
        lock.name,
        lock.path,
        format_name(watch),
        observation,
        clients,
        policy,
        now,
        first_seen,
        seen_at,
        trees,
    )


def inspect_waits(
    lock: LockConfig,
    policy: Policy,
    host: HostReader,
    now: datetime,
    environ: Mapping[str, str] | None = None,
) -> list[Finding]:
    """A WAITS watch (`why --database`): one finding per session at the root of a wait chain,
    each with the sessions queued behind it (a lock's finding judges one hold: its longest
    queue). A server that cannot tell, or nothing waiting, is the one finding that says so.
    The host is captured once, for what the server's answer names."""
    watch = lock.database
    assert watch is not None and watch.watch == WAITS, "inspect_waits is for --database"
    observation = observe(watch, os.environ if environ is None else environ)
    question = _sessions_question(observation)
    snapshot = host.capture(Request(read_locks=False, clients=question))
    sessions = [backend for hold in observation.holds for backend in (hold.holder, *hold.waiters)]
    clients = find_clients(sessions, snapshot, "client") if sessions else {}
    separate = [replace(observation, holds=(hold,)) for hold in observation.holds]
    return [
        judge_holds(
            lock.name,
            lock.path,
            format_name(watch),
            one,
            clients,
            policy,
            now,
            trees={
                hold.holder.pid: work_under(hold.holder, clients, observation.sessions, snapshot)
                for hold in one.holds
            },
        )
        for one in separate or [observation]
    ]


def work_under(
    holder: Backend, clients: Mapping[int, Client], others: Sequence[Backend], snapshot: Snapshot
) -> Tree:
    """What works under a hold besides its session: the holder's client's descendants (a
    migration tool runs each change in a child, a psql of its own), and the sessions they
    have on the server. Stopping the client alone
    leaves those running the change: the next migrator would start it again beside them."""
    client = clients.get(holder.pid, Client(None)).holder
    if client is None or client.pid is None:
        return Tree()
    below = snapshot.descendants(client.pid)
    alive = [found for found in map(snapshot.process, below) if found is not None and found.alive]
    processes = tuple(holder_from_process(found, "works under the lock") for found in alive)
    descendants = tuple(
        Descendant(found.pid, found.group, found.name, found.ignored, found.start_ticks)
        for found in alive
    )
    # The descendants' sessions only: the client's own other connections may be a pool's
    # (pgbouncer, an application server), unrelated to the lock.
    family = set(below)
    theirs = find_clients(others, snapshot, "works under the lock") if others and family else {}
    sessions = tuple(
        backend
        for backend in others
        if (found := theirs.get(backend.pid)) is not None
        and found.holder is not None
        and found.holder.pid in family
    )
    return Tree(processes, sessions, descendants)


def liquibase_host(
    snapshot: Snapshot, aliases: tuple[str, ...], observation: Observation
) -> LiquibaseHost:
    """This host's names, and the Liquibase processes running here when a locked row names
    it (None when a process's command line could not be read, or the host's processes are
    not all visible)."""
    names = (snapshot.hostname, *aliases)
    row = observation.liquibase
    if row is None or not row.locked or not names_this_host(row.locked_by, names):
        return LiquibaseHost(names, ())
    running = snapshot.running(LIQUIBASE_COMMAND.pattern)
    if running is None:
        return LiquibaseHost(names, None)
    found: list[Holder] = []
    for pid in running:
        process = snapshot.process(pid)
        if process is not None and process.alive:
            found.append(holder_from_process(process))
    return LiquibaseHost(names, tuple(found))
