"""A randomized differential for Liquibase's lock row (DATABASECHANGELOGLOCK, ID 1) on a real
PostgreSQL server: real psql sessions take it, release it or lock it in a transaction they have
not ended (or a prepared transaction does, which no session holds), in a savepoint left open
or released (whose ID, the row's xmax, then has no lock of its own), or undo their take to a
savepoint, with Liquibase's own statements, while Liquibase-like clients queue to write it. The
check's session sees only the committed row (MVCC), yet the real `lockwarden --once` must name
the transaction that holds the row and every client waiting on it, and never call the row free
or stale past it. Bystanders must never be named: a session that read the table, one that wrote
another table or wrote the lock table but not its row, and an uncommitted take of the same
table in another database of the server; nor one that wrote another table and read this one,
which past a released savepoint is as likely the xmax's transaction as far as the server shows
(the check must then say unknown). The seed is in the test id: a failure replays with
`-k SEED`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from test_postgres_differential import blocked_sessions, other_database_session
from test_postgres_locks import (
    Psql,
    Server,
    check,
    lock_text,
    password_file,
    prepare,
    prepared,
    psql,
    run_advised_rollback,
    server,
    sessions,
)

from conftest import wait_until

__all__ = ["prepared", "server", "sessions"]  # the fixtures, shared with test_postgres_locks

HERE = f"{os.uname().nodename} (127.0.0.1)"
ELSEWHERE = "build-7.example.net (10.0.0.7)"
# Liquibase's StandardLockService: its take, and its release (`liquibase release-locks`'s too).
TAKE = (
    "UPDATE {table} SET locked = true, lockedby = '{by}', lockgranted = now() "
    "WHERE id = 1 AND locked = false"
)
RELEASE = "UPDATE {table} SET locked = false, lockedby = NULL, lockgranted = NULL WHERE id = 1"
# What a session does with the row in a transaction it has not ended; what those queued behind
# it run; and what the row says as committed before it.
PHASES = {
    "take": (TAKE, TAKE, "not locked"),
    "release": (RELEASE, RELEASE, "locked here"),
    "row lock": ("SELECT id FROM {table} WHERE id = 1 FOR UPDATE", TAKE, "not locked"),
    "committed take": ("", "", "locked elsewhere"),
    "undone take": (f"SAVEPOINT undo; {TAKE}; ROLLBACK TO SAVEPOINT undo", "", "not locked"),
    "reader only": ("SELECT * FROM {table}", "", "not locked"),
    "unrelated writer": ("INSERT INTO {schema}.orders VALUES (1)", "", "not locked"),
}
BYSTANDERS = (
    "reader",
    "unrelated writer",
    "writer of another row",
    "other database",
    "reader that wrote elsewhere",
)
# How the holder's statement runs in its transaction: a subtransaction's ID (the row's xmax)
# loses its lock when its savepoint is released, while the change stays the open transaction's.
SAVEPOINTS = {
    "none": "{statement}",
    "open": "SAVEPOINT change; {statement}",
    "released": "SAVEPOINT change; {statement}; RELEASE SAVEPOINT change",
    "nested": "SAVEPOINT ahead; SAVEPOINT change; {statement}; RELEASE SAVEPOINT change",
}
SEEDS = range(42)


def make_tables(server: Server, schema: str, table: str, committed: str) -> None:
    """A fresh schema with the lock table (its row as `committed` says) and a table of the
    application's own."""
    locked_by = {"locked here": HERE, "locked elsewhere": ELSEWHERE}.get(committed)
    # Taken here two hours ago by a run that is no longer seen: stale, but for an open release
    age = "2 hours" if committed == "locked here" else "5 minutes"
    with server.admin() as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        connection.execute(f"CREATE SCHEMA {schema}")
        connection.execute(
            f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, locked boolean NOT NULL, "
            "lockgranted timestamp, lockedby varchar(255))"
        )
        connection.execute(
            f"INSERT INTO {schema}.{table} VALUES (1, %s, now() - %s::interval, %s)",
            (locked_by is not None, age, locked_by),
        )
        connection.execute(f"CREATE TABLE {schema}.orders (id int)")
        connection.execute(f"GRANT USAGE ON SCHEMA {schema} TO app")
        connection.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO app")


def start_bystander(
    kind: str, server: Server, sessions: list[Psql], schema: str, table: str, tcp: bool
) -> Psql:
    """A session in an open transaction that holds nothing of the watched row."""
    if kind == "other database":  # the same table there, its row taken and not committed
        other = other_database_session(server, sessions)
        other.run(
            f"CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {schema}.{table} "
            "(id int PRIMARY KEY, locked boolean NOT NULL, lockgranted timestamp, lockedby text);"
            f"INSERT INTO {schema}.{table} VALUES (1, false) ON CONFLICT (id) DO UPDATE "
            f"SET locked = false; BEGIN; {TAKE.format(table=f'{schema}.{table}', by=HERE)};"
        )
        return other
    statement = {
        "reader": f"SELECT * FROM {schema}.{table}",
        "unrelated writer": f"INSERT INTO {schema}.orders VALUES (2)",
        "writer of another row": f"UPDATE {schema}.{table} SET lockedby = 'x' WHERE id = 2",
        # an open transaction with an ID that locks the table: once the holder's savepoint is
        # released, one the row's xmax may belong to as far as the server shows
        "reader that wrote elsewhere": (
            f"INSERT INTO {schema}.orders VALUES (3); SELECT * FROM {schema}.{table}"
        ),
    }[kind]
    session = psql(server, sessions, tcp=tcp)
    session.run(f"BEGIN; {statement};")
    return session


@pytest.mark.parametrize("seed", SEEDS)
def test_lock_row_changed_in_an_open_transaction_names_it_and_never_reads_free(
    seed: int, server: Server, sessions: list[Psql], prepared: list[str], tmp_path: Path
) -> None:
    rng = random.Random(seed)
    phase = sorted(PHASES)[seed % len(PHASES)]  # every phase, four times; the rest drawn
    statement, queued, committed = PHASES[phase]
    schema = f"lqb_{seed}"
    table = rng.choice(["databasechangeloglock", "app_changeloglock"])
    qualified = f"{schema}.{table}"
    make_tables(server, schema, table, committed)
    statement = statement.format(table=qualified, schema=schema, by=HERE)
    kinds = rng.sample(BYSTANDERS, rng.randint(0, len(BYSTANDERS)))
    bystanders = [
        start_bystander(kind, server, sessions, schema, table, rng.random() < 0.5) for kind in kinds
    ]
    holder = None
    how = rng.choice(sorted(SAVEPOINTS))
    if statement:
        statement = SAVEPOINTS[how].format(statement=statement)
    gid = None  # the prepared transaction that holds the row, when one does
    if phase in ("take", "release") and rng.random() < 0.3:
        gid = f"migrate-{seed}"
        prepare(server, prepared, gid, statement)
    elif statement:
        holder = psql(server, sessions, tcp=rng.random() < 0.5)
        holder.run(f"BEGIN; {statement};")
    waiters: list[Psql] = []
    least = 1 if phase == "row lock" else 0  # a row lock is named by the writer it blocks
    for number in range(rng.randint(least, 2) if queued else 0):
        waiter = psql(server, sessions, tcp=rng.random() < 0.5)
        waiter.run(queued.format(table=qualified, by=HERE) + ";", wait=False)
        waiters.append(waiter)
        assert wait_until(lambda n=number + 1: blocked_sessions(server) == n, timeout=10)

    lock = lock_text(
        server, f'liquibase_table = "{qualified}"', tcp=True, extra=password_file(tmp_path)
    )
    # An hour on: a prepared transaction's hold is known from when it was prepared
    _code, finding = check(tmp_path, lock, minutes=60 if gid else 0)

    scenario = f"seed {seed}: {phase} of {qualified} (savepoint {how}), "
    scenario += f"holder {gid or (holder and holder.pid)}, "
    scenario += f"{len(waiters)} waiting, bystanders {kinds}: {finding['reason']}"
    named = {each["pid"] for each in (*finding["holders"], *finding["waiters"])}
    assert not named & {each.pid for each in bystanders}, scenario
    if (
        how in ("released", "nested")
        and phase in ("take", "release", "row lock")
        and "reader that wrote elsewhere" in kinds
    ):  # two open transactions the xmax may belong to: which, the server does not show
        assert finding["state"] == "unknown", scenario
        assert finding["holders"] == [] and "xmax" in finding["reason"], scenario
        return
    assert [each["pid"] for each in finding["waiters"]] == [w.pid for w in waiters], scenario
    if gid is not None:
        assert_prepared_holds(server, finding, gid, scenario)
    elif holder is not None and phase in ("take", "release", "row lock"):
        assert finding["state"] == "held", scenario
        assert [each["pid"] for each in finding["holders"]] == [holder.pid], scenario
        assert f"committed {committed.replace(' here', f' by {HERE}')}" in finding["reason"]
        assert ("row lock" if phase == "row lock" else "not yet committed") in finding["reason"]
    elif phase == "committed take":
        assert finding["state"] == "held" and "another host" in finding["reason"], scenario
        assert finding["holders"] == [], scenario
    else:
        assert finding["state"] == "free", scenario
        assert finding["holders"] == [], scenario


def assert_prepared_holds(server: Server, finding: dict[str, Any], gid: str, scenario: str) -> None:
    """Held by the prepared transaction, by its gid, at least since it was prepared; no
    session is named or ended, and the action advised lets every queued writer through."""
    assert finding["state"] == "held_too_long", scenario
    [holder] = finding["holders"]
    assert holder["pid"] is None and f"prepared transaction '{gid}'" in holder["role"], scenario
    action = finding["action"]["line"]
    assert "pg_terminate_backend" not in action and "kill" not in action, action
    run_advised_rollback(server, action)
    assert wait_until(lambda: blocked_sessions(server) == 0, timeout=10), scenario
