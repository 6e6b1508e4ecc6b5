"""discover: real held locks (a sqlite3 writer, flock(1), borg) found, judged and configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import MKDIR_HOLDER, Children, cli_env, require_tool, run_cli, wait_until
from factories import capture_host
from lockcheck import kill_group
from lockwarden.cli.discover import discover_locks, layout_candidates, lock_names
from lockwarden.procfs.reader import HostReader, wall_clock


@dataclass
class HeldLocks:
    directory: Path
    database: Path
    flocked: Path
    repository: Path


def start_sqlite_writer(children: Children, database: Path) -> None:
    """An abandoned sqlite3 shell inside BEGIN IMMEDIATE: the RESERVED lock stays taken."""
    sqlite3 = require_tool("sqlite3")
    subprocess.run([sqlite3, str(database), "CREATE TABLE notes(body TEXT);"], check=True)
    shell = children.start([sqlite3, str(database)], stdin=subprocess.PIPE)
    assert shell.stdin is not None and shell.stdout is not None
    shell.stdin.write("BEGIN IMMEDIATE;\nSELECT 'ready';\n")
    shell.stdin.flush()
    assert shell.stdout.readline().strip() == "ready"


def start_borg_lock(directory: Path) -> subprocess.Popen[str]:
    borg = require_tool("borg")
    env = {
        **os.environ,
        "BORG_BASE_DIR": str(directory),
        "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
    }
    repository = directory / "backups" / "repo"
    repository.parent.mkdir()
    subprocess.run(
        [borg, "init", "--encryption=none", str(repository)],
        check=True,
        env=env,
        capture_output=True,
    )
    holder = subprocess.Popen(
        [borg, "with-lock", str(repository), "sleep", "60"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    if not wait_until(lambda: (repository / "lock.roster").exists(), timeout=30):
        kill_group(holder)
        raise AssertionError("borg with-lock did not take the lock")
    return holder


@pytest.fixture
def held_locks(children: Children, tmp_path: Path) -> Iterator[HeldLocks]:
    database = tmp_path / "app" / "notes.db"
    database.parent.mkdir()
    flocked = tmp_path / "jobs" / "nightly.lock"
    flocked.parent.mkdir()
    flocked.touch()
    start_sqlite_writer(children, database)
    flock = require_tool("flock")
    flock_holder = children.start(
        [flock, "-x", str(flocked), "sleep", "60"], start_new_session=True
    )
    key = (os.stat(flocked).st_dev, os.stat(flocked).st_ino)
    assert wait_until(lambda: key in capture_host().locks, timeout=10)
    borg = start_borg_lock(tmp_path)
    try:
        yield HeldLocks(tmp_path, database, flocked, tmp_path / "backups" / "repo")
    finally:
        kill_group(borg)
        kill_group(flock_holder)  # and the sleep that inherited its lock


def test_discover_lists_the_sqlite_writer_the_flock_and_the_borg_lock(
    held_locks: HeldLocks,
) -> None:
    completed = run_cli("discover", "--json", str(held_locks.directory))
    document = json.loads(completed.stdout)
    by_path = {lock["path"]: lock for lock in document["locks"]}

    assert completed.returncode == 0, completed.stderr
    for path in (held_locks.database, held_locks.flocked, held_locks.repository):
        assert by_path[str(path)]["state"] == "held", by_path.get(str(path))
    assert by_path[str(held_locks.repository)]["format"] == "borg"
    assert "kernel lock" in by_path[str(held_locks.flocked)]["found_by"]


def test_written_config_passes_check_config_and_is_never_overwritten_silently(
    held_locks: HeldLocks, tmp_path: Path
) -> None:
    written = tmp_path / "discovered.toml"

    first = run_cli("discover", "--write", str(written), str(held_locks.directory))
    checked = run_cli("check-config", "--config", str(written))
    before = written.read_text()
    refused = run_cli("discover", "--write", str(written), str(held_locks.directory))
    kept = written.read_text()
    forced = run_cli("discover", "--force", "--write", str(written), str(held_locks.directory))

    assert first.returncode == 0, first.stderr
    assert checked.returncode == 0, checked.stderr
    assert written.stat().st_mode & 0o777 == 0o600  # as init writes one: a config holds secrets
    checked_paths = {lock["path"] for lock in tomllib.loads(checked.stdout)["lock"]}
    for path in (held_locks.database, held_locks.flocked, held_locks.repository):
        assert str(path) in checked_paths
    assert refused.returncode == 64 and "--force" in refused.stderr
    assert kept == before
    assert forced.returncode == 0, forced.stderr


def test_walk_never_enters_proc_and_stops_at_its_depth(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / ".#draft.txt").symlink_to("alice@elsewhere.4242")
    (tmp_path / ".#top.txt").symlink_to("alice@elsewhere.4243")

    shallow, _ = layout_candidates([str(tmp_path)], max_depth=1, max_entries=1000)
    full, _ = layout_candidates([str(tmp_path)], max_depth=5, max_entries=1000)
    _, proc_notes = layout_candidates(["/proc"], max_depth=5, max_entries=1000)

    assert [candidate.path for candidate in shallow] == [str(tmp_path / ".#top.txt")]
    assert {candidate.path for candidate in full} == {
        str(tmp_path / ".#top.txt"),
        str(deep / ".#draft.txt"),
    }
    assert proc_notes and "never" in proc_notes[0]


def test_walk_stops_after_its_entry_budget(tmp_path: Path) -> None:
    for number in range(20):
        (tmp_path / f"file{number}").touch()

    _, notes = layout_candidates([str(tmp_path)], max_depth=2, max_entries=5)

    assert any("stopped after 5 entries" in note for note in notes)


def test_lock_names_are_valid_and_unique() -> None:
    names = lock_names(["/srv/app/LOCK", "/srv/app/LOCK", "/home/a b/.#notes.txt", "/"])

    assert names == ["app-LOCK", "app-LOCK-2", "a-b-.-notes.txt", "root"]


def test_discover_locks_judges_a_found_layout(tmp_path: Path) -> None:
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "SingletonLock").symlink_to("another-machine-4242")

    discovery = discover_locks([str(tmp_path)], HostReader(wall_clock), datetime.now(UTC))
    found = {
        candidate.path: finding
        for candidate, finding in zip(discovery.candidates, discovery.findings, strict=True)
    }

    assert found[str(tmp_path / "profile")].format == "chromium-profile"
    assert found[str(tmp_path / "profile")].state.value == "unknown"


def test_discover_finds_a_stores_owner_record_and_judges_it(
    tmp_path: Path, children: Children
) -> None:
    """The README's own layout: a `LOCK` directory whose owner record names a live PID."""
    lock = tmp_path / "srv" / "wa" / "store" / "LOCK"
    lock.parent.mkdir(parents=True)
    taken = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    holder = children.python(MKDIR_HOLDER, str(lock), "maintenance-job", taken.isoformat())
    completed = run_cli("discover", "--json", str(tmp_path / "srv"))
    found = {each["path"]: each for each in json.loads(completed.stdout)["locks"]}
    assert found[str(lock)]["format"] == "owner-record", found
    assert found[str(lock)]["state"] == "held"
    assert found[str(lock)]["holders"][0]["pid"] == holder.pid


def test_a_lock_directory_taken_by_hold_is_configured_as_an_owner_record(
    tmp_path: Path, children: Children
) -> None:
    """A `LOCK` directory `lockwarden hold` holds is in the kernel's lock table (its flock on
    the directory) and was written to the config as a kernel lock: once its holder and COMMAND
    were killed, the directory left behind kept every `hold` out (exit 74, stale) while the
    configured lock read free. Discover now calls it an owner-record, and judged with the
    format discover chose, the killed holder's lock reads stale."""
    lock = tmp_path / "store" / "LOCK"
    lock.parent.mkdir()
    sleeper = "import time; print('ready', flush=True); time.sleep(60)"
    hold = [sys.executable, "-m", "lockwarden", "hold", str(lock), "--role", "job", "--"]
    supervisor = children.start(
        [*hold, sys.executable, "-c", sleeper], ready="ready", env=cli_env()
    )
    found = {
        each["path"]: each for each in json.loads(run_cli("discover", "--json").stdout)["locks"]
    }
    assert (found[str(lock)]["format"], found[str(lock)]["state"]) == ("owner-record", "held")
    command = children.track(
        int(Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text().split()[0])
    )
    supervisor.kill()
    supervisor.wait(timeout=10)
    children.end(command)
    assert wait_until(lambda: not Path(f"/proc/{command}").exists() or _zombie(command))
    judged = run_cli("inspect", "--json", "--format", found[str(lock)]["format"], str(lock))
    assert json.loads(judged.stdout)["locks"][0]["state"] == "stale", judged.stdout
    assert lock.is_dir()  # judged, not removed


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_locked_file_that_holds_no_record_is_configured_as_a_kernel_lock(
    tmp_path: Path, children: Children
) -> None:
    """A database's own file under its flock (MariaDB's ibdata1) was written to the config as
    an owner-record, which once free read 'unknown: the record is not valid UTF-8' at every
    run (a new-user trial); so was a counter a flock guards (`flock counter` around its
    increment), which once free read 'stale: its holder PID 41 is gone', its action `rm` (an
    adversarial review): their kernel lock is what counts. A key=value record its holder wrote
    under its flock (the flock-held owner-record style) stays an owner-record."""
    binary, counter = tmp_path / "data" / "ibdata1", tmp_path / "data" / "counter"
    record = tmp_path / "data" / "job.lock"
    binary.parent.mkdir()
    binary.write_bytes(bytes(range(256)) * 16)
    counter.write_text("41\n")
    flock = require_tool("flock")
    writes_its_record = (  # its own taker: a dead one's lock a PID namespace does not list
        "import fcntl, os, sys, time\n"
        "handle = open(sys.argv[1], 'w')\n"
        "fcntl.flock(handle, fcntl.LOCK_EX)\n"
        "handle.write(f'pid={os.getpid()}\\n'); handle.flush()\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    holders = []
    try:
        for path in (binary, counter):
            holders.append(
                children.start([flock, "-x", str(path), "sleep", "60"], start_new_session=True)
            )
        argv = [sys.executable, "-c", writes_its_record, str(record)]
        holders.append(children.start(argv, "ready", start_new_session=True))
        for path in (binary, counter, record):
            key = (os.stat(path).st_dev, os.stat(path).st_ino)
            assert wait_until(lambda key=key: key in capture_host().locks, timeout=10), path
        completed = run_cli("discover", "--json", str(tmp_path))
    finally:
        for holder in holders:
            kill_group(holder)  # and the sleep that inherited its lock
    assert completed.returncode == 0, completed.stderr
    found = {lock["path"]: lock for lock in json.loads(completed.stdout)["locks"]}
    for path in (binary, counter):
        assert found[str(path)]["format"] == "kernel", found[str(path)]
        assert found[str(path)]["state"] == "held", found[str(path)]
    assert found[str(record)]["format"] == "owner-record", found[str(record)]
    assert found[str(record)]["holders"][0]["pid"] == holders[2].pid, found[str(record)]
