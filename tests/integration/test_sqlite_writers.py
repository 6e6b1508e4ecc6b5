"""Who keeps an SQLite writer from committing: a randomized differential of real `sqlite3`
shells and Python sqlite3 connections in random phases (an idle connection, a reader in a
transaction, a writer holding RESERVED or the WAL write lock, a writer waiting in COMMIT, a
writer holding EXCLUSIVE, writers retrying to begin), in a rollback journal or WAL, against
the ground truth the test made: in a rollback journal every reader in a transaction and the
writer holding RESERVED or EXCLUSIVE stand in a new writer's way, and a writer waiting in
COMMIT only waits for the readers; in WAL only the writer does. The real `--once` (a zero
budget, so every holder gets its action) and `why` of each waiting writer must name exactly
those, and never a waiting writer as the one to stop. The seed is in the test id (`-k SEED`);
every process is started by the test and killed by its PID at teardown."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Children, require_tool, run_cli, run_json, wait_until, write_config
from format_helpers import start_committing_writer, start_sqlite_shell

SEEDS = [5, 17, 29, 41, 53]
ROUNDS = 3

# A Python sqlite3 connection (the module, not the shell) in a read transaction.
PYTHON_READER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN")
connection.execute("SELECT count(*) FROM t").fetchall()
print("ready", flush=True)
sys.stdin.readline()
"""


@dataclass
class Scene:
    """What the test started, and the truth it knows about them."""

    wal: bool
    blockers: set[int] = field(default_factory=set)
    """Whose locks keep a new writer from committing, and are themselves not waiting."""
    committing: int | None = None
    """A rollback journal's writer waiting in COMMIT for the readers (it holds PENDING)."""
    retrying: set[int] = field(default_factory=set)
    """Writers whose busy handler retries to begin a write transaction."""
    innocent: set[int] = field(default_factory=set)
    """Idle connections, and WAL readers: they keep no writer from committing."""

    @property
    def waiting_writers(self) -> set[int]:
        return self.retrying | ({self.committing} if self.committing is not None else set())


def make_database(path: Path, wal: bool) -> str:
    sqlite3 = require_tool("sqlite3")
    mode = "PRAGMA journal_mode=WAL;" if wal else ""
    statements = f"{mode} CREATE TABLE t(x); INSERT INTO t VALUES (1);"
    subprocess.run([sqlite3, str(path), statements], check=True, capture_output=True, timeout=30)
    return str(path)


def start_reader(children: Children, database: str, rng: random.Random) -> int:
    if rng.random() < 0.5:
        argv = [sys.executable, "-c", PYTHON_READER, database]
        return children.start(argv, ready="ready", stdin=subprocess.PIPE).pid
    return start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;").pid


def retrying_in_busy_handler(pid: int) -> bool:
    """The test's own view: the shell sleeps between tries (its busy handler's usleep)."""
    return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()


def start_retrying_writer(children: Children, database: str) -> int:
    """A writer whose BEGIN IMMEDIATE retries in its busy handler: it holds no lock that
    stands in anyone's way (a rollback journal's PENDING keeps it from even a SHARED)."""
    writer = start_sqlite_shell(children, database, ".timeout 600000")
    assert writer.stdin is not None
    writer.stdin.write("BEGIN IMMEDIATE;\n")
    writer.stdin.flush()
    assert wait_until(lambda: retrying_in_busy_handler(writer.pid), timeout=10)
    return writer.pid


def stage(children: Children, directory: Path, rng: random.Random) -> tuple[str, Scene]:
    """One random configuration of real connections, started in an order that gets each its
    phase: idle ones first, then readers, then the writer, then those retrying behind it."""
    wal = rng.random() < 0.5
    database = make_database(directory / "app.db", wal)
    scene = Scene(wal)
    writer = rng.choice(["none", "reserved", "exclusive", "committing"])
    if wal and writer == "committing":
        writer = "reserved"  # a WAL writer never waits for readers to commit
    readers = 0 if writer == "exclusive" and not wal else rng.randint(0, 3)
    if writer == "committing":
        readers = max(readers, 1)
    for _ in range(rng.randint(0, 2)):
        idle = start_sqlite_shell(children, database, "SELECT count(*) FROM t;")
        scene.innocent.add(idle.pid)
    for _ in range(readers):
        pid = start_reader(children, database, rng)
        (scene.innocent if wal else scene.blockers).add(pid)
    if writer in ("reserved", "exclusive"):
        begin = "BEGIN IMMEDIATE;" if writer == "reserved" else "BEGIN EXCLUSIVE;"
        statements = [begin, "INSERT INTO t VALUES (2);"] if rng.random() < 0.5 else [begin]
        scene.blockers.add(start_sqlite_shell(children, database, *statements).pid)
    elif writer == "committing":
        scene.committing = start_committing_writer(children, database).pid
    # Behind a writer that holds PENDING (or in WAL) a retrying writer never holds SHARED.
    if writer in ("exclusive", "committing") or (wal and writer != "none"):
        for _ in range(rng.randint(0, 2)):
            scene.retrying.add(start_retrying_writer(children, database))
    return database, scene


def once(directory: Path, database: str) -> tuple[int, dict[str, Any]]:
    """The real `--once`, the database its one lock, every hold past its (zero) budget."""
    config = write_config(
        directory / "config.toml",
        f'[state]\npath = "{directory / "state" / "state.jsonl"}"\n'
        f'[[lock]]\nname = "store"\npath = "{database}"\n'
        'warn_after = "0s"\ncritical_after = "0s"\n',
    )
    completed = run_cli("--once", "--json", "--config", config)
    assert completed.stdout, completed.stderr
    return completed.returncode, json.loads(completed.stdout)


def pids(parties: list[dict[str, Any]]) -> set[int]:
    return {party["pid"] for party in parties}


def check_once(lock: dict[str, Any], scene: Scene, context: str) -> None:
    holders = pids(lock["holders"])
    assert lock["format"] == "sqlite", context
    assert holders == scene.blockers, f"{context}: named {holders}: {lock['reason']}"
    assert not holders & scene.waiting_writers, context
    if not scene.blockers:
        assert lock["state"] == "free", f"{context}: {lock['reason']}"
        return
    assert lock["state"] == "held_too_long", f"{context}: {lock['reason']}"
    argv = lock["action"]["argv"]
    assert argv[0] == "kill" and {int(pid) for pid in argv[1:]} == scene.blockers, context
    if scene.committing is not None:
        waiting = {w["pid"]: w["lock"]["name"] for w in lock["waiters"]}
        assert waiting.get(scene.committing) == "PENDING", f"{context}: {lock['waiters']}"


def check_why(pid: int, scene: Scene, context: str) -> None:
    """`why` of a waiting writer points at exactly the blockers: the candidates its open
    files give (it retries in a loop; the kernel shows no wait)."""
    _code, document = run_json("why", str(pid))
    [process] = document["processes"]
    named = {holder for lock in process["locked_open"] for holder in lock["held_by"]}
    assert named == scene.blockers, f"{context}: why {pid} named {named}: {process}"
    for lock in process["locked_open"]:
        assert lock["to_free_it"] is not None
        assert not set(lock["to_free_it"].split()[1:]) & {str(w) for w in scene.waiting_writers}


@pytest.mark.parametrize("seed", SEEDS)
def test_who_keeps_a_new_sqlite_writer_from_committing(
    seed: int, tmp_path: Path, children: Children
) -> None:
    rng = random.Random(seed)
    for round_number in range(ROUNDS):
        directory = tmp_path / f"round{round_number}"
        directory.mkdir()
        database, scene = stage(children, directory, rng)
        context = f"seed {seed}, round {round_number}, {scene}"
        _code, document = once(directory, database)
        [lock] = [lock for lock in document["locks"] if lock["name"] == "store"]
        check_once(lock, scene, context)
        for pid in sorted(scene.waiting_writers):
            check_why(pid, scene, context)
        children.cleanup()  # each round's processes ended by PID before the next starts


# An SQLite writer as a build with blocking locks (SQLITE_ENABLE_SETLK_TIMEOUT) commits: SHARED,
# RESERVED and PENDING taken, then EXCLUSIVE waited for in the kernel (fcntl F_SETLKW). The
# sqlite3 here retries in its busy handler instead, so the wait is made with the same locks
# on the same bytes by hand.
KERNEL_COMMITTER = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR)
PENDING, RESERVED, SHARED = 1073741824, 1073741825, 1073741826
fcntl.lockf(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB, 510, SHARED)
fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, RESERVED)
fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, PENDING)
print("ready", flush=True)
fcntl.lockf(descriptor, fcntl.LOCK_EX, 510, SHARED)
"""


def test_a_blocked_writer_on_an_unconfigured_database_is_behind_its_reader(
    tmp_path: Path, children: Children
) -> None:
    """A writer blocked in the kernel on the EXCLUSIVE lock of a database nobody configured
    holds PENDING and RESERVED, but waits: the blocked-writer finding names the reader in a
    transaction as the one in the way, and the writer only as the waiter."""
    database = make_database(tmp_path / "app.db", wal=False)
    reader = start_sqlite_shell(children, database, "BEGIN;", "SELECT count(*) FROM t;")
    writer = children.python(KERNEL_COMMITTER, database)
    assert wait_until(lambda: f"-> POSIX  ADVISORY  WRITE {writer.pid} " in locks_text())
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        '[host]\nblocked_after = "30s"\nblocked_critical_after = "1h"\n',
    )
    start = datetime.now(UTC)
    for moment in (start, start + timedelta(minutes=1)):
        completed = run_cli("--once", "--json", "--config", config, "--now", moment.isoformat())
        document = json.loads(completed.stdout)
    [finding] = [lock for lock in document["locks"] if lock["path"] == database]
    assert [holder["pid"] for holder in finding["holders"]] == [reader.pid], finding["reason"]
    assert finding["name"] == f"blocked:{database}" and finding["format"] == "sqlite", finding
    assert [waiter["pid"] for waiter in finding["waiters"]] == [writer.pid], finding
    assert finding["action"]["argv"] == ["kill", str(reader.pid)], finding["action"]


def locks_text() -> str:
    return Path("/proc/locks").read_text()
