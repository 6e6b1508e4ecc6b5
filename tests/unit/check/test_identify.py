"""check/identify.py: what a claim asks of the host (question_for, request_for, pure tables on
factory claims), and who the gathered evidence names for real locks held by real children: the
descriptor owner of a writer lock as holder, a blocked writer as waiter, a reader outside a
format's writer bytes as a reader only. (That gather reads nothing of /proc after the capture
is test_gather.py's.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, wait_until
from factories import KEY, make_claim, make_kernel_lock, make_process
from lockwarden.check.identify import (
    gather,
    holder_from_process,
    is_writer_lock,
    question_for,
    request_for,
)
from lockwarden.model import ByteRange, Claim, PidProof, Workers
from lockwarden.procfs.reader import HostReader, wall_clock

FLOCK_WAITER = """
import fcntl, sys
handle = open(sys.argv[1], "a")
print("ready", flush=True)
fcntl.flock(handle, fcntl.LOCK_EX)
"""

SHARED_POSIX_HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "r")
fcntl.lockf(handle, fcntl.LOCK_SH, 100, 1)  # bytes 1..100
print("ready", flush=True)
time.sleep(120)
"""


def test_a_record_naming_a_pid_asks_for_that_process_and_its_namespace_twins() -> None:
    question = question_for(make_claim(pid_proof=PidProof(others=(4300,), candidates=(4301,))))
    assert question.keys == (KEY,)
    assert question.pids == (4242, 4300, 4301)
    assert (question.twin_pid, question.by_openers) == (4242, False)
    assert (question.workers, question.machine_id) == (None, False)


@pytest.mark.parametrize(
    ("fields", "by_openers"),
    [
        ({"pid": None}, True),  # an existence lock naming nobody: judged by who has it open
        ({"pid": None, "problem": "unreadable"}, False),
        ({"pid": None, "distrust": "world-writable"}, False),
        ({"pid": None, "existence_is_lock": False}, False),
        ({"pid": None, "present": False}, False),
    ],
)
def test_only_a_trusted_present_existence_lock_naming_nobody_asks_for_its_openers(
    fields: dict[str, object], by_openers: bool
) -> None:
    assert question_for(make_claim(**fields)).by_openers is by_openers


def test_a_kernel_style_claim_has_no_namespace_twin_to_ask_for() -> None:
    assert question_for(make_claim(existence_is_lock=False)).twin_pid is None


def test_work_directories_are_asked_for_only_while_the_lock_is_present() -> None:
    workers = Workers(("/srv/repo",), ("git",), ("GIT_DIR",))
    assert question_for(make_claim(workers=workers)).workers == workers
    assert question_for(make_claim(present=False, workers=workers)).workers is None


def test_a_recorded_machine_id_asks_for_this_ones() -> None:
    assert question_for(make_claim(pid_proof=PidProof(machine_id=0x0242AC110002))).machine_id


def test_a_request_carries_one_question_per_claim_and_removals_extras() -> None:
    claims = [make_claim(), make_claim(pid=None, keys=((1, 2),))]
    request = request_for(claims, scan_keys=[(3, 4)], name_hidden=True)
    assert request.locks == tuple(question_for(claim) for claim in claims)
    assert (request.scan_keys, request.name_hidden) == (frozenset({(3, 4)}), True)


@pytest.mark.parametrize(
    ("mode", "start", "end", "writer"),
    [
        ("WRITE", 0, None, True),
        ("WRITE", 120, 130, True),  # overlaps the writer bytes 100..199
        ("WRITE", 300, 310, False),  # outside them
        ("READ", 100, 199, False),  # a reader, whatever its bytes
    ],
)
def test_with_writer_bytes_only_a_write_lock_on_them_blocks_writers(
    mode: str, start: int, end: int | None, writer: bool
) -> None:
    lock = make_kernel_lock(mode=mode, start=start, end=end)
    assert is_writer_lock(lock, make_claim(writer_ranges=(ByteRange(KEY, 100, 199),))) is writer
    assert is_writer_lock(lock, make_claim())  # no writer bytes: any kernel lock blocks


def test_a_holder_is_its_process_with_the_kernel_lock_it_holds() -> None:
    process = make_process(unit="wa-resync.service")
    holder = holder_from_process(process, lock=make_kernel_lock(start=10, end=20))
    assert (holder.pid, holder.unit, holder.started_at) == (
        4242,
        "wa-resync.service",
        process.started_at,
    )
    assert (holder.lock_kind, holder.lock_start, holder.lock_end) == ("FLOCK WRITE", 10, 20)
    assert holder_from_process(process, "open descriptor").lock_kind == "open descriptor"


def kernel_claim(path: Path, **fields: object) -> Claim:
    status = os.stat(path)
    return Claim(
        format="kernel",
        path=str(path),
        present=True,
        existence_is_lock=False,
        keys=((status.st_dev, status.st_ino),),
        **fields,  # type: ignore[arg-type]
    )


def test_a_real_holder_is_named_and_its_blocked_writer_waits(
    tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    waiter = children.python(FLOCK_WAITER, str(lock))
    claim = kernel_claim(lock)
    host = HostReader(wall_clock)

    def evidence_with_waiter():  # type: ignore[no-untyped-def]
        evidence = gather(claim, host.capture(request_for([claim])))
        return evidence if evidence.waiters else None

    assert wait_until(lambda: evidence_with_waiter() is not None)
    evidence = evidence_with_waiter()
    assert [(h.pid, h.lock_kind, h.alive) for h in evidence.kernel_holders] == [
        (holder.pid, "FLOCK WRITE", True)
    ]
    assert [w.pid for w in evidence.waiters] == [waiter.pid]
    assert [lock.pid for lock in evidence.granted] == [holder.pid]
    assert evidence.kernel_locked and evidence.readers == () and evidence.unattributed is None


def test_a_reader_outside_the_writer_bytes_is_a_reader_and_holds_nothing(
    tmp_path: Path, children: Children
) -> None:
    database = tmp_path / "app.db"
    database.write_bytes(b"\0" * 4096)
    reader = children.python(SHARED_POSIX_HOLDER, str(database))
    status = database.stat()
    writer_bytes = ByteRange((status.st_dev, status.st_ino), 1000, 1010)
    claim = kernel_claim(database, writer_ranges=(writer_bytes,))
    evidence = gather(claim, HostReader(wall_clock).capture(request_for([claim])))
    assert evidence.granted == () and evidence.kernel_holders == ()
    assert [(r.pid, r.lock_kind, r.lock_start, r.lock_end) for r in evidence.readers] == [
        (reader.pid, "POSIX READ", 1, 100)
    ]
