"""Read MySQL/MariaDB user-level locks (GET_LOCK) through PyMySQL (Debian's python3-pymysql).

performance_schema.metadata_locks lists each user-level lock granted or pending, with the
thread that owns it (MySQL 5.7+, MariaDB 10.5.2+); information_schema.PROCESSLIST gives that
connection's user, `host:port`, command and time. The metadata-lock instrument must be on
(MySQL 8 has it on; MariaDB needs `performance_schema=ON` and
`performance-schema-instrument='wait/lock/metadata/sql/mdl=ON'`): with it off the table is
empty, so the check says `unknown` rather than a false `free`. The table is no proof that a
lock is free: it never lists a lock taken while the `global_instrumentation` consumer was off
or the table was full, and its join to PROCESSLIST drops every session of another user when
the role lacks PROCESS. So each watched name is also asked of the server's own lock registry
(IS_USED_LOCK, which takes nothing): a holder it names that the table did not list is looked
up in PROCESSLIST, and one the role cannot see there makes the lock `unknown`. The session is
read-only (`SET SESSION TRANSACTION READ ONLY`, autocommit), with short connect and read
timeouts; it never calls GET_LOCK, IS_FREE_LOCK's siblings that take locks, or anything that
writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lockwarden.check.observation import Backend, Hold, Observation
from lockwarden.config import DatabaseWatch
from lockwarden.databases.keys import MYSQL_TOOLS, mysql_lock_names
from lockwarden.databases.session import (
    APPLICATION_NAME,
    CheckProblem,
    connect_timeout_s,
    one_line,
    read_password,
)

INSTALL_HINT = (
    "the MySQL driver PyMySQL is not installed: apt install python3-pymysql, "
    "or pip install 'lockwarden[mysql]'"
)
MDL_INSTRUMENT = "wait/lock/metadata/sql/mdl"
# metadata_locks.OBJECT_NAME's width: MariaDB takes longer GET_LOCK names, and lists them cut.
NAME_WIDTH = 64
LOCKS = """SELECT m.OBJECT_NAME, m.LOCK_STATUS, p.ID, p.USER, p.HOST, p.COMMAND, p.TIME,
    LEFT(p.INFO, 400)
FROM performance_schema.metadata_locks m
JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID
JOIN information_schema.PROCESSLIST p ON p.ID = t.PROCESSLIST_ID
WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK' AND p.ID <> CONNECTION_ID()
ORDER BY m.LOCK_STATUS = 'GRANTED' DESC, p.ID"""
# Every other client connection: a holder's child processes may run the work under its lock
# through connections of their own.
SESSIONS = """SELECT p.ID, p.USER, p.HOST, p.COMMAND, p.TIME, LEFT(p.INFO, 400)
FROM information_schema.PROCESSLIST p
WHERE p.ID <> CONNECTION_ID() AND p.COMMAND <> 'Daemon' AND NOT p.ID IN %s"""
# One connection, as the holder the server's lock registry names (IS_USED_LOCK).
SESSION = """SELECT p.ID, p.USER, p.HOST, p.COMMAND, p.TIME, LEFT(p.INFO, 400)
FROM information_schema.PROCESSLIST p WHERE p.ID = %s"""


def connect_arguments(connection: str) -> dict[str, Any]:
    """`mysql://USER@HOST:PORT/DATABASE[?unix_socket=PATH]` as PyMySQL's arguments."""
    parts = urlsplit(connection)
    if parts.scheme != "mysql":
        raise CheckProblem("the connection is not a mysql:// URI")
    arguments: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": parts.port or 3306,
        "user": unquote(parts.username) if parts.username else None,
        "database": parts.path.lstrip("/") or None,
    }
    socket = parse_qs(parts.query).get("unix_socket")
    if socket:
        arguments["unix_socket"] = socket[0]
    return arguments


def observe(watch: DatabaseWatch, environ: Mapping[str, str]) -> Observation:
    target = watch.describe()
    try:
        import pymysql
    except ImportError:
        return Observation(target, problem=INSTALL_HINT)
    try:
        session = connect(watch, environ)
        try:
            database, server = _server_facts(session)
            holds = _holds(session, watch, database, server)
            return Observation(target, holds=holds, sessions=_sessions(session, holds, server))
        finally:
            session.close()
    except CheckProblem as problem:
        return Observation(target, problem=str(problem))
    except pymysql.Error as error:
        return Observation(target, problem=f"MySQL: {one_line(error)}")


def connect(watch: DatabaseWatch, environ: Mapping[str, str]) -> Any:
    import pymysql

    read_timeout = max(1, math.ceil(watch.statement_timeout))
    arguments = connect_arguments(watch.connection)
    password = read_password(watch, environ)
    try:
        return pymysql.connect(
            **arguments,
            password=password or "",
            connect_timeout=connect_timeout_s(watch),
            read_timeout=read_timeout,
            write_timeout=read_timeout,
            autocommit=True,
            program_name=APPLICATION_NAME,
            init_command="SET SESSION TRANSACTION READ ONLY",
        )
    except pymysql.OperationalError as error:
        raise CheckProblem(f"cannot connect to MySQL: {one_line(error)}") from None


def _rows(session: Any, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with session.cursor() as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall())


@dataclass(frozen=True)
class Server:
    """What each of a server's sessions carries of it."""

    port: int | None  # the TCP port it listens on: where a TCP client's connection leads
    started: datetime | None  # when it started: connection ids count from 1 again after it


def _server_facts(session: Any) -> tuple[str | None, Server]:
    """The connection's database and its server, once the server is known to record metadata
    locks: an instrument that is off leaves metadata_locks empty, which must not read as free.
    The start is UNIX_TIMESTAMP() less Uptime, both counted from the statement's start, so it
    is the same second at every look. One round trip."""
    enabled, instrument, database, port, started = _rows(
        session,
        "SELECT @@performance_schema, (SELECT ENABLED FROM performance_schema.setup_instruments"
        " WHERE NAME = %s), DATABASE(), @@port, UNIX_TIMESTAMP() - (SELECT VARIABLE_VALUE"
        " FROM performance_schema.global_status WHERE VARIABLE_NAME = 'Uptime')",
        (MDL_INSTRUMENT,),
    )[0]
    if not enabled or instrument != "YES":
        raise CheckProblem(
            "the server does not record metadata locks: start it with performance_schema=ON "
            f"and performance-schema-instrument='{MDL_INSTRUMENT}=ON' (MariaDB's default is off)"
        )
    server = Server(
        int(port) if port else None,
        None if started is None else datetime.fromtimestamp(int(started), UTC),
    )
    return (str(database) if database is not None else None), server


def _holds(
    session: Any, watch: DatabaseWatch, database: str | None, server: Server
) -> tuple[Hold, ...]:
    tools = mysql_lock_names(database)
    if watch.watch == "advisory_key":
        _check_preset(str(watch.target), database)
    holders, waiters, other_flyway = _listed(session, watch, tools, server)
    _add_unlisted_holders(session, _watched_names(watch, tools), holders, server)
    if watch.watch == "advisory_key" and watch.target == "flyway" and not holders and other_flyway:
        # Another database's migration, or this one's with a renamed history table: no
        # guess either way (free would let a second migration start beside it).
        shown = ", ".join(sorted(other_flyway))
        raise CheckProblem(
            f"a Flyway lock is held on the server ({shown}) that is not this database's "
            "default one: another database's migration, or this database's with another "
            f"history table (then watch it with lock_name = {sorted(other_flyway)[0]!r})"
        )
    return tuple(
        Hold(
            what=f"user lock {name!r}" + (f" ({tools[name]})" if name in tools else ""),
            holder=holder,
            waiters=tuple(waiters.get(name, ())),
        )
        for name, found in holders.items()
        for holder in found
    )


Sessions = dict[str, list[Backend]]
"""By GET_LOCK name, the connections that hold it (or wait for it)."""


def _listed(
    session: Any, watch: DatabaseWatch, tools: Mapping[str, str], server: Server
) -> tuple[Sessions, Sessions, set[str]]:
    """What metadata_locks lists: the watched names' holders and waiters, and the other
    Flyway locks granted on the server."""
    holders: Sessions = {}
    waiters: Sessions = {}
    other_flyway: set[str] = set()
    watched = _watched_names(watch, tools)
    for name, status, *session_row in _rows(session, LOCKS):
        granted = status == "GRANTED"
        if len(name) >= NAME_WIDTH:
            # Cut, perhaps: any watched name it begins is that lock or another past it. The
            # lock registry names the holder (_add_unlisted_holders); a waiter is told by the
            # name in its GET_LOCK, when its statement shows it.
            query = session_row[-1] or ""
            meant = [
                full
                for full in watched
                if full.startswith(name) and not granted and _quoted(full, query)
            ]
        else:
            meant = [name] if name in watched else []
        for full in meant:
            (holders if granted else waiters).setdefault(full, []).append(
                _backend(session_row, server)
            )
        if not meant and name.startswith("Flyway-") and granted:
            other_flyway.add(name)
    return holders, waiters, other_flyway


def _quoted(name: str, query: str) -> bool:
    """Does the statement name this lock as a string literal (a client's GET_LOCK('NAME', ...))?"""
    return any(f"{quote}{name}{quote}" in query for quote in ("'", '"'))


def _watched_names(watch: DatabaseWatch, tools: Mapping[str, str]) -> list[str]:
    """The GET_LOCK names this watch means: its lock_name, or its tool's names here."""
    if watch.watch == "advisory_key":
        return sorted(name for name, tool in tools.items() if tool == watch.target)
    return [str(watch.target)]


def _add_unlisted_holders(
    session: Any, names: Sequence[str], holders: Sessions, server: Server
) -> None:
    """Ask the server's lock registry who holds each name (IS_USED_LOCK, the connection id):
    metadata_locks leaves out what it did not record (taken while the global_instrumentation
    consumer was off, or with the table full) and what PROCESSLIST hides from this role, so
    its silence does not prove a lock free."""
    if not names:
        return
    placeholders = ", ".join(["IS_USED_LOCK(%s)"] * len(names))
    owners = _rows(session, f"SELECT {placeholders}", names)[0]
    for name, owner in zip(names, owners, strict=True):
        listed = {backend.pid for backend in holders.get(name, ())}
        if owner is None or int(owner) in listed:
            continue
        found = _rows(session, SESSION, (int(owner),))
        if not found:
            raise CheckProblem(
                f"the server says connection {owner} holds user lock {name!r}, but this role "
                "cannot see that connection: grant it PROCESS"
            )
        holders.setdefault(name, []).append(_backend(found[0], server))


def _sessions(session: Any, holds: tuple[Hold, ...], server: Server) -> tuple[Backend, ...]:
    """The server's other client connections, read when something is held."""
    if not holds:
        return ()
    holders = tuple(hold.holder.pid for hold in holds)
    return tuple(_backend(row, server) for row in _rows(session, SESSIONS, (holders,)))


def _check_preset(tool: str, database: str | None) -> None:
    """A tool whose MySQL lock name is computed from the database needs the connection to name
    it: a user lock is the server's, and another database's would otherwise page as this one's."""
    if tool not in MYSQL_TOOLS:
        raise CheckProblem(f"{tool} takes no MySQL lock lockwarden knows (it is PostgreSQL's)")
    if not database and tool not in mysql_lock_names(None).values():
        raise CheckProblem(
            f"{tool}'s lock name is computed from the database: name it in the connection "
            "(mysql://USER@HOST:PORT/DATABASE)"
        )


def _backend(row: Sequence[Any], server: Server) -> Backend:
    """PROCESSLIST's ID, USER, HOST (`host:port`, or `localhost` on the unix socket), COMMAND,
    TIME (seconds in that command or idle) and INFO, of a session of `server`."""
    connection_id, user, host, command, seconds, query = row
    address, port, note = _client(host or "")
    return Backend(
        pid=int(connection_id),
        user=user,
        client_addr=address,
        client_port=port,
        state="idle" if command == "Sleep" else (command or "").lower() or None,
        query=query,
        idle_for_s=float(seconds) if command == "Sleep" and seconds is not None else None,
        server="MySQL",
        kind="connection",
        client_note=note,
        server_port=server.port,
        server_start=server.started,
    )


def _client(host: str) -> tuple[str | None, int | None, str | None]:
    """The client's address and port; a name is resolved only as far as `localhost`."""
    name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
    if not port.isdigit():
        return (
            None,
            None,
            (
                f"the client connects as {host!r} (the unix socket): MySQL serves sessions as "
                "threads, so the client process cannot be found through the server's socket"
            ),
        )
    if name == "localhost":
        name = "127.0.0.1"
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name, int(port), None
