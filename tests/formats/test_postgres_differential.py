"""A randomized differential for PostgreSQL advisory locks: real psql sessions in random
arrangements (the watched lock held over TCP or the unix socket, by a prepared transaction that
no session holds, or not at all; sessions queued for it; bystanders holding other keys, another
database's Rails key, or the same key in another database of the server), judged by the real
`lockwarden --once` against what the test knows: the holder's client process (a prepared
transaction by its gid, with an action that frees it), every waiter, and `free` when nothing
holds this database's lock. The seed is in the test id: a failure replays with `-k SEED`.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import pytest
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

RAILS = 2053462845
WATCHES = {
    "sqitch": ('advisory_key = "sqitch"', 75474063),
    "rails": ('advisory_key = "rails"', RAILS * zlib.crc32(b"postgres")),
    "key": ("advisory_key = 4242", 4242),
}
SEEDS = range(12)


def other_database_session(server: Server, sessions: list[Psql]) -> Psql:
    """A psql connected to the server's other database (`other`)."""
    with server.admin() as connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = 'other'").fetchone()
        if not exists:
            connection.execute("CREATE DATABASE other")
    session = Psql(server, tcp=False, database="other")
    sessions.append(session)
    return session


def waiting_for(server: Server, key: int) -> int:
    with server.admin() as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND ((classid::int8 << 32) | objid::int8) = %s",
            (key,),
        ).fetchone()
    return int(row[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_advisory_locks_name_exactly_their_holder_and_waiters(
    seed: int, server: Server, sessions: list[Psql], prepared: list[str], tmp_path: Path
) -> None:
    rng = random.Random(seed)
    name = rng.choice(sorted(WATCHES))
    watch, key = WATCHES[name]
    bystanders = rng.sample(["other-key", "other-rails", "other-database"], rng.randint(0, 3))
    for kind in bystanders:
        if kind == "other-database":
            other_database_session(server, sessions).run(f"SELECT pg_advisory_lock({key});")
        else:
            other = key + 1 if kind == "other-key" else RAILS * zlib.crc32(b"blog_production")
            psql(server, sessions, tcp=rng.random() < 0.5).run(f"SELECT pg_advisory_lock({other});")
    holder = None
    gid = None  # the prepared transaction that holds it, when one does
    waiters: list[Psql] = []
    if rng.random() < 0.75:
        if rng.random() < 0.3:
            gid = f"deploy-{seed}"
            prepare(server, prepared, gid, f"SELECT pg_advisory_xact_lock({key})")
        else:
            holder = psql(server, sessions, tcp=rng.random() < 0.5)
            holder.run(f"SELECT pg_advisory_lock({key});")
        for number in range(rng.randint(0, 2)):
            waiter = psql(server, sessions, tcp=rng.random() < 0.5)
            waiter.run(f"SELECT pg_advisory_lock({key});", wait=False)
            waiters.append(waiter)
            assert wait_until(lambda n=number + 1: waiting_for(server, key) == n, timeout=10)

    lock = lock_text(server, watch, tcp=True, extra=password_file(tmp_path))
    # An hour on: a prepared transaction's hold is known from when it was prepared
    _code, finding = check(tmp_path, lock, minutes=60 if gid else 0)

    scenario = f"{name}, bystanders {bystanders}, holder {holder or gid}, {len(waiters)} waiting"
    assert sorted(each["pid"] for each in finding["waiters"]) == sorted(w.pid for w in waiters)
    if gid is not None:
        assert_prepared_holds(server, finding, gid, waiters, scenario)
        return
    if holder is None:
        assert finding["state"] == "free", f"{scenario}: {finding['reason']}"
        return
    assert finding["state"] == "held", f"{scenario}: {finding['reason']}"
    assert [each["pid"] for each in finding["holders"]] == [holder.pid], scenario


def assert_prepared_holds(
    server: Server, finding: dict[str, Any], gid: str, waiters: list[Psql], scenario: str
) -> None:
    """Held by the prepared transaction, by its gid, at least since it was prepared; no
    session is named or ended, and the action advised frees the lock for the waiters."""
    assert finding["state"] == "held_too_long", f"{scenario}: {finding['reason']}"
    assert finding["held"]["bound"] == "at_least", scenario
    [holder] = finding["holders"]
    assert holder["pid"] is None and f"prepared transaction '{gid}'" in holder["role"], holder
    action = finding["action"]["line"]
    assert "pg_terminate_backend" not in action and "kill" not in action, action
    run_advised_rollback(server, action)
    assert wait_until(lambda: blocked_sessions(server) == max(len(waiters) - 1, 0), timeout=10)


def blocked_sessions(server: Server) -> int:
    with server.admin() as connection:
        row = connection.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    return int(row[0])


@pytest.mark.parametrize("seed", range(6))
def test_table_locks_name_the_root_of_the_wait_graph_and_every_queued_writer(
    seed: int, server: Server, sessions: list[Psql], prepared: list[str], tmp_path: Path
) -> None:
    """An idle transaction that read the table (or a prepared one, which no session holds);
    then, in a random order, a migration's ALTER TABLE (which waits for it), INSERTs (which
    wait behind the ALTER once it queues, or go through before it) and SELECTs (readers, never
    listed as blocked writers). The holder is always the idle session (the prepared
    transaction, by its gid); the waiters are exactly the writers that are blocked."""
    rng = random.Random(seed)
    table = f"ledger_{seed}"
    with server.admin() as connection:
        connection.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int)")
        connection.execute(f"GRANT ALL ON {table} TO app")
        connection.execute(f"ALTER TABLE {table} OWNER TO app")
    gid = f"report-{seed}" if rng.random() < 0.4 else None
    if gid is not None:
        prepare(server, prepared, gid, f"SELECT count(*) FROM {table}")
    else:
        idle = psql(server, sessions, tcp=rng.random() < 0.5)
        idle.run(f"BEGIN; SELECT count(*) FROM {table};")
    steps = ["alter", *["insert"] * rng.randint(1, 3), *["select"] * rng.randint(0, 2)]
    rng.shuffle(steps)
    blocked: list[Psql] = []  # the writers that wait, in the order they queued
    queued = 0  # every session that waits, readers too
    altered = False
    for step in steps:
        session = psql(server, sessions, tcp=rng.random() < 0.5)
        statement = {
            "alter": f"ALTER TABLE {table} ADD COLUMN note_{seed} text;",
            "insert": f"INSERT INTO {table} (id) VALUES (1);",
            "select": f"SELECT count(*) FROM {table};",
        }[step]
        altered = altered or step == "alter"
        if not altered:  # nothing queued yet: it goes through at once
            session.run(statement)
            continue
        session.run(statement, wait=False)
        queued += 1
        if step != "select":
            blocked.append(session)
        assert wait_until(lambda count=queued: blocked_sessions(server) >= count, timeout=10)
    lock = lock_text(server, f'table = "public.{table}"', tcp=True, extra=password_file(tmp_path))
    _code, finding = check(tmp_path, lock, minutes=60 if gid else 0)

    assert [each["pid"] for each in finding["waiters"]] == [w.pid for w in blocked], steps
    if gid is not None:
        assert finding["state"] == "held_too_long", finding["reason"]
        [holder] = finding["holders"]
        assert holder["pid"] is None and f"prepared transaction '{gid}'" in holder["role"]
        action = finding["action"]["line"]
        assert "pg_terminate_backend" not in action and "kill" not in action, action
        run_advised_rollback(server, action)
        assert wait_until(lambda: blocked_sessions(server) == 0, timeout=10), steps
        return
    assert finding["state"] == "held", finding["reason"]
    assert [each["pid"] for each in finding["holders"]] == [idle.pid], finding["reason"]
