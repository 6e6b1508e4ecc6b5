"""The general Claim mechanisms classify applies whatever the format: tables over the pure
stage (no /proc, no clock), so every branch, including the "cannot see" ones, is exercised."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from factories import make_evidence, make_holder, make_process
from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import Evidence, is_writer_lock
from lockwarden.model import (
    ByteRange,
    Claim,
    Finding,
    Holder,
    KernelLock,
    PidProof,
    Process,
    Staleness,
    StaleProof,
    State,
    UnknownCause,
    Workers,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BOOTED = NOW - timedelta(days=1)
KEY = (65024, 42)
# Budgets far away, so a held lock stays `held` whatever its age in these tables.
POLICY = Policy(warn_after=10**9, critical_after=10**9, stale_after=600)


def evidence(**changes: object) -> Evidence:
    return make_evidence(booted_at=BOOTED, captured_at=NOW, **changes)


def process(pid: int, started: datetime, name: str = "tool") -> Process:
    ticks = int((started - BOOTED).total_seconds() * 100)
    return make_process(pid=pid, start_ticks=ticks, cmdline=(name,), name=name, started_at=started)


def holder(pid: int, name: str = "tool") -> Holder:
    return make_holder(pid=pid, name=name, started_at=NOW - timedelta(hours=2))


def existence(**changes: object) -> Claim:
    base = Claim(
        format="test",
        path="/srv/x.lock",
        present=True,
        existence_is_lock=True,
        keys=(KEY,),
        created_at=NOW - timedelta(hours=1),
        remove_path="/srv/x.lock",
        record_path="/srv/x.lock",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def judge(claim: Claim, seen: Evidence, policy: Policy = POLICY) -> tuple[State, str]:
    finding = classify("x", claim, seen, policy, NOW)
    return finding.state, f"{finding.reason} | {finding.proof} | {finding.action}"


def judged(claim: Claim, seen: Evidence) -> Finding:
    return classify("x", claim, seen, POLICY, NOW)


def lock(mode: str, start: int, end: int | None, key: tuple[int, int] = KEY) -> KernelLock:
    return KernelLock(1, "POSIX", mode, 7, key, start, end, False)


SQLITE_RANGES = (ByteRange(KEY, 1073741824, 1073741825), ByteRange(KEY, 1073741826, 1073742335))


@pytest.mark.parametrize(
    ("kernel_lock", "writer"),
    [
        (lock("WRITE", 1073741825, 1073741825), True),  # RESERVED
        (lock("WRITE", 1073741826, 1073742335), True),  # EXCLUSIVE
        (lock("READ", 1073741826, 1073742335), False),  # SHARED: a reader
        (lock("READ", 1073741824, 1073741824), False),  # PENDING read while getting SHARED
        (lock("WRITE", 0, None), True),  # a whole-file write lock covers every range
        (lock("WRITE", 1073741825, 1073741825, (1, 2)), False),  # another file
    ],
)
def test_writer_ranges_tell_writers_from_readers(kernel_lock, writer):
    claim = existence(existence_is_lock=False, writer_ranges=SQLITE_RANGES)
    assert is_writer_lock(kernel_lock, claim) is writer


def test_without_writer_ranges_every_kernel_lock_blocks():
    assert is_writer_lock(lock("READ", 0, None), existence(existence_is_lock=False))


def test_readers_alone_are_free_and_listed():
    claim = existence(existence_is_lock=False, writer_ranges=SQLITE_RANGES)
    finding = classify("db", claim, evidence(readers=(holder(5, "sqlite3"),)), POLICY, NOW)
    assert finding.state is State.FREE
    assert [reader.pid for reader in finding.readers] == [5]
    assert (finding.holder, finding.sharers) == (None, ())  # only readers


NO_OPENER = existence(stale=Staleness(StaleProof.NO_OPENER, "it keeps the file open"))


@pytest.mark.parametrize(
    ("seen", "state"),
    [
        (evidence(openers=(holder(9),)), State.HELD),
        (evidence(), State.STALE),
        (evidence(unreadable_pids=1), State.UNKNOWN),
        (evidence(nested_pid_namespace=True), State.UNKNOWN),
    ],
    ids=["opener", "no-opener", "hidden-descriptors", "container"],
)
def test_no_opener_proof(seen, state):
    assert judge(NO_OPENER, seen)[0] is state


LEFTOVER = existence(
    stale=Staleness(StaleProof.NO_KERNEL_LOCK, "the tool keeps a kernel lock"), host="here"
)


@pytest.mark.parametrize(
    ("claim", "seen", "state"),
    [
        (LEFTOVER, evidence(), State.STALE),
        (replace(LEFTOVER, host="elsewhere"), evidence(), State.UNKNOWN),
        (LEFTOVER, evidence(nested_pid_namespace=True), State.UNKNOWN),
        (
            LEFTOVER,
            evidence(granted=(lock("WRITE", 0, None),), kernel_holders=(holder(3),)),
            State.HELD,
        ),
    ],
    ids=["left-behind", "other-host", "container", "kernel-locked"],
)
def test_no_kernel_lock_proof(claim, seen, state):
    assert judge(claim, seen)[0] is state


WORKED = existence(
    stale=Staleness(StaleProof.NO_WORKER, "the tool removes it"),
    workers=Workers(("/srv/repo",), ("git",)),
)


@pytest.mark.parametrize(
    ("claim", "seen", "state"),
    [
        (WORKED, evidence(workers=(holder(4, "git"),)), State.HELD),
        (WORKED, evidence(), State.STALE),
        (replace(WORKED, created_at=NOW - timedelta(minutes=2)), evidence(), State.UNKNOWN),
        (replace(WORKED, created_at=None), evidence(), State.UNKNOWN),
        (WORKED, evidence(unreadable_cwds=1), State.UNKNOWN),
    ],
    ids=["worker", "old-no-worker", "young-no-worker", "undated", "hidden-cwds"],
)
def test_no_worker_proof_with_age_threshold(claim, seen, state):
    assert judge(claim, seen)[0] is state


def test_a_worker_that_started_after_the_lock_was_written_did_not_take_it():
    late = replace(holder(4, "git"), started_at=NOW - timedelta(minutes=10))
    assert judge(WORKED, evidence(workers=(late,)))[0] is State.STALE
    early = replace(holder(5, "git"), started_at=NOW - timedelta(hours=2))
    finding = judged(WORKED, evidence(workers=(early, late)))
    # a candidate, never the named holder: git records none
    assert finding.state is State.HELD and finding.holder is None
    assert "PID 5 (" in finding.reason and "PID 4 (" not in finding.reason
    assert (finding.sharers, finding.action) == ((), None)


def test_candidate_pids_held_only_by_the_one_that_runs():
    claim = existence(
        pid_proof=PidProof(candidates=(100, 1000, 10000)), started_at=NOW - timedelta(hours=1)
    )
    running = {100: None, 1000: process(1000, NOW - timedelta(hours=2)), 10000: None}
    finding = judged(claim, evidence(candidate_processes=running))
    assert finding.state is State.HELD
    assert finding.holder is not None and (finding.holder.pid, finding.holder.name) == (
        1000,
        "tool",
    )


def test_candidate_pids_all_gone_is_stale():
    claim = existence(
        pid_proof=PidProof(candidates=(100, 1000)), started_at=NOW - timedelta(hours=1)
    )
    state, text = judge(claim, evidence(candidate_processes={100: None, 1000: None}))
    assert state is State.STALE and "100" in text and "1000" in text


def test_candidate_pid_younger_than_the_record_is_unknown_not_stale():
    """One reading is gone, the other runs but started after the lock was made: by wall-clock
    times only, so no proof either way."""
    claim = existence(
        pid_proof=PidProof(candidates=(100, 1000)), started_at=NOW - timedelta(hours=1)
    )
    running = {100: None, 1000: process(1000, NOW - timedelta(minutes=1))}  # started after
    finding = judged(claim, evidence(candidate_processes=running))
    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED


def test_candidate_pids_two_running_is_unknown():
    claim = existence(
        pid_proof=PidProof(candidates=(100, 1000)), started_at=NOW - timedelta(hours=1)
    )
    old = NOW - timedelta(hours=2)
    running = {100: process(100, old), 1000: process(1000, old)}
    assert judge(claim, evidence(candidate_processes=running))[0] is State.UNKNOWN


@pytest.mark.parametrize(
    ("process_started", "state"),
    [
        (NOW - timedelta(hours=1, seconds=1), State.HELD),
        # Started long before or long after the recorded start: by wall-clock times only, so a
        # suspected reuse (unknown, never held), not a proven one.
        (NOW - timedelta(hours=3), State.UNKNOWN),
        (NOW - timedelta(minutes=1), State.UNKNOWN),
    ],
)
def test_recorded_process_start_is_checked_both_ways(process_started, state):
    claim = existence(
        pid=50, started_at=NOW - timedelta(hours=1), pid_proof=PidProof(started_at_is_start=True)
    )
    seen = evidence(record_process=process(50, process_started))
    assert judge(claim, seen)[0] is state


def test_a_recorded_lock_start_only_rules_out_later_processes():
    claim = existence(pid=50, started_at=NOW - timedelta(hours=1))
    seen = evidence(record_process=process(50, NOW - timedelta(hours=3)))
    assert judge(claim, seen)[0] is State.HELD


def test_workers_outlive_a_dead_recorded_holder():
    claim = existence(pid=50, workers=Workers(("/srv/data",), ("postgres",)))
    finding = judged(claim, evidence(workers=(holder(51, "postgres"),)))
    assert finding.state is State.HELD and finding.holder == holder(51, "postgres")


def test_never_remove_keeps_rm_out_of_every_action():
    claim = existence(pid=50, never_remove="the tool locks this file itself")
    finding = classify("x", claim, evidence(), POLICY, NOW)
    assert finding.state is State.STALE
    assert finding.action is None
    assert finding.never_remove == "the tool locks this file itself"
