"""How long a table's blocker has held what blocks its writers, on a real PostgreSQL server.

A randomized differential: a root session blocks writers of a table, directly (its
transaction's lock on the table) or through a migration that holds the table and waits for
something the root holds: a row its open transaction changed, or an advisory lock taken on
its session, the session then idle or in a new transaction begun later. The table watch's
figure is an upper bound (`at most`, since a moment): the moment it counts from must not be
later than when the test saw the root's lock taken, or the lock reads younger than it is
(and within a budget it is past). The seed is in the test id: a failure replays with -k SEED.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_postgres_differential import blocked_sessions
from test_postgres_locks import (
    Psql,
    Server,
    check,
    lock_text,
    password_file,
    prepared,
    psql,
    server,
    sessions,
)

from conftest import wait_until

__all__ = ["prepared", "server", "sessions"]  # the fixtures, shared with test_postgres_locks

# What the root takes, and what a migration that holds the table then waits for (none: the
# writers wait for the root's own lock on the table).
ROOTS = {
    "table lock": ("BEGIN; LOCK TABLE {table} IN SHARE MODE;", None),
    "row": (
        "BEGIN; UPDATE {table}_rows SET n = n + 1 WHERE id = 1;",
        "UPDATE {table}_rows SET n = 0 WHERE id = 1",
    ),
    "advisory, idle": ("SELECT pg_advisory_lock({key});", "SELECT pg_advisory_lock({key})"),
    "advisory, new transaction": (
        "SELECT pg_advisory_lock({key});",
        "SELECT pg_advisory_lock({key})",
    ),
}
SEEDS = range(8)
SINCE = "%Y-%m-%dT%H:%M:%SZ"  # reports write moments to the second


@pytest.mark.parametrize("seed", SEEDS)
def test_a_blockers_hold_is_never_read_younger_than_it_is(
    seed: int, server: Server, sessions: list[Psql], tmp_path: Path
) -> None:
    rng = random.Random(seed)
    kind = sorted(ROOTS)[seed % len(ROOTS)]  # every kind, twice
    take, awaited = ROOTS[kind]
    table, key = f"journal_{seed}", 5150 + seed
    with server.admin() as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}, {table}_rows")
        connection.execute(f"CREATE TABLE {table} (id int)")
        connection.execute(f"CREATE TABLE {table}_rows (id int PRIMARY KEY, n int)")
        connection.execute(f"INSERT INTO {table}_rows VALUES (1, 0)")
        connection.execute(f"GRANT ALL ON {table}, {table}_rows TO app")
    root = psql(server, sessions, tcp=rng.random() < 0.5)
    root.run(take.format(table=table, key=key))
    taken = datetime.now(UTC)
    time.sleep(2.2)  # past the reports' one-second precision
    if kind == "advisory, new transaction":
        root.run("BEGIN; SELECT 1;")
    blocked: list[Psql] = []
    if awaited is not None:  # a migration holds the table, and waits for the root
        migration = psql(server, sessions, tcp=rng.random() < 0.5)
        migration.run(
            f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; "
            + awaited.format(table=table, key=key)
            + ";",
            wait=False,
        )
        blocked.append(migration)
        assert wait_until(lambda: blocked_sessions(server) >= 1, timeout=10)
    for _ in range(rng.randint(1, 2)):
        writer = psql(server, sessions, tcp=rng.random() < 0.5)
        writer.run(f"INSERT INTO {table} VALUES (1);", wait=False)
        blocked.append(writer)
        count = len(blocked)
        assert wait_until(lambda n=count: blocked_sessions(server) >= n, timeout=10)

    lock = lock_text(server, f'table = "public.{table}"', tcp=True, extra=password_file(tmp_path))
    _code, finding = check(tmp_path, lock)

    scenario = f"seed {seed}: {kind}, taken {taken:%H:%M:%S.%f}: {finding['reason']}"
    assert finding["state"] == "held", scenario
    assert [each["pid"] for each in finding["holders"]] == [root.pid], scenario
    assert sorted(each["pid"] for each in finding["waiters"]) == sorted(s.pid for s in blocked)
    held = finding["held"]
    assert held["bound"] == "at_most", scenario
    since = datetime.strptime(held["since"], SINCE).replace(tzinfo=UTC)
    assert since <= taken, scenario
    # a lock of the root's transaction counts from its xact_start; a session's cannot
    origin = "backend_start" if kind.startswith("advisory") else "xact_start"
    assert f"(since its {origin})" in finding["reason"], scenario
    assert taken - since < timedelta(seconds=30), scenario
