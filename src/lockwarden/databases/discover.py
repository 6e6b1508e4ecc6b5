"""The database locks a PostgreSQL server shows now, offered as [[lock]] candidates.

From one read-only session (the same as a check's): every advisory lock of the connected
database, granted or awaited (a migration tool's by name); the advisory lock of each migration
tool whose history table is there (`_prisma_migrations`, `flyway_schema_history`, Rails'
`ar_internal_metadata`, golang-migrate's `schema_migrations`); Liquibase's lock table; and every
table with a writer blocked right now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lockwarden.config import DatabaseWatch
from lockwarden.databases.keys import AdvisoryKey, key_from_pg_locks, tool_of
from lockwarden.databases.postgres import (
    READER_MODES,
    advisory_locks,
    connect,
    migration_keys,
)
from lockwarden.databases.session import CheckProblem, answer_deadline_s, one_line, unanswered
from lockwarden.support import abandon

# A migration tool's history table, by the tool whose advisory lock guards it.
TOOL_TABLES = {
    "prisma": "_prisma_migrations",
    "flyway": "flyway_schema_history",
    "rails": "ar_internal_metadata",
    "golang-migrate": "schema_migrations",
}
LIQUIBASE_TABLE = "databasechangeloglock"
# Besides one per tool table: the database, the version, the migration keys, the advisory
# locks, Liquibase's table and the blocked tables.
DISCOVERY_QUERIES = 6


@dataclass(frozen=True)
class DatabaseCandidate:
    """One lock to offer: what to watch, a name for it, and how it was found."""

    watch: DatabaseWatch
    label: str
    found_by: str


def postgres_candidates(
    connection: str, environ: Mapping[str, str]
) -> tuple[list[DatabaseCandidate], list[str]]:
    """The candidates this server shows, or none and a note saying why it could not look."""
    probe = DatabaseWatch(engine="postgresql", connection=connection, watch="table", target="-")
    try:
        import psycopg
    except ImportError:
        return [], ["psycopg 3 is not installed: database locks cannot be discovered"]
    queries = DISCOVERY_QUERIES + len(TOOL_TABLES)
    deadline = answer_deadline_s(probe, queries)
    try:
        answered, found = abandon.within(lambda: _discover(probe, environ), "discover", deadline)
    except (CheckProblem, psycopg.Error) as error:
        return [], [f"{connection}: {one_line(error)}"]
    if not answered or found is None:
        return [], [f"{connection}: {unanswered(deadline, queries)}"]
    return found, []


def _discover(probe: DatabaseWatch, environ: Mapping[str, str]) -> list[DatabaseCandidate]:
    with connect(probe, environ) as session:
        return _candidates(session, probe)


def _candidates(session: Any, probe: DatabaseWatch) -> list[DatabaseCandidate]:
    database = session.execute("SELECT current_database()").fetchone()[0]
    version = int(session.execute("SHOW server_version_num").fetchone()[0])
    found: dict[str, DatabaseCandidate] = {}

    def offer(watch: str, target: Any, label: str, why: str) -> None:
        key = f"{watch}:{target}"
        if key not in found:
            settings = {"watch": watch, "target": target}
            found[key] = DatabaseCandidate(replace(probe, **settings), f"{database}-{label}", why)

    computed = migration_keys(session)
    for row in advisory_locks(session, version):
        key: AdvisoryKey = key_from_pg_locks(row[0], row[1], row[2])
        tool = tool_of(key, computed)
        how = "held" if row[3] else "awaited"
        target = tool or key
        offer(
            "advisory_key",
            target,
            tool or f"advisory-{_key_label(key)}",
            f"advisory lock {how} now by "
            + (f"prepared transaction {row[14]!r}" if row[14] else f"backend {row[4]}"),
        )
    for tool, table in TOOL_TABLES.items():
        if _table_exists(session, table):
            offer("advisory_key", tool, tool, f"{tool}'s table {table} is in {database}")
    if _table_exists(session, LIQUIBASE_TABLE):
        offer("liquibase_table", LIQUIBASE_TABLE, "liquibase", f"{LIQUIBASE_TABLE} is there")
    for table in _blocked_tables(session):
        offer("table", table, table.replace(".", "-"), "a writer is blocked on it now")
    return list(found.values())


def _key_label(key: AdvisoryKey) -> str:
    return f"{key[0]}-{key[1]}" if isinstance(key, tuple) else str(key)


def _table_exists(session: Any, table: str) -> bool:
    return session.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None


def _blocked_tables(session: Any) -> list[str]:
    rows = session.execute(
        """SELECT DISTINCT n.nspname || '.' || c.relname FROM pg_locks l
        JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE l.locktype = 'relation' AND c.relkind IN ('r', 'p') AND l.mode <> ALL(%s)
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND cardinality(pg_blocking_pids(l.pid)) > 0 ORDER BY 1""",
        (list(READER_MODES),),
    ).fetchall()
    return [row[0] for row in rows]
