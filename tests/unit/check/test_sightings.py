"""The sighting memory of kernel locks as tables: what a run may count on, what it writes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from lockwarden.check import sightings
from lockwarden.model import (
    Bound,
    Descendant,
    Finding,
    Held,
    LeftWork,
    Party,
    Severity,
    State,
    UnknownCause,
)
from lockwarden.state.records import JournalRecord, SeenRecord, from_json, to_json
from lockwarden.support.durations import format_time

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
FIRST = NOW - timedelta(minutes=7)
HOLDER = "pid:4242:1000:boot-a"


def seen(at: datetime, **locks: tuple[str, datetime]) -> JournalRecord:
    """A `seen` record as the journal stores it, read back as a typed record."""
    entries = {name: [identity, format_time(since)] for name, (identity, since) in locks.items()}
    return from_json({"type": "seen", "at": format_time(at), "locks": entries})


def stored(record: SeenRecord) -> dict[str, object]:
    """The `locks` of a record as the journal stores them."""
    locks = to_json(record)["locks"]
    assert isinstance(locks, dict)
    return locks


def finding(state: State = State.HELD, bound: Bound = Bound.AT_MOST, **changes: object) -> Finding:
    base = Finding(
        name="store",
        path="/srv/store.lock",
        format="kernel",
        state=state,
        severity=Severity.OK,
        reason="held",
        held=Held(bound=bound),
        identity=HOLDER,
        key=(65024, 77),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("last_at", "gap", "remembered"),
    [
        (NOW - timedelta(minutes=1), 180.0, {"store": {HOLDER: FIRST}}),  # the run before
        (NOW - timedelta(minutes=4), 180.0, {}),  # too long ago: may have been released
        (NOW + timedelta(minutes=1), 180.0, {}),  # a clock stepped back: proves nothing
    ],
)
def test_memory_counts_only_an_unbroken_recent_series(
    last_at: datetime, gap: float, remembered: dict[str, dict[str, datetime]]
) -> None:
    latest = sightings.last_seen([seen(last_at, store=(HOLDER, FIRST))])
    assert sightings.memory(latest, NOW, {"store": gap}).series == remembered


def test_only_the_latest_seen_record_counts() -> None:
    records = [
        seen(FIRST, store=(HOLDER, FIRST)),
        seen(NOW - timedelta(minutes=1)),  # a run that saw it free ended the series
        from_json({"type": "run", "at": format_time(NOW), "locks": {}}),
    ]
    latest = sightings.last_seen(records)
    assert latest is not None and latest.locks == {}
    assert sightings.memory(latest, NOW, {"store": 900.0}).series == {}


def test_a_run_carries_the_series_start_for_the_same_holder_and_restarts_for_another() -> None:
    remembered = sightings.Memory({"store": {HOLDER: FIRST}})
    same = sightings.sightings_of([finding()], remembered, NOW)
    other = sightings.sightings_of([finding(identity="pid:9:1:boot-a")], remembered, NOW)
    assert stored(same) == {"store": [HOLDER, format_time(FIRST)]}
    assert stored(other) == {"store": ["pid:9:1:boot-a", format_time(NOW)]}


@pytest.mark.parametrize(
    ("state", "bound", "recorded"),
    [
        (State.HELD, Bound.AT_MOST, True),
        (State.HELD_TOO_LONG, Bound.AT_LEAST, True),
        (State.UNKNOWN, Bound.UNKNOWN, True),  # a holder that cannot be read
        (State.HELD, Bound.EXACT, False),  # a dated record needs no memory
        (State.FREE, Bound.UNKNOWN, False),
        (State.STALE, Bound.EXACT, False),
    ],
)
def test_only_undated_holds_are_remembered(state: State, bound: Bound, recorded: bool) -> None:
    record = sightings.sightings_of([finding(state, bound)], sightings.Memory(), NOW)
    assert bool(stored(record)) is recorded


def test_a_run_that_could_not_look_carries_the_series_from_its_last_sighting() -> None:
    """A database that did not answer, a hung mount: the lock is unknown and names no holder.
    That run neither restarts the count of a lock held for hours nor ends it (which would
    resolve its incident next run), and the gap is still counted from the last sighting."""
    before = NOW - timedelta(minutes=1)
    latest = sightings.last_seen([seen(before, store=(HOLDER, FIRST))])
    remembered = sightings.memory(latest, NOW, {"store": 180.0})
    blind = finding(State.UNKNOWN, Bound.UNKNOWN, identity=None, key=None)
    record = sightings.sightings_of([blind], remembered, NOW, latest)
    assert stored(record) == {"store": [HOLDER, format_time(FIRST), format_time(before)]}
    carried = sightings.last_seen([record])
    later = NOW + timedelta(minutes=1)  # two minutes after the holder was last seen
    assert sightings.memory(carried, later, {"store": 180.0}).series == {"store": {HOLDER: FIRST}}
    # a budget under two minutes (gap 90 s) survives the one run that missed it too...
    assert sightings.memory(carried, later, {"store": 90.0}).series == {"store": {HOLDER: FIRST}}
    # ...but not a longer outage: four minutes since the holder was last seen
    assert sightings.memory(carried, NOW + timedelta(minutes=3), {"store": 90.0}).series == {}
    assert sightings.memory(carried, NOW + timedelta(minutes=3), {"store": 600.0}).series != {}
    again = sightings.sightings_of(
        [finding()], sightings.Memory({"store": {HOLDER: FIRST}}), later, carried
    )
    assert stored(again) == {"store": [HOLDER, format_time(FIRST)]}  # seen again: continued


@pytest.mark.parametrize(
    "looked",
    [
        finding(State.FREE, Bound.UNKNOWN, identity=None, key=None),  # seen free: it ends
        finding(State.UNKNOWN, Bound.UNKNOWN, identity="pid:9:1:boot-a"),  # another holder
        # looked, and no live holder is named (its files changed at every look of the run:
        # holders letting go as others take it): the earlier holder's series ends
        finding(State.UNKNOWN, Bound.UNKNOWN, identity=None, unknown_cause=UnknownCause.UNPROVEN),
    ],
    ids=["free", "unknown-other-holder", "unknown-unproven"],
)
def test_a_run_that_did_look_carries_nothing(looked: Finding) -> None:
    before = NOW - timedelta(minutes=1)
    latest = sightings.last_seen([seen(before, store=(HOLDER, FIRST))])
    remembered = sightings.memory(latest, NOW, {"store": 180.0})
    record = sightings.sightings_of([looked], remembered, NOW, latest)
    assert [entry[0] for entry in stored(record).values()] == (
        [] if looked.identity is None else [looked.identity]
    )
    assert all(len(entry) == 2 for entry in stored(record).values())


def test_a_series_past_its_gap_is_not_carried() -> None:
    long_ago = NOW - timedelta(minutes=10)
    latest = sightings.last_seen([seen(long_ago, store=(HOLDER, FIRST))])
    remembered = sightings.memory(latest, NOW, {"store": 180.0})
    blind = finding(State.UNKNOWN, Bound.UNKNOWN, identity=None, key=None)
    assert stored(sightings.sightings_of([blind], remembered, NOW, latest)) == {}


def test_a_quiet_run_writes_one_empty_record_to_end_a_series_and_then_nothing() -> None:
    empty = sightings.sightings_of([], sightings.Memory(), NOW)
    assert sightings.worth_writing(empty, sightings.last_seen([seen(FIRST, store=(HOLDER, FIRST))]))
    assert not sightings.worth_writing(empty, sightings.last_seen([seen(FIRST)]))
    assert not sightings.worth_writing(empty, None)


def test_compaction_keeps_only_the_latest_seen_record() -> None:
    records = [
        seen(FIRST),
        from_json({"type": "run", "at": format_time(NOW), "locks": {}}),
        seen(NOW),
    ]
    assert sightings.keep_latest_seen(records) == records[1:]


@pytest.mark.parametrize(
    ("warn_after", "longest"),
    [(1.0, sightings.RUN_INTERVAL_ALLOWANCE), (30.0, 90.0), (900.0, 900.0)],
)
def test_a_budget_shorter_than_the_runs_interval_still_lets_a_series_continue(
    warn_after: float, longest: float
) -> None:
    """Minutely runs (up to 10 s late) with warn_after = "30s": each run must continue the
    series, or a flock held for hours would never escalate."""
    assert sightings.longest_gap(warn_after) == longest
    before = NOW - timedelta(seconds=70)
    latest = sightings.LastSeen(before, {"store": sightings.Series("pid:1", before, before)})
    remembered = sightings.memory(latest, NOW, {"store": sightings.longest_gap(warn_after)})
    assert remembered.series == {"store": {"pid:1": before}}


def test_only_a_record_naming_a_database_session_outlives_the_boot() -> None:
    """journal.py fsyncs a `seen` record only when a lock in it can outlive this host's crash."""
    at = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    kernel = sightings.sightings_of(
        [finding(identity="pid:42:1234:boot", key=(1, 2))], sightings.Memory(), at
    )
    session = sightings.sightings_of(
        [
            finding(identity="pg-backend:7:1"),
            finding(name="other", identity="pid:42:1234:boot", key=(1, 2)),
        ],
        sightings.Memory(),
        at,
    )
    mysql = sightings.sightings_of(
        [finding(identity="mysql-connection:9:2")], sightings.Memory(), at
    )
    assert [bool(stored(record)) for record in (kernel, session, mysql)] == [True, True, True]
    assert [sightings.outlives_the_boot(r) for r in (kernel, session, mysql)] == [False, True, True]
    assert not sightings.outlives_the_boot(SeenRecord(NOW))


def test_a_record_replacing_one_that_named_a_session_outlives_the_boot_too() -> None:
    """The replacement that ends a session's series is fsynced: lost in a crash, the old
    record would come back and, with the session holding again after the reboot, date it from
    the old series' start."""
    session = sightings.last_seen([seen(FIRST, db=("pg-backend:7:1", FIRST))])
    kernel = sightings.last_seen([seen(FIRST, store=(HOLDER, FIRST))])
    assert sightings.outlives_the_boot(SeenRecord(NOW), session)
    assert not sightings.outlives_the_boot(SeenRecord(NOW), kernel)
    assert not sightings.outlives_the_boot(SeenRecord(NOW), None)


def test_the_sighting_file_counts_unless_the_journal_holds_a_later_record() -> None:
    """After a downgrade, the earlier version appends to the journal; run again, this one
    must not take the older file's series, which would start too early."""
    in_file = sightings.last_seen([seen(NOW - timedelta(minutes=30), store=(HOLDER, FIRST))])
    later = sightings.last_seen([seen(NOW - timedelta(minutes=1), store=(HOLDER, NOW))])
    earlier = sightings.last_seen([seen(NOW - timedelta(hours=1), store=(HOLDER, FIRST))])
    assert sightings.newest(in_file, later) is later
    assert sightings.newest(in_file, earlier) is in_file
    assert sightings.newest(in_file, None) is in_file
    assert sightings.newest(None, earlier) is earlier
    assert sightings.newest(None, None) is None


JOB = Party(
    pid=4242,
    start_ticks=1000,
    below=(
        Descendant(4250, 4250, "sleep", start_ticks=1100),
        Descendant(4251, 4242, "sh", 0, 1101),
    ),
)
WORK = LeftWork(4242, "boot-a", ((4250, 1100, "sleep"), (4251, 1101, "sh")))


@pytest.mark.parametrize(
    ("looked", "remembered", "kept"),
    [
        # a record-named holder with work below it: remembered (held, or held too long)
        (finding(State.HELD, Bound.EXACT, holder=JOB, key=None), None, WORK),
        (finding(State.HELD_TOO_LONG, Bound.EXACT, holder=JOB, key=None), None, WORK),
        # a kernel lock's holder is not: a worker that goes on holds the lock itself, or it is free
        (finding(holder=replace(JOB, lock_kind="FLOCK WRITE")), None, None),
        (finding(State.HELD, Bound.EXACT, holder=replace(JOB, below=()), key=None), WORK, None),
        # the holder gone while its work runs (unknown): what was remembered is carried
        (finding(State.UNKNOWN, Bound.UNKNOWN, identity=None, key=None), WORK, WORK),
        # free or stale: dropped
        (finding(State.FREE, Bound.UNKNOWN, identity=None, key=None), WORK, None),
        (finding(State.STALE, Bound.EXACT, identity=None, key=None), WORK, None),
    ],
    ids=["held", "held-too-long", "kernel-lock", "nothing-below", "unknown", "free", "stale"],
)
def test_what_runs_below_a_record_named_holder_is_remembered_until_the_lock_is_judged(
    looked: Finding, remembered: LeftWork | None, kept: LeftWork | None
) -> None:
    memory = sightings.Memory(below={} if remembered is None else {"store": remembered})
    record = sightings.sightings_of([looked], memory, NOW, boot_id="boot-a")
    assert dict(record.below) == ({} if kept is None else {"store": kept})
    latest = sightings.last_seen([from_json(to_json(record))])
    assert latest is not None and sightings.memory(latest, NOW, {}).below == record.below
    # written when it changed, not at every run that sees the same work (a kernel lock's
    # sighting is written at every run anyway)
    before = sightings.LastSeen(NOW, {}, {} if remembered is None else {"store": remembered})
    assert sightings.worth_writing(record, before) is (kept != remembered or bool(record.locks))
