"""Read a PostgreSQL server's locks through psycopg 3 (Debian 12's python3-psycopg is 3.1).

The session is read-only (`default_transaction_read_only`), has short `statement_timeout` and
`lock_timeout` (reading the Liquibase table waits behind an ACCESS EXCLUSIVE lock otherwise),
names itself `application_name=lockwarden`, and runs in autocommit, so it holds nothing between
statements. It reads pg_locks and pg_stat_activity and, for Liquibase, one row (with its xmax,
whose transaction pg_locks shows open or not): it never takes an advisory lock, never calls
pg_try_advisory_lock, never locks a row (no SELECT ... FOR UPDATE), never writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockwarden.check.observation import (
    WAITS,
    Backend,
    Hold,
    LiquibaseRow,
    Observation,
    Prepared,
)
from lockwarden.config import DatabaseWatch
from lockwarden.databases.keys import (
    ComputedKeys,
    computed_keys,
    key_from_pg_locks,
    key_text,
    matches,
    tool_of,
)
from lockwarden.databases.session import (
    APPLICATION_NAME,
    CheckProblem,
    connect_timeout_s,
    one_line,
    read_password,
    statement_timeout_ms,
)

if TYPE_CHECKING:
    import psycopg

WAITSTART_VERSION = 140000  # pg_locks.waitstart is PostgreSQL 14's
INSTALL_HINT = (
    "the PostgreSQL driver psycopg 3 is not installed: apt install python3-psycopg, "
    "or pip install 'lockwarden[postgres]'"
)
# Modes a writer (INSERT/UPDATE/DELETE and stronger) asks for on a table.
READER_MODES = ("AccessShareLock", "RowShareLock")

ACTIVITY = """a.pid, a.usename, a.application_name, host(a.client_addr), a.client_port,
    a.backend_start, a.xact_start, a.state, left(a.query, 400)"""

# A prepared transaction (PREPARE TRANSACTION) keeps its locks with no session: pg_locks lists
# them with no pid (pg_blocking_pids counts it as 0), and no session's end frees them. Its
# gid is found through its transaction ID's lock, which shares their virtual transaction.
PREPARED_OF = """LEFT JOIN LATERAL (
        SELECT p.gid, p.prepared, p.owner, p.database FROM pg_locks x
        JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
        WHERE {locks}.pid IS NULL AND x.pid IS NULL AND x.locktype = 'transactionid'
          AND x.virtualtransaction = {locks}.virtualtransaction
    ) p ON true"""
PREPARED = "p.gid, p.prepared, p.owner, p.database"


def conninfo(connection: str) -> str:
    """A bare word is a libpq service name (pg_service.conf); anything else a DSN or URI."""
    if "=" in connection or "://" in connection:
        return connection
    return f"service={connection}"


def observe(watch: DatabaseWatch, environ: Mapping[str, str]) -> Observation:
    """What the server says about this watch now, or the reason it could not be asked."""
    target = watch.describe()
    try:
        import psycopg
    except ImportError:
        return Observation(target, problem=INSTALL_HINT)
    try:
        with connect(watch, environ) as connection:
            return _read(connection, watch, target)
    except CheckProblem as problem:
        return Observation(target, problem=str(problem))
    except psycopg.errors.QueryCanceled:
        return Observation(
            target,
            problem=f"a query of the check ran past statement_timeout "
            f"({watch.statement_timeout:g}s): another session holds a lock that the read "
            "waits for (an ACCESS EXCLUSIVE lock on the table?), or the server is overloaded",
        )
    except psycopg.errors.LockNotAvailable:
        return Observation(
            target,
            problem="the check's read waited past lock_timeout: another session holds an "
            "ACCESS EXCLUSIVE lock on the table it reads",
        )
    except psycopg.Error as error:
        return Observation(target, problem=f"PostgreSQL: {one_line(error)}")


def connect(watch: DatabaseWatch, environ: Mapping[str, str]) -> psycopg.Connection[Any]:
    import psycopg

    timeout_ms = statement_timeout_ms(watch)
    options = (
        f"-c default_transaction_read_only=on -c statement_timeout={timeout_ms} "
        f"-c lock_timeout={timeout_ms} -c idle_in_transaction_session_timeout={timeout_ms * 5}"
    )
    settings: dict[str, Any] = {
        "connect_timeout": connect_timeout_s(watch),
        "application_name": APPLICATION_NAME,
        "options": options,
        "autocommit": True,
    }
    password = read_password(watch, environ)
    if password is not None:
        settings["password"] = password
    try:
        connection = psycopg.connect(conninfo(watch.connection), **settings)
    except psycopg.OperationalError as error:
        raise CheckProblem(f"cannot connect to PostgreSQL: {one_line(error)}") from None
    return connection


def _read(connection: psycopg.Connection[Any], watch: DatabaseWatch, target: str) -> Observation:
    version, port = _one(
        connection,
        "SELECT current_setting('server_version_num')::int, current_setting('port')::int",
    )
    row = None
    if watch.watch == "advisory_key":
        holds = _advisory_holds(connection, watch, version)
    elif watch.watch == WAITS:
        holds = _waiting_holds(connection, version)
    elif watch.watch == "table":
        holds = _table_holds(connection, str(watch.target), version)
    else:
        row, holds = _liquibase(connection, str(watch.target), version)
    others = _other_sessions(connection, holds) if holds else ()
    return _on_port(Observation(target, holds=holds, sessions=others, liquibase=row), port)


def _on_port(observation: Observation, port: int) -> Observation:
    """Each session with the TCP port its server listens on: its client is the connection here
    from its client end to that port, not another program's from the same end to elsewhere
    (databases/peers.py)."""

    def on_port(backend: Backend) -> Backend:
        return replace(backend, server_port=port)

    holds = tuple(
        replace(hold, holder=on_port(hold.holder), waiters=tuple(map(on_port, hold.waiters)))
        for hold in observation.holds
    )
    return replace(observation, holds=holds, sessions=tuple(map(on_port, observation.sessions)))


def _other_sessions(
    connection: psycopg.Connection[Any], holds: tuple[Hold, ...]
) -> tuple[Backend, ...]:
    """The database's client sessions besides the holders (and this check's own)."""
    holders = [hold.holder.pid for hold in holds]
    rows = _all(
        connection,
        f"""SELECT {ACTIVITY}, NULL::timestamptz FROM pg_stat_activity a
        WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
          AND a.backend_type = 'client backend' AND NOT a.pid = ANY(%s)""",
        (holders,),
    )
    return tuple(_backend(row) for row in rows)


def _one(connection: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()


def _all(
    connection: psycopg.Connection[Any],
    query: str,
    params: Sequence[Any] | Mapping[str, Any] = (),
) -> list[Any]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def _waitstart(version: int, alias: str) -> str:
    return f"{alias}.waitstart" if version >= WAITSTART_VERSION else "NULL::timestamptz"


def _backend(row: Sequence[Any]) -> Backend:
    """ACTIVITY's nine columns, then the wait's start (and PREPARED's four, when there)."""
    pid, user, application, address, port, started, xact, state, query, waiting = row[:10]
    if len(row) > 10 and row[10] is not None:
        return _prepared(*row[10:14])
    return Backend(
        pid=pid,
        user=user,
        application_name=application or None,
        client_addr=address,
        client_port=port,
        backend_start=started,
        xact_start=xact,
        state=state,
        query=query,
        waiting_since=waiting,
    )


def _prepared(gid: str, prepared: datetime, owner: str, database: str) -> Backend:
    return Backend(
        0, user=owner, kind="prepared transaction", prepared=Prepared(gid, prepared, database)
    )


def advisory_locks(connection: psycopg.Connection[Any], version: int) -> list[tuple[Any, ...]]:
    """Every advisory lock of the connected database, granted or awaited, with its session
    (`l.pid` stands in when the role may not see the session's details), or the prepared
    transaction that holds it (the last four columns)."""
    return _all(
        connection,
        f"""SELECT l.classid::int8, l.objid::int8, l.objsubid::int4, l.granted,
            l.pid, a.usename, a.application_name, host(a.client_addr), a.client_port,
            a.backend_start, a.xact_start, a.state, left(a.query, 400), {_waitstart(version, "l")},
            {PREPARED}
        FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        {PREPARED_OF.format(locks="l")}
        WHERE l.locktype = 'advisory'
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        ORDER BY l.granted DESC, l.pid""",
    )


def migration_keys(connection: psycopg.Connection[Any]) -> ComputedKeys:
    """The tools' keys computed from this database's name and its schemas."""
    database, schemas = _one(connection, "SELECT current_database(), current_schemas(false)")
    return computed_keys(database, {*schemas, "public"})


def _advisory_holds(
    connection: psycopg.Connection[Any], watch: DatabaseWatch, version: int
) -> tuple[Hold, ...]:
    computed = migration_keys(connection)
    holders: dict[Any, list[Backend]] = {}
    waiters: dict[Any, list[Backend]] = {}
    labels: dict[Any, str] = {}
    for row in advisory_locks(connection, version):
        key = key_from_pg_locks(row[0], row[1], row[2])
        tool = tool_of(key, computed)
        if not matches(key, watch.target, tool):
            continue
        labels[key] = f"advisory lock {key_text(key)}" + (f" ({tool})" if tool else "")
        (holders if row[3] else waiters).setdefault(key, []).append(_backend(row[4:]))
    return tuple(
        Hold(
            what=labels[key],
            holder=holder,
            waiters=tuple(waiters.get(key, ())),
        )
        for key, found in holders.items()
        for holder in found
    )


def watched_tables(connection: psycopg.Connection[Any], table: str) -> list[int]:
    """The oids a `table` target names: one table (search_path applies), or a schema's tables."""
    if table.endswith(".*"):
        rows = _all(
            connection,
            """SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind IN ('r', 'p')""",
            (table[:-2],),
        )
        return [row[0] for row in rows]
    found = _one(connection, "SELECT to_regclass(%s)::oid::int8", (table,))[0]
    return [] if found is None else [found]


def _table_holds(connection: psycopg.Connection[Any], table: str, version: int) -> tuple[Hold, ...]:
    oids = watched_tables(connection, table)
    if not oids:
        raise CheckProblem(f"no table {table} in this database (is the name or schema right?)")
    blocked = _all(
        connection,
        """SELECT l.pid, string_agg(DISTINCT l.relation::regclass::text, ', '),
            pg_blocking_pids(l.pid)
        FROM pg_locks l
        WHERE l.locktype = 'relation' AND l.relation = ANY(%s::oid[]) AND l.mode <> ALL(%s)
          AND l.pid <> pg_backend_pid() AND cardinality(pg_blocking_pids(l.pid)) > 0
        GROUP BY l.pid""",
        (oids, list(READER_MODES)),
    )
    if not blocked:
        return ()
    return _holds_behind(connection, version, [(pid, f"table {t}", b) for pid, t, b in blocked])


def _waiting_holds(connection: psycopg.Connection[Any], version: int) -> tuple[Hold, ...]:
    """Every session of this database waiting on a lock another session holds, grouped by the
    session at the root of its wait chain: advisory locks, tables, rows. A row wait is on a
    transaction ID, which pg_locks lists with no database: the session's own says whose."""
    rows = _all(
        connection,
        """SELECT l.pid, l.locktype, l.relation::regclass::text, l.classid::int8, l.objid::int8,
            l.objsubid::int4, l.transactionid::text, pg_blocking_pids(l.pid)
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE NOT l.granted AND l.pid <> pg_backend_pid()
          AND a.datname = current_database()
          AND (l.database IS NULL
               OR l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
          AND cardinality(pg_blocking_pids(l.pid)) > 0""",
    )
    waited: dict[int, tuple[set[str], list[int]]] = {}
    for pid, locktype, relation, classid, objid, objsubid, xid, blockers in rows:
        what, _blockers = waited.setdefault(pid, (set(), list(blockers)))
        what.add(_awaited(locktype, relation, classid, objid, objsubid, xid))
    blocked = [(pid, ", ".join(sorted(what)), b) for pid, (what, b) in waited.items()]
    return _holds_behind(connection, version, blocked) if blocked else ()


def _awaited(
    locktype: str, relation: str | None, classid: int, objid: int, objsubid: int, xid: str | None
) -> str:
    """What a waiting session waits for, as a report names it."""
    if locktype == "advisory":
        return f"advisory lock {key_text(key_from_pg_locks(classid, objid, objsubid))}"
    if locktype == "relation" and relation:
        return f"table {relation}"
    if locktype == "tuple" and relation:
        return f"a row of {relation}"
    if locktype == "transactionid":
        return f"a row another transaction ({xid}) changed"
    return f"a {locktype} lock"


def _holds_behind(
    connection: psycopg.Connection[Any], version: int, blocked: list[tuple[int, str, Any]]
) -> tuple[Hold, ...]:
    """One Hold per session at the root of the waiters' chains (wait_roots)."""
    graph = _wait_graph(connection, {pid: list(blockers) for pid, _w, blockers in blocked})
    blockers_of, prepared = _prepared_blockers(connection, graph)
    pids = sorted(blockers_of.keys() | {pid for found in blockers_of.values() for pid in found})
    rows = _all(
        connection,
        f"""SELECT (SELECT array_agg(DISTINCT w.locktype) FROM pg_locks w
                WHERE w.pid = a.pid AND NOT w.granted),
            {ACTIVITY},
            (SELECT min({_waitstart(version, "w")}) FROM pg_locks w
             WHERE w.pid = a.pid AND NOT w.granted)
        FROM pg_stat_activity a WHERE a.pid = ANY(%s)""",
        (pids,),
    )
    sessions = {row[1]: _backend(row[1:]) for row in rows}
    awaits = {row[1]: frozenset(row[0] or ()) for row in rows}
    return _group_by_blocker(blocked, blockers_of, {**sessions, **prepared}, awaits)


WAIT_GRAPH_ROUNDS = 8
"""How far a chain of waiting sessions is followed (each round one query)."""


def _wait_graph(
    connection: psycopg.Connection[Any], blockers_of: dict[int, list[int]]
) -> dict[int, list[int]]:
    """pg_blocking_pids of every session in the chains that end at these waiters: a blocker
    may itself wait, behind a lock on another table or a session the check did not see."""
    graph = dict(blockers_of)
    for _round in range(WAIT_GRAPH_ROUNDS):
        unknown = sorted({pid for found in graph.values() for pid in found} - graph.keys())
        if not unknown:
            break
        rows = _all(
            connection, "SELECT p, pg_blocking_pids(p) FROM unnest(%s::int[]) AS p", (unknown,)
        )
        graph.update((pid, list(found)) for pid, found in rows)
    return graph


# Which lock modes conflict with which (PostgreSQL's table, the same for every kind of lock).
CONFLICTS = {
    "AccessShareLock": {"AccessExclusiveLock"},
    "RowShareLock": {"ExclusiveLock", "AccessExclusiveLock"},
    "RowExclusiveLock": {
        "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock",
    },
    "ShareUpdateExclusiveLock": {
        "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareLock": {
        "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareRowExclusiveLock": {
        "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock",
        "ExclusiveLock", "AccessExclusiveLock",
    },
    "ExclusiveLock": {
        "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock",
        "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock",
    },
}  # fmt: skip
EVERY_MODE = frozenset({*CONFLICTS, "AccessExclusiveLock"})


def conflicts(wanted: str, held: str) -> bool:
    return held in CONFLICTS.get(wanted, EVERY_MODE)


def _prepared_blockers(
    connection: psycopg.Connection[Any], graph: dict[int, list[int]]
) -> tuple[dict[int, list[int]], dict[int, Backend]]:
    """The wait graph with each prepared transaction in it (pg_blocking_pids counts one as 0)
    by a key of its own below 0: those that hold a lock conflicting with what the session
    waits for. A 0 none is found for again stays, an unnamed prepared transaction."""
    waiting = sorted(pid for pid, blockers in graph.items() if 0 in blockers)
    if not waiting:
        return graph, {}
    rows = _all(
        connection,
        f"""SELECT w.pid, w.mode, h.mode, {PREPARED}
        FROM pg_locks w JOIN pg_locks h ON h.pid IS NULL AND h.granted
          AND (h.locktype, h.database, h.relation, h.page, h.tuple, h.virtualxid,
               h.transactionid, h.classid, h.objid, h.objsubid)
          IS NOT DISTINCT FROM (w.locktype, w.database, w.relation, w.page, w.tuple,
               w.virtualxid, w.transactionid, w.classid, w.objid, w.objsubid)
        {PREPARED_OF.format(locks="h")}
        WHERE NOT w.granted AND w.pid = ANY(%s) AND p.gid IS NOT NULL
        ORDER BY p.prepared, p.gid""",
        (waiting,),
    )
    keys: dict[str, int] = {}
    backends = {0: Backend(0, kind="prepared transaction", prepared=Prepared(None))}
    found: dict[int, list[int]] = {}
    for pid, wanted, held, *prepared in rows:
        if conflicts(wanted, held):
            key = keys.setdefault(prepared[0], -1 - len(keys))
            backends[key] = _prepared(*prepared)
            found.setdefault(pid, []).append(key)
    return {pid: _named(blockers, found.get(pid, [])) for pid, blockers in graph.items()}, backends


def _named(blockers: list[int], prepared: list[int]) -> list[int]:
    """A session's blockers with the 0 pg_blocking_pids gives replaced by the prepared
    transactions found, when any were."""
    if 0 not in blockers or not prepared:
        return blockers
    return [blocker for blocker in blockers if blocker != 0] + prepared


def wait_roots(pid: int, blockers_of: Mapping[int, Sequence[int]]) -> list[int]:
    """The sessions at the end of `pid`'s wait chains: blocking it, directly or through
    sessions queued ahead of it, and waiting on nothing themselves. A writer queued behind an
    ALTER TABLE that waits on an idle transaction is blocked by that transaction, not by the
    ALTER, which holds nothing yet. In a cycle (a deadlock, until the server breaks it) the
    direct blockers are all there is to name."""
    roots: list[int] = []
    seen = {pid}
    stack = list(blockers_of.get(pid, ()))
    while stack:
        blocker = stack.pop()
        if blocker in seen:
            continue
        seen.add(blocker)
        ahead = blockers_of.get(blocker, ())
        if ahead:
            stack.extend(ahead)
        else:
            roots.append(blocker)
    return sorted(roots) or list(blockers_of.get(pid, ()))


# Lock types a session takes only inside its transaction, and keeps to its end (a relation
# lock may be a session's too: CREATE INDEX CONCURRENTLY's, across its transactions).
TRANSACTION_LOCKTYPES = frozenset({"relation", "extend", "page", "tuple", "transactionid"})


def _group_by_blocker(
    blocked: list[Any],
    blockers_of: Mapping[int, Sequence[int]],
    sessions: dict[int, Backend],
    awaits: Mapping[int, frozenset[str]] = {},
) -> tuple[Hold, ...]:
    """One Hold per session at the root of the wait graph, with every writer queued behind
    it, directly or not, in the order they started waiting. `awaits`: the lock types each
    waiting session waits for. The root's lock is its transaction's, held since at most its
    xact_start, only when every session it blocks itself waits for a table, row or
    transaction ID: a writer of a table may be queued behind a migration that holds the table
    and waits for an advisory lock, which the root may have held since long before its
    transaction began (a session's lock)."""
    by_holder: dict[int, list[tuple[Backend, str]]] = {}
    for pid, what, _blockers in blocked:
        for root in wait_roots(pid, blockers_of):
            by_holder.setdefault(root, []).append((sessions.get(pid, Backend(pid)), what))

    def scoped(root: int, found: list[tuple[Backend, str]]) -> bool:
        blocked_by_it = [pid for pid, blockers in blockers_of.items() if root in blockers]
        return all(what.startswith(("table ", "a row")) for _w, what in found) and all(
            awaits.get(pid, frozenset({"?"})) <= TRANSACTION_LOCKTYPES for pid in blocked_by_it
        )

    return tuple(
        Hold(
            what=", ".join(sorted({what for _waiter, what in found})),
            holder=sessions.get(holder, Backend(holder)),
            waiters=tuple(sorted((w for w, _t in found), key=_queue_position)),
            transaction_scoped=scoped(holder, found),
        )
        for holder, found in by_holder.items()
    )


def _queue_position(backend: Backend) -> tuple[bool, datetime | None, int]:
    waited = backend.waiting_since
    return (waited is None, waited, backend.pid)


def _liquibase(
    connection: psycopg.Connection[Any], table: str, version: int
) -> tuple[LiquibaseRow | None, tuple[Hold, ...]]:
    """Liquibase's row as committed, and the open transaction that has changed it, when one has:
    this session sees the committed row only (MVCC), so an uncommitted take (or release) reads
    as the row was before it, while every other writer of the row waits for that transaction."""
    from psycopg import sql

    found = _one(
        connection,
        """SELECT n.nspname, c.relname, c.oid::int8 FROM pg_class c JOIN pg_namespace n
        ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)""",
        (table,),
    )
    if found is None:
        raise CheckProblem(f"no table {table} in this database (has Liquibase run here?)")
    schema, name, relation = found
    query = sql.SQL(
        "SELECT locked, lockgranted, lockedby, lockgranted::timestamptz, xmax::text, ctid::text "
        "FROM {} WHERE id = 1"
    ).format(sql.Identifier(schema, name))
    with connection.cursor() as cursor:
        cursor.execute(query)
        fetched = cursor.fetchone()
    if fetched is None:
        return None, ()
    locked, granted, locked_by, server_zone, xmax, ctid = fetched
    row = LiquibaseRow(
        locked=bool(locked),
        granted=_local(granted),
        locked_by=locked_by,
        granted_server_zone=server_zone,
        readings=_readings(granted, server_zone),
    )
    if xmax == "0":  # no transaction has updated, deleted or locked this version of the row
        return row, ()
    what = f"Liquibase's lock row ({schema}.{name} ID 1, committed {_committed(row)})"
    return row, _row_holds(connection, version, relation, xmax, ctid, what)


def _committed(row: LiquibaseRow) -> str:
    return f"locked by {row.locked_by or 'nobody named'}" if row.locked else "not locked"


# The open transaction whose ID is a row's xmax has updated or deleted that row, or locked it
# (SELECT ... FOR UPDATE, or an UPDATE whose WHERE no longer matched once it had the row); its
# transaction ID's lock says it is still open (taken when the ID is assigned, a subtransaction's
# too). One that holds ROW EXCLUSIVE on the table writes to it; one that does not only locked
# the row (a FOR KEY SHARE lock blocks no UPDATE of it). A subtransaction's ID lock goes when
# the subtransaction ends, a savepoint released into a transaction still open included: its
# change is then that transaction's, which a writer of the row waits for (on the nearest open
# ancestor's ID), while no lock shows the xmax. The server still counts that xmax in progress
# (txid_status, of the xmax with the epoch of the next ID), and the open transaction it belongs
# to got its ID before it and holds a lock on the table since the change: with no lock on the
# xmax, those are the transactions it may belong to. The last two columns: the transaction's
# virtual ID, and its ID that is on the row or a writer may wait on.
XMAX_FULL = "(n.next - (n.next - %(xmax)s::text::bigint) %% 4294967296)"
ROW_XMAX = f"""SELECT EXISTS (SELECT 1 FROM pg_locks r
        WHERE r.virtualtransaction = x.virtualtransaction AND r.locktype = 'relation'
          AND r.granted AND r.mode = 'RowExclusiveLock' AND r.relation = %(relation)s
          AND r.database = {{database}}),
        {ACTIVITY}, NULL::timestamptz, {PREPARED}, x.virtualtransaction, x.transactionid::text
    FROM pg_locks x LEFT JOIN pg_stat_activity a ON a.pid = x.pid
    {PREPARED_OF.format(locks="x")}
    CROSS JOIN (SELECT txid_snapshot_xmax(txid_current_snapshot()) AS next) n
    WHERE x.locktype = 'transactionid' AND x.granted
      AND (a.pid IS NOT NULL OR p.gid IS NOT NULL)
      AND CASE WHEN EXISTS (SELECT 1 FROM pg_locks o WHERE o.locktype = 'transactionid'
                            AND o.granted AND o.transactionid = %(xmax)s::xid)
          THEN x.transactionid = %(xmax)s::xid
          ELSE txid_status({XMAX_FULL}) = 'in progress'
            AND age(x.transactionid) > age(%(xmax)s::xid)
            AND EXISTS (SELECT 1 FROM pg_locks r
                WHERE r.virtualtransaction = x.virtualtransaction AND r.locktype = 'relation'
                  AND r.granted AND r.relation = %(relation)s AND r.database = {{database}})
          END
    ORDER BY x.virtualtransaction, age(x.transactionid) DESC"""
# A writer of the row waits on the transaction that holds it; the writers queued behind that
# one wait on the row's version itself (a tuple lock). Each holds a lock on the table meanwhile.
ROW_WAITERS = """SELECT {activity}, {waitstart}
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE NOT l.granted AND a.datname = current_database()
      AND ((l.locktype = 'transactionid' AND l.transactionid = ANY(%(xids)s::xid[]))
           OR (l.locktype = 'tuple' AND l.database = {database} AND l.relation = %(relation)s
               AND (l.page, l.tuple) = (%(page)s, %(tuple)s)))
      AND EXISTS (SELECT 1 FROM pg_locks r WHERE r.pid = l.pid AND r.granted
          AND r.locktype = 'relation' AND r.relation = %(relation)s)"""
DATABASE_OID = "(SELECT oid FROM pg_database WHERE datname = current_database())"


def _row_holds(
    connection: psycopg.Connection[Any],
    version: int,
    relation: int,
    xmax: str,
    ctid: str,
    row_text: str,
) -> tuple[Hold, ...]:
    """The open transaction that holds the row (its xmax) when it writes to the table or a
    writer of the row waits for it, with the sessions waiting to write the row behind it; none
    when that transaction has ended or only locked the row, unwaited for."""
    page, tuple_number = (int(part) for part in ctid.strip("()").split(","))
    params: dict[str, Any] = {
        "xmax": xmax,
        "relation": relation,
        "page": page,
        "tuple": tuple_number,
    }
    found = _all(connection, ROW_XMAX.format(database=DATABASE_OID), params)
    if not found:
        return ()
    transactions = {row[-2]: _backend(row[1:-2]) for row in found}
    if len(transactions) > 1:
        raise CheckProblem(
            f"{row_text} has the xmax {xmax}, a subtransaction still in progress whose own "
            "lock is gone (a savepoint released into a transaction not yet ended), and "
            f"{len(transactions)} open transactions that lock the table may be its: "
            + ", ".join(backend.describe() for backend in transactions.values())
        )
    params["xids"] = [row[-1] for row in found]
    waiting = ROW_WAITERS.format(
        activity=ACTIVITY, waitstart=_waitstart(version, "l"), database=DATABASE_OID
    )
    waiters = tuple(sorted(map(_backend, _all(connection, waiting, params)), key=_queue_position))
    writes, *holder = found[0][:-2]
    xmax_text = "the row's xmax"
    if found[0][-1] != xmax:
        xmax_text += f" {xmax}, of a savepoint ended in open transaction {found[0][-1]}"
    if writes:
        what = f"{row_text}, under a write not yet committed ({xmax_text})"
    elif waiters:
        what = f"{row_text}, under a row lock a writer waits for ({xmax_text})"
    else:
        return ()
    return (Hold(what=what, holder=_backend(holder), waiters=waiters, transaction_scoped=True),)


def _readings(granted: datetime | None, server_zone: datetime | None) -> tuple[datetime, ...]:
    """LOCKGRANTED is a `timestamp without time zone`: the wall-clock time of the Liquibase
    that wrote it, in its JVM's zone. That may be this host's, the server's, or UTC (a
    container's): each reading, once (equal moments are one)."""
    if granted is None:
        return ()
    if granted.tzinfo is not None:
        return (granted,)
    found = (server_zone, granted.astimezone(), granted.replace(tzinfo=UTC))
    return tuple(dict.fromkeys(moment for moment in found if moment is not None))


def _local(moment: datetime | None) -> datetime | None:
    """A `timestamp without time zone` as Liquibase on this host wrote it: local time here."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.astimezone()
