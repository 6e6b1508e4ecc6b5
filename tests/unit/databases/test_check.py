"""databases/check.py: a server's answer says what the capture must read, and the lock is then
judged from the snapshot alone, as check/source.py's one interface says."""

from __future__ import annotations

from datetime import timedelta

from factories import NOW, make_process, make_snapshot
from lockwarden.check.classify import Policy
from lockwarden.check.observation import Backend, Hold, LiquibaseRow, Observation
from lockwarden.config import DatabaseWatch, LockConfig
from lockwarden.databases.check import LIQUIBASE_COMMAND, ServerClaim, host_question
from lockwarden.model import Bound, State, UnknownCause
from lockwarden.procfs.sockets import ClientQuestion

POLICY = Policy(warn_after=1800.0, critical_after=3600.0, stale_after=3600.0)


def lock(watch: str, target: str | int) -> LockConfig:
    database = DatabaseWatch("postgresql", "host=db", watch, target)
    return LockConfig("app-db", "db", "postgresql", 1800.0, 3600.0, database=database)


LIQUIBASE = lock("liquibase_table", "databasechangeloglock")


def test_a_server_that_cannot_tell_asks_nothing_of_the_host_and_is_unknown() -> None:
    silent = Observation("app-db", problem="connection refused")
    claim = ServerClaim(LIQUIBASE, silent, host_question(LIQUIBASE, silent, "here"))
    assert claim.clients == ClientQuestion() and claim.keys == ()
    finding = claim.judge(make_snapshot(), POLICY, NOW, None, False)
    assert (finding.state, finding.unknown_cause) == (State.UNKNOWN, UnknownCause.DATABASE)


def test_a_row_locked_by_this_host_asks_for_the_liquibase_processes() -> None:
    granted = NOW - timedelta(hours=2)
    row = LiquibaseRow(True, granted, "here (127.0.0.1)", granted)
    seen = Observation("app-db", liquibase=row)
    question = host_question(LIQUIBASE, seen, "here")
    assert question.commands == frozenset({LIQUIBASE_COMMAND.pattern})
    runner = make_process(pid=777, cmdline=("liquibase", "update"), name="java")
    snapshot = make_snapshot(commands={LIQUIBASE_COMMAND.pattern: (777,)}, processes={777: runner})
    finding = ServerClaim(LIQUIBASE, seen, question).judge(snapshot, POLICY, NOW, None, False)
    assert (finding.state, finding.holder and finding.holder.pid) == (State.HELD_TOO_LONG, 777)
    assert (finding.held.bound, finding.held.since) == (Bound.EXACT, granted)
    elsewhere = LiquibaseRow(True, granted, "build-7 (10.0.0.7)", granted)
    other = Observation("app-db", liquibase=elsewhere)
    assert host_question(LIQUIBASE, other, "here") == ClientQuestion()  # nothing to look for


def test_a_held_advisory_lock_asks_for_its_sessions_clients() -> None:
    holder = Backend(pid=9911, client_addr="127.0.0.1", client_port=40112, backend_start=NOW)
    other = Backend(pid=9920, client_port=-1, backend_start=NOW)
    seen = Observation("app-db", holds=(Hold("advisory lock 1", holder),), sessions=(other,))
    question = host_question(lock("advisory_key", 1), seen, "here")
    assert [end[1] for end in question.sessions.endpoints] == [40112]
    assert question.others.backends == frozenset({9920})


def test_a_server_claim_is_unchanged_only_by_the_same_row_and_holders() -> None:
    granted = NOW - timedelta(hours=2)
    row = LiquibaseRow(True, granted, "here (127.0.0.1)", granted)

    def claim(observation: Observation) -> ServerClaim:
        return ServerClaim(LIQUIBASE, observation, ClientQuestion())

    seen = claim(Observation("app-db", liquibase=row))
    assert seen.unchanged(claim(Observation("app-db", liquibase=row)))
    released = LiquibaseRow(False, None, None, None)
    assert not seen.unchanged(claim(Observation("app-db", liquibase=released)))
    again = LiquibaseRow(True, NOW, "here (127.0.0.1)", NOW)  # another run's grant
    assert not seen.unchanged(claim(Observation("app-db", liquibase=again)))
    silent = Observation("app-db", liquibase=row, problem="timed out")
    assert not seen.unchanged(claim(silent))
    holder = Hold("advisory lock 7", Backend(pid=9911, backend_start=granted))
    sessions = claim(Observation("app-db", holds=(holder,)))
    successor = Hold("advisory lock 7", Backend(pid=9912, backend_start=NOW))
    assert sessions.unchanged(claim(Observation("app-db", holds=(holder,))))
    assert not sessions.unchanged(claim(Observation("app-db", holds=(successor,))))
