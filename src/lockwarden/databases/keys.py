"""Advisory lock keys: how pg_locks shows them, and the migration tools' well-known ones.

pg_locks shows a 64-bit key as classid = high 32 bits, objid = low 32 bits, objsubid = 1, and
the two-int4 form (key1, key2) as classid = key1, objid = key2, objsubid = 2 (both as unsigned
oids). The tools (LOCK-FORMATS in the project docs):

* Prisma Migrate: 72707369.
* Flyway: 77431708279161 + a 32-bit discriminator (the Java hash of the history table's name).
* Rails / ActiveRecord: 2053462845 × CRC32(database name).
* golang-migrate: CRC32 of the names joined by NUL (schema, table, database: which ones depend
  on the version) × 1486364155, in unsigned 32-bit arithmetic.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable

PRISMA_KEY = 72707369
FLYWAY_BASE = 77431708279161
RAILS_SALT = 2053462845
GOLANG_MIGRATE_SALT = 1486364155
GOLANG_MIGRATE_TABLE = "schema_migrations"

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


PRISMA_MYSQL_NAME = "prisma_migrate"
FLYWAY_MYSQL_PREFIX = "Flyway-"


def golang_migrate_mysql_name(database: str) -> str:
    """golang-migrate's GET_LOCK name on MySQL: its key of `DATABASE:schema_migrations`."""
    text = f"{database}:{GOLANG_MIGRATE_TABLE}"
    return str((zlib.crc32(text.encode()) * GOLANG_MIGRATE_SALT) % (1 << 32))


def mysql_tool_of(name: str, golang_migrate: str | None = None) -> str | None:
    """The migration tool whose GET_LOCK name this is: Prisma's fixed name, Flyway's prefix,
    Rails' number (its PostgreSQL key as text), golang-migrate's computed number."""
    if name == PRISMA_MYSQL_NAME:
        return "prisma"
    if name.startswith(FLYWAY_MYSQL_PREFIX):
        return "flyway"
    if name == golang_migrate:
        return "golang-migrate"
    if name.isdigit() and tool_of(int(name)) == "rails":
        return "rails"
    return None


def tool_of(key: AdvisoryKey, golang_migrate: Collection[int] = frozenset()) -> str | None:
    """The migration tool whose well-known lock this is, or None. Only the 64-bit form is
    theirs; `golang_migrate` holds the keys computed for this database."""
    if isinstance(key, tuple):
        return None
    if key == PRISMA_KEY:
        return "prisma"
    if FLYWAY_BASE - (1 << 31) <= key < FLYWAY_BASE + (1 << 31):
        return "flyway"
    if key > 0 and key % RAILS_SALT == 0 and key // RAILS_SALT < 1 << 32:
        return "rails"
    if key in golang_migrate:
        return "golang-migrate"
    return None


def matches(key: AdvisoryKey, target: int | str | tuple[int, int], tool: str | None) -> bool:
    """Does the lock with this key (recognised as `tool`) answer the configured target?"""
    if isinstance(target, str):
        return tool == target
    return key == target
