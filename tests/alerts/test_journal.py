"""The journal's durability rules, each on real files (and a real tiny tmpfs for ENOSPC)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from lockwarden.state.journal import (
    Journal,
    RunBusy,
    RunLock,
    StateError,
    check_state_dir,
    default_state_path,
    encode,
)
from lockwarden.state.records import JournalRecord, RunRecord, SeenEntry, SeenRecord, to_json
from lockwarden.state.run_state import RunState
from lockwarden.support.durations import parse_time

from .helpers import SRC, require_tool

A, B, C, D = (f"2026-12-02T09:0{minute}:00Z" for minute in range(4))
AFTER = "2026-12-02T11:00:00Z"


def run(at: str) -> RunRecord:
    """A `run` record at an RFC 3339 moment, as a run writes one."""
    moment = parse_time(at)
    assert moment is not None
    return RunRecord(moment)


def nth(number: int) -> str:
    """The moment of the number-th of a series of runs, a second apart."""
    return f"2026-12-02T10:{number // 60:02d}:{number % 60:02d}Z"


def at_of(record: JournalRecord) -> str:
    return str(to_json(record)["at"])


def state_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    return directory


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_append_writes_one_json_line_per_record(tmp_path: Path) -> None:
    journal = Journal(str(state_dir(tmp_path) / "state.jsonl"))
    journal.append(run(A))
    journal.append(run(B))
    journal.close()
    written = lines(tmp_path / "state" / "state.jsonl")
    assert [json.loads(line)["at"] for line in written] == [
        "2026-12-02T09:00:00Z",
        "2026-12-02T09:01:00Z",
    ]
    assert os.stat(tmp_path / "state" / "state.jsonl").st_mode & 0o777 == 0o600


def test_each_record_is_one_write_then_fsync_and_the_new_file_dir_is_fsynced(
    tmp_path: Path,
) -> None:
    """strace (Debian's) shows the syscalls: O_APPEND open, dir fsync after create, and per
    record exactly one write() of the whole line followed by fsync()."""
    strace = require_tool("strace")
    path = state_dir(tmp_path) / "state.jsonl"
    program = textwrap.dedent(
        f"""
        from datetime import datetime
        from lockwarden.state.journal import Journal
        from lockwarden.state.records import RunRecord
        journal = Journal({str(path)!r})
        journal.append(RunRecord(datetime.fromisoformat({A!r})))
        journal.append(RunRecord(datetime.fromisoformat({B!r})))
        """
    )
    trace = subprocess.run(
        [
            strace,
            "-f",
            "-s",
            "4096",
            "-e",
            "trace=openat,write,fsync",
            sys.executable,
            "-c",
            program,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        check=True,
    ).stderr
    calls = [line for line in trace.splitlines() if re.search(r"(openat|write|fsync)\(", line)]
    journal_fd = next(
        re.search(r"= (\d+)$", line).group(1)  # type: ignore[union-attr]
        for line in calls
        if "state.jsonl" in line and "O_APPEND" in line
    )
    mine = [line for line in calls if re.search(rf"\((\s*){journal_fd}[,)]", line)]
    writes = [line for line in mine if "write(" in line]
    assert len(writes) == 2
    lengths = [re.search(r", (\d+)\) += (\d+)$", line) for line in writes]
    assert all(m is not None and m.group(1) == m.group(2) for m in lengths), writes
    assert all('}\\n", ' in line for line in writes)  # each write() is one whole record line
    assert [("write" if "write(" in line else "fsync") for line in mine] == [
        "write",
        "fsync",
        "write",
        "fsync",
    ]
    directory_open = [line for line in calls if "O_DIRECTORY" in line and str(path.parent) in line]
    assert directory_open, "the state directory was not fsynced after creating the journal"


def test_torn_last_line_is_ignored_then_cut_before_appending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = state_dir(tmp_path) / "state.jsonl"
    path.write_bytes(
        f'{{"type":"run","at":"{A}","locks":{{}}}}\n{{"type":"run","at":"{B}","lo'.encode()
    )
    journal = Journal(str(path))
    with caplog.at_level(logging.WARNING):
        loaded = journal.load()
    assert [at_of(record) for record in loaded.records] == [A]
    assert "torn" in caplog.text
    journal.append(run(C))
    journal.close()
    assert [json.loads(line)["at"] for line in lines(path)] == [A, C]


def test_an_append_after_compacting_a_torn_journal_is_not_cut_at_the_old_tear(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tear's offset belongs to the file compaction replaced: an append after compaction
    (the sighting memory compacts before the alert stage appends) must not cut the new file
    there, padding it with zero bytes and gluing the record into an unreadable line."""
    path = state_dir(tmp_path) / "state.jsonl"
    whole = "".join(f'{{"type":"run","at":"{nth(n)}","locks":{{}}}}\n' for n in range(20))
    path.write_bytes(f'{whole}{{"type":"run","at":"{B}","lo'.encode())
    journal = Journal(str(path))
    journal.compact(lambda records: records[-1:])
    journal.append(run(C))
    journal.close()
    assert b"\0" not in path.read_bytes()
    caplog.clear()  # the tear was said when compaction loaded the old file
    with caplog.at_level(logging.WARNING):
        assert [at_of(record) for record in Journal(str(path)).load().records] == [nth(19), C]
    assert caplog.text == ""


def test_corrupt_middle_line_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = state_dir(tmp_path) / "state.jsonl"
    path.write_bytes(
        f'{{"type":"run","at":"{A}","locks":{{}}}}\n'.encode()
        + b"\x00\xffgarbage{\n[1,2]\n"
        + f'{{"type":"run","at":"{D}","locks":{{}}}}\n'.encode()
    )
    with caplog.at_level(logging.WARNING):
        loaded = Journal(str(path)).load()
    assert [at_of(record) for record in loaded.records] == [A, D]
    assert "line 2 is not a journal record" in caplog.text
    assert "line 3 is not a journal record" in caplog.text


def test_missing_journal_is_empty(tmp_path: Path) -> None:
    assert Journal(str(state_dir(tmp_path) / "state.jsonl")).load().records == []


def test_missing_state_dir_is_made_0700_when_only_its_last_part_is_missing(
    tmp_path: Path,
) -> None:
    journal = Journal(str(tmp_path / "fresh" / "state.jsonl"))
    journal.append(run(A))
    journal.close()
    assert os.stat(tmp_path / "fresh").st_mode & 0o777 == 0o700


def test_state_dir_with_missing_parent_is_a_state_error(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "no" / "such" / "state.jsonl"))
    with pytest.raises(StateError, match="does not exist"):
        journal.append(run(A))
    assert not (tmp_path / "no").exists()


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = state_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(StateError, match="symlink"):
        Journal(str(link / "state.jsonl")).append(run(A))
    assert list(real.iterdir()) == []


def test_world_writable_state_dir_is_refused(tmp_path: Path) -> None:
    directory = state_dir(tmp_path)
    directory.chmod(0o777)
    with pytest.raises(StateError, match="writable by every user"):
        check_state_dir(str(directory))
    with pytest.raises(StateError):
        RunLock.acquire(str(directory))


def test_enospc_leaves_no_partial_record(tiny_tmpfs: Path) -> None:
    """A real 64 KiB tmpfs filled to the brim: the append fails with StateError, and the
    journal on disk holds only whole records."""
    directory = tiny_tmpfs / "state"
    directory.mkdir(mode=0o700)
    journal = Journal(str(directory / "state.jsonl"))
    journal.append(run(A))
    filler = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(filler, b"x" * 4096)
    finally:
        os.close(filler)
    big = RunRecord(run(B).at, {"y" * 20000: ("stale", None)})
    with pytest.raises(StateError, match=r"short write|No space left"):
        journal.append(big)
    journal.close()
    assert [at_of(record) for record in Journal(journal.path).load().records] == [A]
    assert (directory / "state.jsonl").read_bytes().endswith(b"\n")


def test_compaction_rewrites_atomically_and_keeps_what_it_is_told(tmp_path: Path) -> None:
    path = state_dir(tmp_path) / "state.jsonl"
    journal = Journal(str(path), max_bytes=2000)
    (path.parent / ".state.jsonl.compact-99999").write_text("left by a run killed mid-compaction")
    for number in range(100):
        journal.append(run(nth(number)))
    assert journal.needs_compaction()
    dropped = journal.compact(lambda records: records[-10:])
    assert dropped == 90
    assert [json.loads(line)["at"] for line in lines(path)] == [nth(n) for n in range(90, 100)]
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.jsonl"]
    assert not journal.needs_compaction()
    journal.append(run(AFTER))
    journal.close()
    assert json.loads(lines(path)[-1])["at"] == AFTER


def test_run_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    directory = state_dir(tmp_path)
    first = RunLock.acquire(str(directory))
    try:
        with pytest.raises(RunBusy) as busy:
            RunLock.acquire(str(directory))
        assert busy.value.pid == os.getpid()
        assert f"PID {os.getpid()}" in str(busy.value)
    finally:
        first.release()
    RunLock.acquire(str(directory)).release()


@pytest.mark.parametrize(
    ("euid", "environ", "expected"),
    [
        (0, {}, "/var/lib/lockwarden/state.jsonl"),
        (1000, {"XDG_STATE_HOME": "/x/state"}, "/x/state/lockwarden/state.jsonl"),
        (1000, {}, "/home/u/.local/state/lockwarden/state.jsonl"),
    ],
)
def test_default_state_path(euid: int, environ: dict[str, str], expected: str) -> None:
    assert default_state_path(euid, environ, home="/home/u") == expected


def test_a_users_default_state_directory_is_made_with_its_missing_xdg_parents() -> None:
    """A new account has no ~/.local/state yet: its first run makes it (mode 0700, as the XDG
    spec says), instead of reporting its state unusable. A forked child takes the user's
    effective uid (the test runs as root in CI; as another user it runs as that user). The
    home is under /tmp, which that user can reach (pytest's own directories are root's)."""
    home = Path(tempfile.mkdtemp(prefix="lockwarden-home-"))
    try:
        nobody = 65534 if os.geteuid() == 0 else os.geteuid()
        if os.geteuid() == 0:
            os.chown(home, nobody, nobody)
        state_home = home / ".local" / "state"
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's outcome is its exit status
            code = 1
            try:
                os.environ["XDG_STATE_HOME"] = str(state_home)
                if os.geteuid() == 0:
                    os.setegid(nobody)
                    os.seteuid(nobody)
                check_state_dir(os.path.dirname(default_state_path()))
                code = 0
            finally:
                os._exit(code)
        _pid, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        made = state_home / "lockwarden"
        assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
        assert (state_home.stat().st_mode & 0o777) == 0o700
        assert state_home.stat().st_uid == nobody
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_compaction_syscalls_are_temp_file_fsync_rename_then_directory_fsync(
    tmp_path: Path,
) -> None:
    """strace shows the order that makes compaction crash-safe: the new file is written and
    fsynced in the same directory, renamed over the journal, then the directory is fsynced."""
    strace = require_tool("strace")
    path = state_dir(tmp_path) / "state.jsonl"
    path.write_text("".join(f'{{"type":"run","at":"{nth(n)}","locks":{{}}}}\n' for n in range(50)))
    program = textwrap.dedent(
        f"""
        from lockwarden.state.journal import Journal
        Journal({str(path)!r}, max_bytes=100).compact(lambda records: records[-3:])
        """
    )
    trace = subprocess.run(
        [strace, "-f", "-e", "trace=openat,fsync,rename,close", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        check=True,
    ).stderr
    steps = []
    descriptors: dict[str, str] = {}
    for line in trace.splitlines():
        opened = re.search(r'openat\(.*"([^"]+)".*= (\d+)$', line)
        if opened and str(path.parent) in opened.group(1):
            name = "dir" if "O_DIRECTORY" in line else Path(opened.group(1)).name
            descriptors[opened.group(2)] = name
        synced = re.search(r"fsync\((\d+)\)", line)
        if synced and synced.group(1) in descriptors:
            steps.append(f"fsync {descriptors[synced.group(1)]}")
        if "rename(" in line:
            steps.append("rename")
    assert len(steps) == 3 and steps[0].startswith("fsync .state.jsonl.compact-"), steps
    assert steps[1:] == ["rename", "fsync dir"]
    assert len(lines(path)) == 3


def test_old_sighting_records_a_full_disk_cannot_compact_away_stay_and_the_memory_is_saved(
    tiny_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal an earlier version filled with `seen` records, on a real 64 KiB tmpfs with
    room for the new sighting file but not for the journal's rewrite (a 12 KB run record it
    must keep): the memory is saved
    (seen.json), the failed compaction is said at warning, and the journal stays as it was."""
    directory = tiny_tmpfs / "state"
    directory.mkdir(mode=0o700)
    journal = directory / "state.jsonl"
    at = parse_time(A)
    assert at is not None
    old = SeenRecord(at, {"k": SeenEntry("pid:7:1:b", at)})
    kept = RunRecord(at, {"y" * 12_000: ("stale", None)})  # what a rewrite must keep
    journal.write_bytes(encode(kept) + encode(old) * (20_000 // len(encode(old))))
    filler = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:  # leave ~4 KiB free: a sighting file fits, a 20 KB journal's rewrite does not
        while os.statvfs(tiny_tmpfs).f_bavail * os.statvfs(tiny_tmpfs).f_frsize > 8192:
            os.write(filler, b"x" * 4096)
    finally:
        os.close(filler)
    before = journal.read_bytes()
    state = RunState.open(str(journal))
    assert state.seen is None and len(state.records) == len(before.splitlines())
    new = SeenRecord(at + timedelta(minutes=1), {"k": SeenEntry("pid:7:1:b", at)})
    with caplog.at_level(logging.WARNING):
        assert state.replace_seen(new, durable=False) is None  # saved: no problem to say
    state.close()
    assert (directory / "seen.json").read_bytes() == encode(new)
    assert "cannot compact" in caplog.text and "old sighting records stay" in caplog.text
    assert journal.read_bytes() == before
    assert sorted(os.listdir(directory)) == ["run.lock", "seen.json", "state.jsonl"]
