"""Advisory lock keys: how pg_locks shows them, and the migration tools' well-known ones.

pg_locks shows a 64-bit key as classid = high 32 bits, objid = low 32 bits, objsubid = 1, and
the two-int4 form (key1, key2) as classid = key1, objid = key2, objsubid = 2 (both as unsigned
oids). Each tool's lock, read from its own source (docs/databases.md cites them):

* Prisma Migrate: 72707369 (PostgreSQL); `prisma_migrate` (MySQL, the whole server).
* Flyway: 77431708279161 + a 32-bit discriminator, the Java hash of its history table's quoted
  name (PostgreSQL); `Flyway-` + that hash of `` `db`.`flyway_schema_history` `` (MySQL).
* Rails / ActiveRecord: 2053462845 × CRC32(database name) (some versions hash the schema after
  it); on MySQL the same number as text.
* golang-migrate: CRC32 of the names joined by NUL (schema, table, database: which ones depend
  on the version) × 1486364155, in unsigned 32-bit arithmetic; on MySQL of `db:schema_migrations`.
* sqitch: 75474063 (PostgreSQL); `sqitch working on DB` (MySQL).
* node-pg-migrate: 7241865325823964 (PostgreSQL only).

A PostgreSQL advisory lock belongs to one database (pg_locks.database), so a fixed key is this
database's. A MySQL user lock belongs to the whole server: a preset whose name encodes the
database matches only this database's name, and needs the connection to name its database.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

PRISMA_KEY = 72707369
FLYWAY_BASE = 77431708279161
FLYWAY_TABLE = "flyway_schema_history"
RAILS_SALT = 2053462845
GOLANG_MIGRATE_SALT = 1486364155
GOLANG_MIGRATE_TABLE = "schema_migrations"
SQITCH_KEY = 75474063
NODE_PG_MIGRATE_KEY = 7241865325823964

AdvisoryKey = int | tuple[int, int]
"""A 64-bit key, or the two-int4 form as a pair."""


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def key_from_pg_locks(classid: int, objid: int, objsubid: int) -> AdvisoryKey:
    if objsubid == 2:
        return (_signed(classid, 32), _signed(objid, 32))
    return _signed((classid << 32) | objid, 64)


def key_text(key: AdvisoryKey) -> str:
    return f"({key[0]}, {key[1]})" if isinstance(key, tuple) else str(key)


def golang_migrate_keys(database: str, schemas: Iterable[str]) -> set[int]:
    """The keys golang-migrate's versions take for this database: the name alone (old), with
    the schema, and with the schema and its migrations table (current)."""
    names = [[database]]
    for schema in schemas:
        names += [[schema, database], [schema, GOLANG_MIGRATE_TABLE, database]]
    return {
        (zlib.crc32("\0".join(parts).encode()) * GOLANG_MIGRATE_SALT) % (1 << 32) for parts in names
    }


def rails_keys(database: str, schemas: Iterable[str] = ()) -> frozenset[int]:
    """Rails' keys for this database: of its name alone, and of its name followed by a schema
    (the versions and forks that lock per schema)."""
    names = [database, *(database + schema for schema in schemas)]
    return frozenset(RAILS_SALT * zlib.crc32(name.encode()) for name in names)


@dataclass(frozen=True)
class ComputedKeys:
    """The migration tools' keys that depend on the database (and its schemas)."""

    golang_migrate: frozenset[int] = frozenset()
    rails: frozenset[int] = frozenset()


def computed_keys(database: str, schemas: Iterable[str]) -> ComputedKeys:
    listed = sorted(set(schemas))
    return ComputedKeys(
        frozenset(golang_migrate_keys(database, listed)), rails_keys(database, listed)
    )


PRISMA_MYSQL_NAME = "prisma_migrate"


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, signed 32-bit): Flyway's discriminator."""
    value = 0
    encoded = text.encode("utf-16-be")
    for index in range(0, len(encoded), 2):
        value = (31 * value + int.from_bytes(encoded[index : index + 2], "big")) & 0xFFFFFFFF
    return _signed(value, 32)


def golang_migrate_mysql_name(database: str) -> str:
    """golang-migrate's GET_LOCK name on MySQL: its key of `DATABASE:schema_migrations`."""
    text = f"{database}:{GOLANG_MIGRATE_TABLE}"
    return str((zlib.crc32(text.encode()) * GOLANG_MIGRATE_SALT) % (1 << 32))


def mysql_lock_names(database: str | None) -> dict[str, str]:
    """GET_LOCK name -> the tool that takes it, for a connection to `database`: Prisma's name
    is the server's; every other tool's is computed from the database (none without one)."""
    names = {PRISMA_MYSQL_NAME: "prisma"}
    if database:
        names[f"Flyway-{java_string_hash(f'`{database}`.`{FLYWAY_TABLE}`')}"] = "flyway"
        names.update((str(key), "rails") for key in rails_keys(database))
        names[golang_migrate_mysql_name(database)] = "golang-migrate"
        names[f"sqitch working on {database}"] = "sqitch"
    return names


MYSQL_TOOLS = ("prisma", "flyway", "rails", "golang-migrate", "sqitch")
"""The tools with a MySQL lock (node-pg-migrate is PostgreSQL's only)."""


def tool_of(key: AdvisoryKey, computed: ComputedKeys = ComputedKeys()) -> str | None:
    """The migration tool whose well-known lock this is, or None. Only the 64-bit form is
    theirs; `computed` holds the keys that depend on this database."""
    if isinstance(key, tuple):
        return None
    fixed = {PRISMA_KEY: "prisma", SQITCH_KEY: "sqitch", NODE_PG_MIGRATE_KEY: "node-pg-migrate"}
    if key in fixed:
        return fixed[key]
    if FLYWAY_BASE - (1 << 31) <= key < FLYWAY_BASE + (1 << 31):
        return "flyway"
    if key in computed.rails:
        return "rails"
    if key in computed.golang_migrate:
        return "golang-migrate"
    return None


def matches(key: AdvisoryKey, target: int | str | tuple[int, int], tool: str | None) -> bool:
    """Does the lock with this key (recognised as `tool`) answer the configured target?"""
    if isinstance(target, str):
        return tool == target
    return key == target
