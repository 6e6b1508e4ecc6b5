"""state/run_state.py on real files: one run's state opened once. A run that writes holds the
run lock (a second is busy, naming it); a run that only reads creates nothing; a state
directory that does not answer is never touched; what a stage appends is seen by the stages
after it; a journal that refuses a write sends it, and every later one, to the fallback
journal, which is merged back once the journal takes writes again."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lockwarden.state.journal import RunBusy, RunLock
from lockwarden.state.records import CloseRecord, OpenRecord, RunRecord, SeenRecord, to_json
from lockwarden.state.run_state import RunState
from lockwarden.state.runtime import runtime_directory

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def journal_in(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory / "state.jsonl"


def times(path: Path) -> list[str]:
    import json

    return [json.loads(line)["at"] for line in path.read_text().splitlines() if line.strip()]


def test_a_run_that_writes_holds_the_run_lock_and_a_second_is_busy(tmp_path: Path) -> None:
    journal = journal_in(tmp_path)
    first = RunState.open(str(journal), writes=True)
    try:
        assert first.run_lock is not None and first.problems == []
        with pytest.raises(RunBusy) as busy:
            RunState.open(str(journal), writes=True)
        assert busy.value.pid == os.getpid()
    finally:
        first.close()
    RunState.open(str(journal), writes=True).close()  # released with the state


def test_a_run_that_only_reads_creates_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "not-yet" / "state.jsonl"
    state = RunState.open(str(journal))
    state.close()
    assert (state.records, state.problems, state.run_lock) == ([], [], None)
    assert not journal.parent.exists()


def test_a_state_directory_that_does_not_answer_is_said_and_never_touched(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "hung" / "state.jsonl"
    state = RunState.open(str(journal), unusable="the state directory's mount did not answer",
                          writes=True)  # fmt: skip
    state.append(RunRecord(AT))
    state.close()
    assert state.problems[0] == "the state directory's mount did not answer"
    assert state.run_lock is None and state.records == []
    assert not journal.parent.exists()


def test_what_a_stage_appends_is_seen_by_the_stages_after_it_and_the_next_run(
    tmp_path: Path,
) -> None:
    journal = journal_in(tmp_path)
    state = RunState.open(str(journal), writes=True)
    state.append(OpenRecord(AT, "i1", "store", "store|stale|-", "stale", "/srv/LOCK"))
    assert state.history().open_incident("store") is not None
    state.append(CloseRecord(AT + timedelta(minutes=1), "i1", "resolved"))
    assert state.history().open_incident("store") is None
    state.close()
    again = RunState.open(str(journal), writes=True)
    again.close()
    assert [to_json(record) for record in again.records] == [
        to_json(record) for record in state.records
    ]


def test_a_refused_write_goes_to_the_fallback_and_is_merged_back_once_healed(
    tmp_path: Path,
) -> None:
    journal = journal_in(tmp_path)
    journal.mkdir()  # the journal cannot be read or written: a directory where it should be
    fallback = Path(str(runtime_directory(str(journal)))) / "state.jsonl"
    degraded = RunState.open(str(journal), writes=True, fallback=True)
    degraded.append(RunRecord(AT))
    degraded.close()
    assert "not a regular journal file" in degraded.problems[0]
    assert degraded.journal.path == str(fallback) and times(fallback) == ["2026-12-04T10:00:00Z"]

    journal.rmdir()  # healed
    healed = RunState.open(str(journal), writes=True, fallback=True)
    healed.append(RunRecord(AT + timedelta(minutes=1)))
    healed.close()
    assert healed.problems == [] and healed.journal.path == str(journal)
    assert times(journal) == ["2026-12-04T10:00:00Z", "2026-12-04T10:01:00Z"]
    assert not fallback.exists()  # merged once, then removed


def test_a_run_without_the_run_lock_takes_it_for_its_seen_record_alone(tmp_path: Path) -> None:
    journal = journal_in(tmp_path)
    state = RunState.open(str(journal))
    assert state.append_alone(SeenRecord(AT), True, lambda records: records) is None
    assert times(journal) == ["2026-12-04T10:00:00Z"] and state.run_lock is None
    other = RunLock.acquire(str(journal.parent))  # another run is recording the same
    try:
        assert state.append_alone(SeenRecord(AT), True, lambda records: records) is None
    finally:
        other.release()
    assert times(journal) == ["2026-12-04T10:00:00Z"]  # left to the run that holds it


def test_a_record_the_fold_cannot_read_is_said_once_a_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = journal_in(tmp_path)
    journal.write_text('{"type": "open", "at": "2026-12-04T10:00:00Z", "incident": "x9"}\n')
    journal.chmod(0o600)
    state = RunState.open(str(journal), writes=True)
    with caplog.at_level(logging.WARNING, logger="lockwarden.state.run_state"):
        state.history()
        state.history()
    state.close()
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        f"{journal}: record 1 ('open' at '2026-12-04T10:00:00Z') cannot be read: lock is "
        "missing; what it said was left out"
    ]
