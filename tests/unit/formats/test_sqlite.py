"""SQLite: real `sqlite3` shells hold real locks (rollback journal and WAL)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import require_tool, run_json
from format_helpers import inspect, start_committing_writer, start_sqlite_shell
from lockwarden.model import State, UnknownCause


def make_database(path: Path, wal: bool = False) -> str:
    sqlite3 = require_tool("sqlite3")
    mode = "PRAGMA journal_mode=WAL;" if wal else ""
    subprocess.run(
        [sqlite3, str(path), f"{mode} CREATE TABLE t(x); INSERT INTO t VALUES (1);"],
        check=True,
        capture_output=True,
    )
    return str(path)


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal"])
def test_abandoned_shell_in_begin_immediate_is_the_named_writer(children, tmp_path, wal):
    """The writer is the primary holder. A reader in a transaction holds it beside the writer
    in a rollback journal (the writer cannot commit past its SHARED); in WAL it only reads."""
    database = make_database(tmp_path / "app.db", wal)
    reader = start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;")
    writer = start_sqlite_shell(children, database, "BEGIN IMMEDIATE;")

    finding = inspect(database, "sqlite")

    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == writer.pid
    assert finding.holder.lock_name == ("WAL write" if wal else "RESERVED"), finding.holder
    assert finding.action is None  # held within its budget: nothing to do yet
    if wal:
        assert [reader_holder.pid for reader_holder in finding.readers] == [reader.pid]
        assert finding.sharers == ()
    else:
        assert [(sharer.pid, sharer.lock_name) for sharer in finding.sharers] == [
            (reader.pid, "SHARED")
        ]
        assert finding.readers == ()
        late = inspect(database, "sqlite", warn_after=0.0, critical_after=0.0)
        assert late.action == f"kill {writer.pid} {reader.pid}", late.reason


def test_wal_readers_alone_leave_it_free_for_writes_and_are_listed(children, tmp_path):
    database = make_database(tmp_path / "app.db", wal=True)
    readers = []
    for _ in range(2):
        reader = start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;")
        readers.append(reader.pid)

    finding = inspect(database, "sqlite")

    assert finding.state is State.FREE, finding.reason
    assert sorted(holder.pid for holder in finding.readers) == sorted(readers)
    assert (finding.holder, finding.sharers) == (None, ())  # only readers


def test_rollback_readers_in_a_transaction_hold_it_against_writers(children, tmp_path):
    """A reader's SHARED lock keeps every writer of a rollback journal from committing (the
    classic "database is locked"): the readers hold it, all of them named, and past its budget
    the action stops every one (one left would still block the commit)."""
    database = make_database(tmp_path / "app.db")
    readers = []
    for _ in range(2):
        reader = start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;")
        readers.append(reader.pid)

    finding = inspect(database, "sqlite")

    assert finding.state is State.HELD, finding.reason
    assert sorted(holder.pid for holder in finding.holders) == sorted(readers)
    assert {holder.lock_name for holder in finding.holders} == {"SHARED"}
    assert "SHARED: POSIX READ on bytes 1073741826-1073742335" in finding.reason, finding.reason
    assert finding.readers == ()
    late = inspect(database, "sqlite", warn_after=0.0, critical_after=0.0)
    assert late.state is State.HELD_TOO_LONG, late.reason
    assert late.action is not None and sorted(late.action.split()[1:]) == sorted(
        str(pid) for pid in readers
    )


def test_a_writer_waiting_in_commit_waits_behind_the_reader_who_holds_it(children, tmp_path):
    """The writer stuck in COMMIT holds PENDING and RESERVED, but it waits (its busy handler
    retries) for the reader's SHARED: the reader is the one in the way, and the writer is
    listed as its waiter, never given the action. inspect, --once and why agree."""
    database = make_database(tmp_path / "app.db")
    reader = start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;")
    writer = start_committing_writer(children, database)

    finding = inspect(database, "sqlite", warn_after=0.0, critical_after=0.0)

    assert [holder.pid for holder in finding.holders] == [reader.pid], finding.reason
    assert finding.holder is not None and finding.holder.lock_name == "SHARED"
    assert [(waiter.pid, waiter.lock_name) for waiter in finding.waiters] == [
        (writer.pid, "PENDING")
    ]
    assert finding.action == f"kill {reader.pid}", finding.reason

    _code, document = run_json("inspect", database)
    [lock] = document["locks"]
    assert [holder["pid"] for holder in lock["holders"]] == [reader.pid], lock
    assert lock["holders"][0]["lock"]["name"] == "SHARED"
    assert [waiter["pid"] for waiter in lock["waiters"]] == [writer.pid], lock
    _code, why = run_json("why", str(writer.pid))
    [candidate] = why["processes"][0]["locked_open"]
    assert candidate["held_by"] == [reader.pid], candidate
    assert candidate["to_free_it"] == f"kill {reader.pid}", candidate


def test_a_hot_journal_of_a_killed_writer_is_free_and_names_nobody(children, tmp_path):
    """A writer killed mid-transaction, its changes spilled into the database, leaves a hot
    journal and no lock: the next connection rolls it back, so the database is free for
    writes; nothing is stale and nobody is named."""
    database = make_database(tmp_path / "app.db")
    writer = start_sqlite_shell(
        children,
        database,
        "PRAGMA cache_size=1;",
        "BEGIN;",
        "INSERT INTO t SELECT randomblob(4000) FROM generate_series(1, 200);",
    )
    assert os.path.getsize(database + "-journal") > 0
    writer.kill()
    writer.wait(timeout=5)

    finding = inspect(database, "sqlite")

    assert finding.state is State.FREE, finding.reason
    assert finding.holders == () and finding.waiters == () and finding.readers == ()
    assert finding.action is None and finding.proof is None
    assert os.path.getsize(database + "-journal") > 0  # lockwarden touched nothing


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal"])
def test_killed_writer_leaves_it_free(children, tmp_path, wal):
    database = make_database(tmp_path / "app.db", wal)
    writer = start_sqlite_shell(children, database, "BEGIN IMMEDIATE;")
    assert inspect(database, "sqlite").state is State.HELD

    writer.kill()
    writer.wait(timeout=5)

    finding = inspect(database, "sqlite")
    assert finding.state is State.FREE, finding.reason
    assert finding.proof is None and finding.action is None


def test_exclusive_writer_counts_as_writer(children, tmp_path):
    database = make_database(tmp_path / "app.db")
    writer = start_sqlite_shell(children, database, "BEGIN EXCLUSIVE;")

    finding = inspect(database, "sqlite")

    assert finding.state is State.HELD
    assert finding.holder is not None and finding.holder.pid == writer.pid
    # named EXCLUSIVE, and shown with the bytes of the lock that is (the kernel may have merged
    # it with PENDING and RESERVED beside it): never a lock that misses the SHARED range
    shared_first, shared_last = 0x40000002, 0x40000002 + 509
    assert finding.holder.lock_name == "EXCLUSIVE"
    start, end = finding.holder.lock_start, finding.holder.lock_end
    assert start is not None and end is not None
    assert start <= shared_first and end >= shared_last, (start, end)


def test_an_exclusive_wal_writer_is_shown_with_its_exclusive_bytes(children, tmp_path):
    """WAL in exclusive locking mode: the writer holds the PENDING byte and the SHARED range
    as two kernel locks; it is named EXCLUSIVE, with the SHARED range's bytes (it was shown
    with the PENDING byte's)."""
    database = make_database(tmp_path / "app.db", wal=True)
    exclusive = ("PRAGMA locking_mode=EXCLUSIVE;", "BEGIN EXCLUSIVE;", "INSERT INTO t VALUES (2);")
    writer = start_sqlite_shell(children, database, *exclusive)

    finding = inspect(database, "sqlite")

    assert finding.holder is not None and finding.holder.pid == writer.pid
    assert finding.holder.lock_name == "EXCLUSIVE"
    assert (finding.holder.lock_start, finding.holder.lock_end) == (0x40000002, 0x40000002 + 509)


def test_auto_picks_sqlite_for_the_database_and_its_wal_files(children, tmp_path):
    database = make_database(tmp_path / "app.db", wal=True)
    writer = start_sqlite_shell(children, database, "BEGIN IMMEDIATE;")

    code, document = run_json("inspect", database)  # the real CLI, once
    lock = document["locks"][0]
    assert lock["format"] == "sqlite", lock
    assert lock["holders"][0]["pid"] == writer.pid
    assert code == 0
    for given in (database + "-wal", database + "-shm"):
        finding = inspect(given)
        assert finding.format == "sqlite"
        assert finding.path == database
        assert finding.holder is not None and finding.holder.pid == writer.pid


def test_auto_picks_sqlite_for_a_plain_database(tmp_path):
    database = make_database(tmp_path / "plain.db")
    finding = inspect(database)
    assert finding.format == "sqlite"
    assert finding.state is State.FREE


def test_a_file_that_is_not_a_database_is_not_read_as_one(tmp_path):
    fake = tmp_path / "fake.db"
    fake.write_bytes(b"SQLite format 2\x00" + b"\x00" * 100)
    finding = inspect(str(fake), "sqlite")
    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.UNREADABLE_RECORD


def test_a_large_database_is_judged_without_reading_it_whole(children, tmp_path):
    """The header read is bounded: a database far past the record limit is still judged."""
    database = make_database(tmp_path / "big.db")
    with open(database, "ab") as handle:
        handle.truncate(os.path.getsize(database) + 64 * 1024 * 1024)  # sparse, 64 MiB
    writer = start_sqlite_shell(children, database, "BEGIN IMMEDIATE;")
    finding = inspect(database)
    assert finding.holder is not None and finding.holder.pid == writer.pid


def test_a_database_that_is_not_there_is_free_and_says_the_path_may_be_wrong(tmp_path):
    """A new user's mistyped path read `free` forever. Nothing can lock a file that is not
    there, so it is free; but a database is not removed when its writer is done, so the reason
    asks whether the path is right."""
    finding = inspect(str(tmp_path / "typo.sqlite"), "sqlite")
    assert finding.state is State.FREE
    assert finding.reason.endswith("is the path right?)"), finding.reason
