"""The pure classifier as tables: claim + evidence + policy + now -> state, severity, action."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from factories import make_evidence, make_process
from lockwarden.check.classify import Policy, budget_words, classify, grade
from lockwarden.check.identify import Evidence, holder_from_process
from lockwarden.model import (
    Bound,
    Claim,
    Holder,
    KernelLock,
    PidProof,
    Process,
    Severity,
    State,
    Unattributed,
    UnknownCause,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BOOT = NOW - timedelta(days=3)
POLICY = Policy(warn_after=900, critical_after=3600)
KEY = (65024, 77)


def process(
    pid: int = 64969, started: timedelta = timedelta(hours=3), **changes: object
) -> Process:
    base = make_process(
        pid=pid,
        start_ticks=12345,
        uid=1000,
        user="wa",
        cmdline=("node", "resync.js"),
        name="node",
        pid_namespace=4026531836,
        started_at=NOW - started,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def evidence(**changes: object) -> Evidence:
    base = make_evidence(
        boot_id="boot-a",
        hostname="db1.example.org",
        booted_at=BOOT,
        captured_at=NOW,
        pid_namespace=4026531836,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def record(age: timedelta = timedelta(hours=2, minutes=1), **changes: object) -> Claim:
    base = Claim(
        format="owner-record",
        path="/srv/wa/store/LOCK",
        present=True,
        existence_is_lock=True,
        keys=(KEY,),
        pid=64969,
        role="maintenance-job",
        host="db1",
        started_at=NOW - age,
        created_at=NOW - age,
        record_path="/srv/wa/store/LOCK/owner.json",
        remove_path="/srv/wa/store/LOCK",
        owner_uid=1000,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


FLOCK = KernelLock(1, "FLOCK", "WRITE", 500, KEY, 0, None, False)


@pytest.mark.parametrize(
    ("claim", "facts", "state", "severity"),
    [
        (record(present=False), evidence(), State.FREE, Severity.OK),
        (
            record(age=timedelta(minutes=5)),
            evidence(record_process=process()),
            State.HELD,
            Severity.OK,
        ),
        (
            record(age=timedelta(minutes=20)),
            evidence(record_process=process()),
            State.HELD_TOO_LONG,
            Severity.WARNING,
        ),
        (record(), evidence(record_process=process()), State.HELD_TOO_LONG, Severity.CRITICAL),
        (record(), evidence(), State.STALE, Severity.CRITICAL),
        (
            record(),
            evidence(record_process=process(state="Z", threads=1)),
            State.STALE,
            Severity.CRITICAL,
        ),
        (
            record(),
            evidence(record_process=process(state="Z", threads=2)),
            State.HELD_TOO_LONG,
            Severity.CRITICAL,
        ),
        (record(host="web7"), evidence(), State.UNKNOWN, Severity.UNKNOWN),
        # a short name is its qualified host's; two qualified names, one host only when equal
        (record(host="db1.example.org"), evidence(), State.STALE, Severity.CRITICAL),
        (record(host="db1.dc2.example.org"), evidence(), State.UNKNOWN, Severity.UNKNOWN),
        (  # unless the machine id recorded beside it (borg's) is this host's
            record(host="db1.dc2.example.org", pid_proof=PidProof(machine_id=7)),
            evidence(host_node=7),
            State.STALE,
            Severity.CRITICAL,
        ),
        (record(pid_namespace=99), evidence(), State.UNKNOWN, Severity.UNKNOWN),
        (record(), evidence(nested_pid_namespace=True), State.UNKNOWN, Severity.UNKNOWN),
        (record(problem="bad"), evidence(), State.UNKNOWN, Severity.UNKNOWN),
        (
            record(owner_uid=2000),
            evidence(record_process=process()),
            State.UNKNOWN,
            Severity.UNKNOWN,
        ),
        (
            record(boot_id="boot-b"),
            evidence(record_process=process()),
            State.STALE,
            Severity.CRITICAL,
        ),
        (record(start_ticks=1), evidence(record_process=process()), State.STALE, Severity.CRITICAL),
        (
            record(),
            evidence(record_process=process(started=timedelta(minutes=1))),
            State.UNKNOWN,
            Severity.UNKNOWN,
        ),
        (record(pid=None), evidence(), State.UNKNOWN, Severity.UNKNOWN),
        (  # a stepped wall clock can make a lock look older than the boot: no proof
            record(pid=None, created_at=BOOT - timedelta(hours=1)),
            evidence(),
            State.UNKNOWN,
            Severity.UNKNOWN,
        ),
        (
            record(pid=None),
            evidence(openers=(holder_from_process(process()),)),
            State.HELD_TOO_LONG,
            Severity.CRITICAL,
        ),
        (record(existence_is_lock=False), evidence(), State.FREE, Severity.OK),
        (record(existence_is_lock=False), evidence(granted=(FLOCK,)), State.HELD, Severity.OK),
        (record(problem="bad"), evidence(granted=(FLOCK,)), State.HELD, Severity.OK),
    ],
)
def test_classification_table(
    claim: Claim, facts: Evidence, state: State, severity: Severity
) -> None:
    finding = classify("wa-store", claim, facts, POLICY, NOW)
    assert (finding.state, finding.severity) == (state, severity), finding.reason
    assert (finding.proof is not None) == (state is State.STALE)
    assert (finding.unknown_cause is not None) == (state is State.UNKNOWN)


def test_held_too_long_names_the_holder_unit_and_action() -> None:
    running = process(unit="wa-resync.service")
    finding = classify("wa-store", record(), evidence(record_process=running), POLICY, NOW)
    assert finding.reason == (
        "writes to wa-store blocked: PID 64969 (maintenance-job, wa-resync.service) has held "
        "the lock for 2h01m — stop it"
    )
    assert finding.action == "systemctl stop wa-resync.service"
    assert finding.held_for_s == pytest.approx(7260)


def test_user_service_action_targets_the_users_manager() -> None:
    running = process(unit="sync.service", user_unit=True)
    finding = classify("s", record(), evidence(record_process=running), POLICY, NOW)
    assert finding.action == "systemctl --user -M wa@ stop sync.service"


def test_held_duration_is_the_smallest_of_record_age_and_process_age() -> None:
    """A wall clock stepped forward makes the record look older than its holder; the start
    ticks recorded with it prove the holder is the same process, and its running time (monotonic
    since boot) bounds the duration."""
    young = process(started=timedelta(minutes=10))
    claim = record(age=timedelta(minutes=12), start_ticks=young.start_ticks)
    finding = classify("s", claim, evidence(record_process=young), POLICY, NOW)
    assert finding.held_for_s == pytest.approx(600)


def test_stale_action_removes_the_directory_and_proof_says_why() -> None:
    finding = classify("s", record(), evidence(), POLICY, NOW)
    assert finding.action == "rm -r -- /srv/wa/store/LOCK"
    assert finding.proof == (
        "PID 64969 is not running on this host and no process holds a kernel lock on "
        "/srv/wa/store/LOCK"
    )


HIDDEN = Unattributed(
    1,
    0,
    "4 processes' descriptor tables could not be read: reading a more privileged process's "
    "/proc/PID/fdinfo needs CAP_SYS_PTRACE, which lockwarden runs without",
)


def test_kernel_lock_with_hidden_holder_within_budget_is_held_and_names_the_right() -> None:
    taker = process(pid=500, started=timedelta(seconds=30))
    finding = classify(
        "k",
        record(existence_is_lock=False, started_at=None, created_at=None),
        evidence(granted=(FLOCK,), unreadable_pids=4, takers={500: taker}, unattributed=HIDDEN),
        POLICY,
        NOW,
    )
    assert (finding.state, finding.held_bound) == (State.HELD, Bound.AT_MOST)
    assert "CAP_SYS_PTRACE" in finding.reason and "run as root" not in finding.reason


@pytest.mark.parametrize("taker_age", [None, timedelta(hours=2)])
def test_kernel_lock_with_hidden_holder_maybe_past_budget_is_unknown_never_ok(
    taker_age: timedelta | None,
) -> None:
    """Issue 12: a holder that cannot be read is never OK past its budget; the message names
    the missing right, not "run as root"."""
    takers = {} if taker_age is None else {500: process(pid=500, started=taker_age)}
    finding = classify(
        "k",
        record(existence_is_lock=False, started_at=None, created_at=None),
        evidence(granted=(FLOCK,), unreadable_pids=4, takers=takers, unattributed=HIDDEN),
        POLICY,
        NOW,
    )
    assert (finding.state, finding.severity) == (State.UNKNOWN, Severity.UNKNOWN)
    assert finding.unknown_cause is UnknownCause.MISSING_RIGHT
    assert "CAP_SYS_PTRACE" in finding.reason and "run as root" not in finding.reason


def test_incident_identity_is_pid_start_ticks_and_boot() -> None:
    finding = classify("s", record(), evidence(record_process=process()), POLICY, NOW)
    assert finding.identity == "pid:64969:12345:boot-a"
    stale = classify("s", record(), evidence(), POLICY, NOW)
    assert stale.identity == "inode:65024:77:64969"


def test_critical_outranks_unknown_in_the_run_status() -> None:
    from lockwarden.model import worst

    assert worst([Severity.UNKNOWN, Severity.CRITICAL, Severity.OK]) is Severity.CRITICAL
    assert worst([Severity.WARNING, Severity.UNKNOWN]) is Severity.UNKNOWN
    assert worst([]) is Severity.OK


OFD = KernelLock(1, "OFDLCK", "WRITE", -1, KEY, 0, None, False)
TAKER = process(pid=500, started=timedelta(hours=3))
CHILD = holder_from_process(process(pid=501, started=timedelta(hours=2)))
KERNEL = record(existence_is_lock=False, pid=None, role=None, started_at=None, created_at=None)


@pytest.mark.parametrize(
    ("lock", "holders", "takers", "seen_for", "bound", "seconds", "state"),
    [
        # It took the lock itself, some time in its 3 hours: an upper bound, never a page.
        (
            FLOCK,
            (holder_from_process(TAKER),),
            {500: TAKER},
            None,
            Bound.AT_MOST,
            3 * 3600,
            State.HELD,
        ),
        # Seen held by the same holder since a run 20 minutes ago: at least that, a warning.
        (
            FLOCK,
            (holder_from_process(TAKER),),
            {500: TAKER},
            1200,
            Bound.AT_LEAST,
            1200,
            State.HELD_TOO_LONG,
        ),
        # Its taker is gone: it may have taken it before forking the holder or long after, on
        # a descriptor they share (a shell's `flock 9`): nothing bounds it until runs see it.
        (FLOCK, (CHILD,), {500: None}, None, Bound.UNKNOWN, None, State.HELD),
        # An OFD lock records no taker: nothing bounds it until runs have seen it.
        (OFD, (CHILD,), {}, None, Bound.UNKNOWN, None, State.HELD),
    ],
    ids=["own-lock-upper-bound", "seen-since-earlier-run", "taker-gone-unknown", "ofd-unknown"],
)
def test_a_kernel_lock_duration_has_its_bound_and_only_a_lower_bound_pages(
    lock: KernelLock,
    holders: tuple[Holder, ...],
    takers: dict[int, Process | None],
    seen_for: int | None,
    bound: Bound,
    seconds: float | None,
    state: State,
) -> None:
    seen = evidence(granted=(lock,), kernel_holders=holders, takers=takers)
    identity = f"pid:{holders[0].pid}:{holders[0].start_ticks}:boot-a"
    since = {} if seen_for is None else {identity: NOW - timedelta(seconds=seen_for)}
    finding = classify("k", KERNEL, seen, POLICY, NOW, since)
    assert (finding.held_bound, finding.state) == (bound, state)
    assert finding.held_for_s == seconds
    if seconds is not None:
        assert finding.held_since == NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize("bound", list(Bound))
def test_a_zero_budget_is_past_for_any_held_lock_whatever_its_bound(bound: Bound) -> None:
    """0 is a lower bound of every hold: `critical_after = "0"` means any hold pages, even
    when only the holder's running time (an upper bound) or nothing is known."""
    zero = Policy(warn_after=0, critical_after=0)
    for held_for in (None, 0.0, 5.0):
        assert grade(State.HELD, held_for, zero, bound) == (
            State.HELD_TOO_LONG,
            Severity.CRITICAL,
        )


def test_a_running_time_never_reaches_a_positive_budget() -> None:
    assert grade(State.HELD, 10_000.0, POLICY, Bound.AT_MOST) == (State.HELD, Severity.OK)
    assert grade(State.HELD, 10_000.0, POLICY, Bound.AT_LEAST) == (
        State.HELD_TOO_LONG,
        Severity.CRITICAL,
    )


def test_a_hidden_holder_seen_past_its_budget_by_earlier_runs_is_critical_naming_the_right() -> (
    None
):
    """Known from below (the sighting memory) to be held past critical_after: a page, even
    though the holder cannot be named, and the reason still says which right would name it."""
    claim = record(existence_is_lock=False, started_at=None, created_at=None)
    seen = classify(
        "k",
        claim,
        evidence(granted=(FLOCK,), unreadable_pids=4, unattributed=HIDDEN),
        POLICY,
        NOW,
        {"inode:65024:77:64969": NOW - timedelta(hours=2)},
    )
    assert (seen.state, seen.severity, seen.held_bound) == (
        State.HELD_TOO_LONG,
        Severity.CRITICAL,
        Bound.AT_LEAST,
    )
    assert "cannot be named" in seen.reason and "CAP_SYS_PTRACE" in seen.reason, seen.reason


@pytest.mark.parametrize(
    ("seen_ago", "held_for"),
    [(timedelta(minutes=2), 120.0), (timedelta(minutes=14), 180.0)],
)
def test_a_sighting_series_never_dates_a_hold_before_its_holder_started(
    seen_ago: timedelta, held_for: float
) -> None:
    """A series that seems older than its holder (a `--now` run in the past wrote it, or the
    clock stepped back) is capped at the holder's running time: it cannot be about it."""
    taker = process(started=timedelta(minutes=3))
    holder = holder_from_process(taker, "FLOCK")
    claim = record(existence_is_lock=False, pid=None, started_at=None, created_at=None)
    took = FLOCK._replace(pid=taker.pid)  # the holder took it itself: not inherited
    facts = evidence(granted=(took,), kernel_holders=(holder,), takers={taker.pid: taker})
    first = classify("k", claim, facts, POLICY, NOW)
    assert first.identity is not None
    assert (first.held_for_s, first.held_bound) == (180.0, Bound.AT_MOST)
    seen = classify("k", claim, facts, POLICY, NOW, {first.identity: NOW - seen_ago})
    assert (seen.held_for_s, seen.held_bound, seen.state) == (held_for, Bound.AT_LEAST, State.HELD)


@pytest.mark.parametrize(
    ("at_most", "says"),
    [
        (60.0, ", within its 15m00s budget"),  # it cannot have been held longer than a minute
        (899.0, ", within its 15m00s budget"),
        (900.0, ": not yet known to be past its 15m00s budget"),  # it may be past it
        (7200.0, ": not yet known to be past its 15m00s budget"),
        (None, ": not yet known to be past its 15m00s budget"),  # no upper bound at all
    ],
)
def test_within_its_budget_only_when_the_longest_possible_hold_is(
    at_most: float | None, says: str
) -> None:
    assert budget_words(at_most, 900.0).startswith(says)


@pytest.mark.parametrize(
    ("written_after_now", "bound"),
    [(timedelta(seconds=1), Bound.AT_LEAST), (timedelta(hours=1), Bound.AT_MOST)],
    ids=["written-during-the-run", "clock-stepped-back"],
)
def test_a_lock_file_written_a_moment_after_the_runs_clock_is_held_at_least_since_now(
    written_after_now: timedelta, bound: Bound
) -> None:
    """The run's clock is read before the claims: a holder that makes its pidfile anew for
    every job can write it in between (CI saw the holder's running time, an upper bound,
    stand in). A moment after `now` is a write during the run; an hour is a clock stepped
    back, which dates nothing."""
    claim = record(started_at=None, created_at=NOW + written_after_now, role=None)
    finding = classify("job", claim, evidence(record_process=process()), POLICY, NOW)
    assert (finding.state, finding.held_bound) == (State.HELD, bound)
    if bound is Bound.AT_LEAST:
        assert finding.held_for_s == 0
