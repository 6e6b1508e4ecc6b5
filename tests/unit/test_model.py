"""model.py: the shared vocabulary's own behaviour. Critical outranks unknown in a run's worst
severity, a zombie holds nothing once its last thread is gone, byte ranges overlap as the
kernel's do, and a holder is described the way an alert names it. (command_text has its own
property test, tests/unit/output/test_command_text.py.) And Held: the one value for how long
any lock has been held, and since when."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from factories import (
    KEY,
    NOW,
    make_claim,
    make_finding,
    make_holder,
    make_kernel_lock,
    make_process,
)
from lockwarden.model import (
    NOT_HELD,
    Bound,
    ByteRange,
    Container,
    Held,
    Severity,
    Staleness,
    StaleProof,
    State,
    own_finding,
    worst,
)


@pytest.mark.parametrize(
    ("severities", "expected"),
    [
        ((), Severity.OK),
        ((Severity.OK, Severity.WARNING), Severity.WARNING),
        ((Severity.WARNING, Severity.UNKNOWN), Severity.UNKNOWN),
        ((Severity.UNKNOWN, Severity.CRITICAL), Severity.CRITICAL),
        ((Severity.CRITICAL, Severity.UNKNOWN, Severity.OK), Severity.CRITICAL),
    ],
)
def test_the_worst_severity_ranks_critical_above_unknown(
    severities: tuple[Severity, ...], expected: Severity
) -> None:
    assert worst(severities) is expected


def test_severities_are_the_nagios_codes_and_labels() -> None:
    assert [(s.value, s.label) for s in Severity] == [
        (0, "ok"),
        (1, "warning"),
        (2, "critical"),
        (3, "unknown"),
    ]


@pytest.mark.parametrize(
    ("state", "threads", "alive"),
    [
        ("S", 1, True),
        ("R", 4, True),
        ("D", 1, True),
        ("Z", 1, False),
        ("X", 1, False),
        ("Z", 3, True),  # a zombie leader whose other threads still run still holds its locks
    ],
)
def test_a_process_is_alive_until_its_last_thread_is_a_zombie(
    state: str, threads: int, alive: bool
) -> None:
    assert make_process(state=state, threads=threads).alive is alive


@pytest.mark.parametrize(
    ("start", "end", "overlaps"),
    [
        (0, None, True),  # to the end of the file
        (100, 199, True),
        (199, 199, True),  # one byte at the range's last
        (200, None, False),  # starts after it
        (0, 99, False),  # ends before it
        (50, 100, True),  # ends on its first byte
    ],
)
def test_a_kernel_lock_overlaps_a_byte_range_as_the_kernel_counts(
    start: int, end: int | None, overlaps: bool
) -> None:
    writers = ByteRange(KEY, 100, 199)
    assert writers.overlaps(make_kernel_lock(start=start, end=end)) is overlaps


def test_a_lock_on_another_file_never_overlaps() -> None:
    other = (KEY[0], KEY[1] + 1)
    assert not ByteRange(KEY, 0, 10).overlaps(make_kernel_lock(key=other))


def test_only_a_write_kernel_lock_is_exclusive() -> None:
    assert make_kernel_lock(mode="WRITE").exclusive
    assert not make_kernel_lock(mode="READ").exclusive


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        (
            {"role": "maintenance-job", "unit": "wa-resync.service"},
            "PID 4242 (maintenance-job, wa-resync.service)",
        ),
        ({"role": None, "name": "tool", "unit": None}, "PID 4242 (tool)"),
        ({"role": None, "name": None}, "PID 4242"),
        ({"pid": None, "role": None, "name": "flock"}, "an unnamed process (flock)"),
        # a session no local process holds, a prepared transaction: named by what it is
        ({"pid": None, "role": "postgres backend 4242"}, "postgres backend 4242"),
        (
            {"pid": None, "role": "postgres prepared transaction 'deploy-7'"},
            "postgres prepared transaction 'deploy-7'",
        ),
        (
            {"name": "flock", "container": Container("podman", "wa-sync")},
            "PID 4242 (flock, podman container wa-sync)",
        ),
    ],
)
def test_a_holder_is_described_as_an_alert_names_it(fields: dict[str, object], text: str) -> None:
    assert make_holder(**fields).describe() == text


@pytest.mark.parametrize(
    ("bound", "words"),
    [
        (Bound.EXACT, ""),
        (Bound.AT_LEAST, "at least "),
        (Bound.AT_MOST, "up to "),
        (Bound.UNKNOWN, ""),
    ],
)
def test_every_bound_has_its_words(bound: Bound, words: str) -> None:
    assert bound.words == words


def test_a_findings_holders_are_the_primary_then_the_sharers() -> None:
    first, second = make_holder(pid=1), make_holder(pid=2)
    assert make_finding(holder=first, sharers=(second,)).holders == (first, second)
    assert make_finding(holder=None, sharers=(second,)).holders == (second,)
    assert make_finding().holders == ()


def test_only_an_unknown_lock_naming_no_holder_is_unseen() -> None:
    unknown = make_finding(state=State.UNKNOWN, severity=Severity.UNKNOWN)
    assert unknown.unseen
    assert not dataclasses.replace(unknown, identity="pid:4242:100:boot").unseen
    assert not make_finding(state=State.HELD, severity=Severity.OK).unseen


def test_lockwardens_own_finding_is_unknown_without_a_cause() -> None:
    finding = own_finding("lockwarden:state", "/var/lib/lockwarden", "state", "disk full")
    assert (finding.state, finding.severity, finding.unknown_cause) == (
        State.UNKNOWN,
        Severity.UNKNOWN,
        None,
    )
    assert finding.unseen


def test_a_claim_is_frozen_and_proves_staleness_by_its_record_unless_told() -> None:
    claim = make_claim()
    assert claim.stale.proof is StaleProof.RECORD
    with pytest.raises(dataclasses.FrozenInstanceError):
        claim.pid = 1  # type: ignore[misc]
    assert make_claim(extra={"a": 1}).extra == {"a": 1}
    assert make_claim().extra == {}  # each claim its own dict
    assert make_claim().extra is not make_claim().extra


@pytest.mark.parametrize(
    "proof", [StaleProof.NO_OPENER, StaleProof.NO_KERNEL_LOCK, StaleProof.NO_WORKER]
)
def test_a_proof_from_what_is_missing_cannot_be_built_without_the_fact_that_makes_it_sound(
    proof: StaleProof,
) -> None:
    with pytest.raises(ValueError, match="needs the fact"):
        Staleness(proof)
    assert Staleness(proof, "it keeps the file open").fact == "it keeps the file open"


@pytest.mark.parametrize("proof", [StaleProof.RECORD, StaleProof.NEVER])
def test_a_proof_by_the_record_or_none_needs_no_fact(proof: StaleProof) -> None:
    assert Staleness(proof).fact is None


def test_a_hold_starts_its_duration_before_the_moment_it_was_judged() -> None:
    held = Held.of(600.0, Bound.AT_LEAST, NOW)
    assert (held.seconds, held.bound, held.since) == (
        600.0,
        Bound.AT_LEAST,
        NOW - timedelta(minutes=10),
    )
    assert Held.of(None, Bound.AT_MOST, NOW) == NOT_HELD  # no figure: nothing known of when


def test_a_recorded_start_is_the_hold_start_and_one_ahead_of_our_clock_is_just_taken() -> None:
    granted = NOW - timedelta(hours=3)
    assert Held.began(granted, Bound.EXACT, NOW) == Held(3 * 3600.0, Bound.EXACT, granted)
    assert Held.began(NOW + timedelta(seconds=5), Bound.EXACT, NOW) == Held(0.0, Bound.EXACT, NOW)


def test_a_start_is_known_exactly_when_a_duration_is() -> None:
    with pytest.raises(ValueError, match=r"Held\.of"):
        Held(600.0, Bound.EXACT)
    with pytest.raises(ValueError, match=r"Held\.of"):
        Held(None, Bound.EXACT, NOW)


def test_a_findings_duration_fields_read_its_held() -> None:
    finding = make_finding(held=Held.of(90.0, Bound.AT_MOST, NOW))
    assert (finding.held_for_s, finding.held_bound, finding.held_since) == (
        90.0,
        Bound.AT_MOST,
        NOW - timedelta(seconds=90),
    )
    assert (make_finding().held_for_s, make_finding().held_bound) == (None, Bound.UNKNOWN)
