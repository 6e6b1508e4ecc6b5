"""state/run_state.py on real files: one run's state opened once. A run that writes holds the
run lock (a second is busy, naming it); a run that only reads creates nothing; a state
directory that does not answer is never touched; what a stage appends is seen by the stages
after it; a journal that refuses a write sends it, and every later one, to the fallback
journal, which is merged back once the journal takes writes again."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lockwarden.state.journal import RunBusy, RunLock
from lockwarden.state.records import (
    CloseRecord,
    JournalRecord,
    OpenRecord,
    RunRecord,
    SeenEntry,
    SeenRecord,
    to_json,
)
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
    seen_file = journal.parent / "seen.json"
    state = RunState.open(str(journal))
    assert state.replace_seen(SeenRecord(AT), durable=False) is None
    assert times(seen_file) == ["2026-12-04T10:00:00Z"] and state.run_lock is None
    assert not journal.exists()  # the sighting memory is not journaled
    other = RunLock.acquire(str(journal.parent))  # another run is recording the same
    try:
        later = SeenRecord(AT + timedelta(minutes=1))
        assert state.replace_seen(later, durable=False) is None
    finally:
        other.release()
    assert times(seen_file) == ["2026-12-04T10:00:00Z"]  # left to the run that holds it
    assert stored(RunState.open(str(journal)).seen) == to_json(SeenRecord(AT))


def test_sightings_a_later_run_saved_meanwhile_are_not_replaced_by_an_earlier_runs(
    tmp_path: Path,
) -> None:
    """Two runs without the run lock overlap: the first reads the file at its start, and the
    second, started later, saves first. The first run's sightings are older: they must not
    replace the second's (a series the second saw end would come back, and a new hold would
    be dated from its start)."""
    journal = journal_in(tmp_path)
    seen_file = journal.parent / "seen.json"
    assert RunState.open(str(journal)).replace_seen(SeenRecord(AT), durable=False) is None
    slow = RunState.open(str(journal))  # started at AT + 1 min, still judging
    quick = RunState.open(str(journal))  # started at AT + 2 min, done first
    ended = SeenRecord(AT + timedelta(minutes=2))  # it saw the lock free: the series ended
    assert quick.replace_seen(ended, durable=False) is None
    held = SeenRecord(AT + timedelta(minutes=1), {"k": SeenEntry("pid:7:1:b", AT)})
    assert slow.replace_seen(held, durable=False) is None
    assert times(seen_file) == ["2026-12-04T10:02:00Z"]
    assert stored(RunState.open(str(journal)).seen) == to_json(ended)


def test_a_record_already_there_when_a_run_read_it_is_replaced_whatever_its_time(
    tmp_path: Path,
) -> None:
    """A run given a future --now left its record: later runs still save theirs."""
    journal = journal_in(tmp_path)
    future = SeenRecord(AT + timedelta(days=1))
    assert RunState.open(str(journal)).replace_seen(future, durable=False) is None
    record = SeenRecord(AT, {"k": SeenEntry("pid:7:1:b", AT)})
    assert RunState.open(str(journal)).replace_seen(record, durable=False) is None
    assert stored(RunState.open(str(journal)).seen) == to_json(record)


def test_the_seen_file_replaces_the_last_record_and_is_what_the_next_run_reads(
    tmp_path: Path,
) -> None:
    journal = journal_in(tmp_path)
    for minute in range(3):
        state = RunState.open(str(journal))
        record = SeenRecord(AT + timedelta(minutes=minute), {"k": SeenEntry("pid:7:1:b", AT)})
        assert state.replace_seen(record, durable=False) is None
        state.close()
    assert times(journal.parent / "seen.json") == ["2026-12-04T10:02:00Z"]  # one record, whole
    assert stored(RunState.open(str(journal)).seen) == to_json(record)
    assert sorted(os.listdir(journal.parent)) == ["run.lock", "seen.json"]  # no temp file left


def test_seen_records_an_earlier_version_journaled_are_read_then_compacted_away(
    tmp_path: Path,
) -> None:
    """A journal with `seen` records appended (an earlier version) among an incident's: the
    first run reads its latest, and once the file holds the memory the journal keeps only the
    incident's records (in order)."""
    journal = journal_in(tmp_path)
    journaled = [
        SeenRecord(AT, {"k": SeenEntry("pid:7:1:b", AT)}),
        OpenRecord(AT, "i1", "k", "inode:1:2", "critical"),
        SeenRecord(AT + timedelta(minutes=1), {"k": SeenEntry("pid:7:1:b", AT)}),
        CloseRecord(AT + timedelta(minutes=1), "i1"),
    ]
    journal.write_text("".join(json_line(record) for record in journaled))
    state = RunState.open(str(journal))
    assert state.seen is None and [stored(record) for record in state.records] == [
        to_json(record) for record in journaled
    ]
    assert state.replace_seen(SeenRecord(AT + timedelta(minutes=2)), durable=False) is None
    state.close()
    assert [json.loads(line)["type"] for line in journal.read_text().splitlines()] == [
        "open",
        "close",
    ]
    kept = RunState.open(str(journal)).records
    assert [stored(record) for record in kept] == [to_json(journaled[1]), to_json(journaled[3])]


def stored(record: JournalRecord | None) -> dict[str, object] | None:
    """Records compare by identity (eq=False): their JSON form says what they hold."""
    return None if record is None else to_json(record)


def json_line(record: JournalRecord) -> str:
    return json.dumps(to_json(record), sort_keys=True) + "\n"


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


def test_a_writing_run_reads_no_sighting_file_in_a_directory_it_refuses(tmp_path: Path) -> None:
    """A `seen.json` in a state directory anyone may write could be anyone's: a writing run
    that refuses the directory reads neither it nor the journal, and a run that only reads
    does not take the file either; each says why."""
    journal = journal_in(tmp_path)
    planted = SeenRecord(AT, {"k": SeenEntry("pid:7:1:b", AT - timedelta(days=1))})
    assert RunState.open(str(journal)).replace_seen(planted, durable=False) is None
    journal.parent.chmod(0o777)
    state = RunState.open(str(journal), writes=True)
    assert state.seen is None and state.records == []
    assert "writable" in state.problems[0], state.problems
    reading = RunState.open(str(journal))  # alerting off: it reads, and may replace, seen.json
    assert reading.seen is None and "writable" in reading.problems[0], reading.problems
