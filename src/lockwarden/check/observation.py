"""The typed facts one database check saw: sessions (backends), who holds, who waits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwarden.model import Descendant, Holder

QUERY_LIMIT = 200
IDLE_IN_TRANSACTION = "idle in transaction"


WAITS = "waits"
"""A watch of every lock wait in one PostgreSQL database (`why --database`), grouped by the
session at the root of each chain: not a config key."""


@dataclass(frozen=True)
class Prepared:
    """A prepared transaction (PREPARE TRANSACTION): it keeps its locks with no session, through
    every session's end and a server restart, until COMMIT PREPARED or ROLLBACK PREPARED."""

    gid: str | None  # None: a blocker pg_blocking_pids counts (as 0) that was not found again
    prepared_at: datetime | None = None  # its locks were all taken before it
    database: str | None = None  # where COMMIT or ROLLBACK PREPARED must run


@dataclass(frozen=True)
class Backend:
    """One server session as pg_stat_activity (or MySQL's processlist) shows it."""

    pid: int
    user: str | None = None
    application_name: str | None = None
    client_addr: str | None = None  # None: a unix socket (or not visible to this role)
    client_port: int | None = None  # -1: a unix socket (PostgreSQL's convention)
    backend_start: datetime | None = None
    xact_start: datetime | None = None
    state: str | None = None
    query: str | None = None
    waiting_since: datetime | None = None
    idle_for_s: float | None = None  # MySQL: idle since its last command (a lower bound)
    server: str = "PostgreSQL"
    kind: str = "backend"  # what the server calls a session: "backend", "connection"
    client_note: str | None = None  # why the client address is not there, when it is not
    server_port: int | None = None  # the TCP port the server listens on (MySQL's @@port)
    server_start: datetime | None = None  # MySQL: its connection ids start again with it
    prepared: Prepared | None = None  # a prepared transaction, which no session holds

    def describe(self) -> str:
        """`backend 9911 (user app, application_name 'prisma', client 127.0.0.1:40112,
        idle in transaction)`."""
        if self.prepared is not None:
            return self.prepared_text()
        facts = [f"user {self.user}" if self.user else ""]
        if self.application_name:
            facts.append(f"application_name {self.application_name!r}")
        facts.append(self.client_text())
        if self.state:
            facts.append(self.state.upper() if self.state == IDLE_IN_TRANSACTION else self.state)
        details = ", ".join(fact for fact in facts if fact)
        return f"{self.kind} {self.pid} ({details})"

    def prepared_text(self) -> str:
        """`prepared transaction 'deploy-42' (owner app, no session)`."""
        gid = self.prepared.gid if self.prepared is not None else None
        name = f"prepared transaction {sql_literal(gid)}" if gid else "a prepared transaction"
        owner = f"owner {self.user}, " if self.user else ""
        return f"{name} ({owner}no session)"

    def client_text(self) -> str:
        if self.client_addr is None:
            return "client on the server's unix socket" if self.unix_socket else ""
        return f"client {self.client_addr}:{self.client_port}"

    @property
    def unix_socket(self) -> bool:
        return self.client_addr is None and self.client_port == -1

    def query_text(self) -> str | None:
        if not self.query:
            return None
        flat = " ".join(self.query.split())
        return flat if len(flat) <= QUERY_LIMIT else flat[: QUERY_LIMIT - 1] + "…"


def sql_literal(text: str) -> str:
    """`text` as an SQL string literal: a gid is any text its transaction manager chose."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Client:
    """A backend's client process, when it runs on this host."""

    holder: Holder | None
    why_not: str | None = None  # why the process could not be named


@dataclass(frozen=True)
class Hold:
    """One lock a watch found held: the holding backend, its waiters, what it is."""

    what: str  # "advisory lock 72707369 (prisma)", "table public.orders"
    holder: Backend
    waiters: tuple[Backend, ...] = ()
    transaction_scoped: bool = False  # a table lock: taken inside the holder's transaction


@dataclass(frozen=True)
class LiquibaseRow:
    """Liquibase's DATABASECHANGELOGLOCK row (ID 1): tied to no session."""

    locked: bool
    granted: datetime | None  # LOCKGRANTED, read in this host's time zone when it names us
    locked_by: str | None
    granted_server_zone: datetime | None = None  # the same, read in the server's time zone
    readings: tuple[datetime, ...] = ()
    """LOCKGRANTED read in each zone its writer (a JVM, whose zone nothing records) may have
    used: this host's, the server's, UTC (a container's); one when they agree."""


@dataclass(frozen=True)
class Observation:
    """What one check of one watch saw; `problem` when it could not look."""

    target: str  # what is watched, for the report ("app-db: advisory lock prisma")
    holds: tuple[Hold, ...] = ()
    liquibase: LiquibaseRow | None = None
    problem: str | None = None
    sessions: tuple[Backend, ...] = ()
    """The database's other sessions, read when something is held: a holder's child processes
    may run the work under the lock through sessions of their own."""


@dataclass(frozen=True)
class Tree:
    """What works under a hold besides its session: the client's descendant processes, and
    the sessions they (or the client itself, on another connection) have on the server."""

    processes: tuple[Holder, ...] = ()
    sessions: tuple[Backend, ...] = ()
    below: tuple[Descendant, ...] = ()
    """The same processes as the client's descendants (their groups, names and ignored
    signals), which its kill (advice.kill) stops with it as any holder's."""
