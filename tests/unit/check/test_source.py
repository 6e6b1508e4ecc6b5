"""check/source.py: every lock source, file or database, as one claim with one question to
the capture and one way to be judged."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from factories import KEY, NOW, make_claim, make_finding, make_kernel_lock, make_snapshot
from lockwarden.check.classify import Policy
from lockwarden.check.identify import question_for
from lockwarden.check.source import FileClaim, Judged, combined
from lockwarden.model import Claim, State
from lockwarden.procfs.reader import Request
from lockwarden.procfs.snapshot import Descriptor, Snapshot
from lockwarden.procfs.sockets import ClientQuestion, SessionEnds

POLICY = Policy(warn_after=900.0, critical_after=3600.0)
ABSENT = Claim(format="kernel", path="/srv/store/LOCK", present=False, existence_is_lock=False)


def test_a_file_claim_asks_its_question_and_is_judged_from_the_snapshot() -> None:
    claim = FileClaim("store", ABSENT)
    assert (claim.question.locks, claim.keys) == ((question_for(ABSENT),), ())
    finding = claim.judge(make_snapshot(), POLICY, NOW, None, False)
    assert (finding.name, finding.state) == ("store", State.FREE)


def test_a_lock_judged_in_the_claims_phase_asks_nothing_and_keeps_its_finding() -> None:
    unknown = make_finding(state=State.UNKNOWN)
    judged = Judged(unknown)
    assert (judged.question.locks, judged.keys) == ((), ())
    assert judged.judge(make_snapshot(), POLICY, NOW, None, False) is unknown


def test_the_capture_is_asked_every_claims_question_together() -> None:
    end = (ipaddress.ip_address("127.0.0.1"), 40112)
    server = Request(clients=ClientQuestion(SessionEnds(frozenset({end}))))
    liquibase = Request(clients=ClientQuestion(commands=frozenset({"liquibase"})))
    files = FileClaim("store", ABSENT).question
    together = combined([files, server, liquibase, Judged(make_finding()).question])
    assert together.locks == (question_for(ABSENT),)
    assert together.clients == ClientQuestion(
        SessionEnds(frozenset({end})), commands=frozenset({"liquibase"})
    )


def test_a_file_claim_is_unchanged_only_by_the_same_claim_read_again() -> None:
    held = make_claim()  # a record naming PID 4242
    claim = FileClaim("store", held)
    assert claim.unchanged(FileClaim("store", replace(held)))
    assert not claim.unchanged(FileClaim("store", ABSENT))  # let go
    assert not claim.unchanged(FileClaim("store", replace(held, pid=4243)))
    assert not claim.unchanged(Judged(make_finding(state=State.UNKNOWN)))  # now unreadable
    assert not Judged(make_finding()).unchanged(Judged(make_finding()))


HELD = make_claim(path="/srv/store/LOCK", keys=(KEY,))
CARRIER = Descriptor(pid=4242, fd=3, locks=(make_kernel_lock(),), write=True)


def captured(target: str | None, scanned: bool = True, found: bool = True) -> Snapshot:
    """The capture of a lock on KEY, carried by CARRIER whose link is `target`."""
    return make_snapshot(
        parsed_locks={KEY: (make_kernel_lock(),)},
        scanned_keys=frozenset({KEY}) if scanned else frozenset(),
        found_descriptors={KEY: (CARRIER,)} if found else {},
        fd_targets={} if target is None else {(CARRIER.pid, CARRIER.fd): target},
    )


def test_a_lock_is_in_place_when_every_descriptor_on_it_shows_one_of_its_own_paths() -> None:
    claim = FileClaim("store", HELD)
    assert claim.in_place(captured("/srv/store/LOCK"))
    assert claim.in_place(make_snapshot())  # nothing on its inode: nothing to prove
    beside = replace(HELD, key_names=((KEY, "LOCK-shm"),))
    assert FileClaim("store", beside).in_place(captured("/srv/store/LOCK-shm"))


def test_a_lock_the_capture_cannot_place_is_read_again() -> None:
    """Another file now (its inode given away), the lock's own unlinked, another name for it,
    a link that could not be read, a lock no descriptor carries, or one not walked for."""
    claim = FileClaim("store", HELD)
    for target in ("/var/other.lock", "/srv/store/LOCK (deleted)", "/mnt/alias/LOCK", None):
        assert not claim.in_place(captured(target)), target
    assert not claim.in_place(captured("/srv/store/LOCK", found=False))
    assert not claim.in_place(captured("/srv/store/LOCK", scanned=False, found=False))


def test_a_claim_without_inodes_is_in_place() -> None:
    assert Judged(make_finding()).in_place(captured("/elsewhere"))
