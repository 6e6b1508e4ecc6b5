"""state/journal.py's SeenFile on real files: the sighting memory's one record, replaced whole
by each run that writes one. (The journal itself, the run lock and compaction are held by
tests/alerts/test_journal.py; how a real run writes the file, fsync or none, under strace by
tests/integration/test_sighting_memory.py.)"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.helpers import tiny_tmpfs
from lockwarden.state.journal import SEEN_NAME, SEEN_PREFIX, SeenFile, StateError, encode
from lockwarden.state.records import RunRecord, SeenEntry, SeenRecord, to_json

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)

__all__ = ["tiny_tmpfs"]  # the fixture, imported so pytest finds it here


def state_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    return directory


def test_no_file_is_no_memory(tmp_path: Path) -> None:
    assert SeenFile(str(state_dir(tmp_path))).load() is None


def test_each_replacement_leaves_one_whole_record_and_no_hidden_file(tmp_path: Path) -> None:
    directory = state_dir(tmp_path)
    seen = SeenFile(str(directory))
    records = [
        SeenRecord(AT + timedelta(minutes=minute), {"k": SeenEntry(f"pid:{minute}:1:b", AT)})
        for minute in range(3)
    ]
    for record in records:
        seen.replace(record, durable=minute_is_durable(record))
        loaded = seen.load()
        assert loaded is not None and to_json(loaded) == to_json(record)
    assert (directory / SEEN_NAME).read_bytes() == encode(records[-1])
    assert os.listdir(directory) == [SEEN_NAME]
    assert (directory / SEEN_NAME).stat().st_mode & 0o777 == 0o600


def minute_is_durable(record: SeenRecord) -> bool:
    return record.at.minute % 2 == 1  # both ways of writing replace the same way


def test_a_hidden_file_a_killed_run_left_is_removed_by_the_next_replacement(
    tmp_path: Path,
) -> None:
    directory = state_dir(tmp_path)
    left = directory / f"{SEEN_PREFIX}99999"
    left.write_text('{"at": "2026-12-04T09:00:00Z", "lo')  # killed mid-write, never renamed
    seen = SeenFile(str(directory))
    assert seen.load() is None  # never read: it was not renamed into place
    seen.replace(SeenRecord(AT), durable=False)
    assert os.listdir(directory) == [SEEN_NAME]


@pytest.mark.parametrize(
    "content",
    [
        b'{"at": "2026-12-04T10:00:00Z", "lo',  # torn: a crash lost its end
        b"",  # a crash before its data reached the disk
        b"not json\n",
        encode(RunRecord(AT)),  # a record of another kind
        encode(SeenRecord(AT)) * 2,  # two records where one belongs
    ],
    ids=["torn", "empty", "not-json", "another-kind", "two-records"],
)
def test_a_file_that_is_not_one_seen_record_is_said_and_read_as_none(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    directory = state_dir(tmp_path)
    (directory / SEEN_NAME).write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert SeenFile(str(directory)).load() is None
    assert f"{directory / SEEN_NAME}: not a sighting record; ignored" in caplog.text


def test_a_symlink_in_its_place_is_a_state_error_and_is_replaced_not_followed(
    tmp_path: Path,
) -> None:
    directory = state_dir(tmp_path)
    target = tmp_path / "elsewhere.json"
    target.write_bytes(encode(SeenRecord(AT)))
    (directory / SEEN_NAME).symlink_to(target)
    seen = SeenFile(str(directory))
    with pytest.raises(StateError, match="cannot read"):
        seen.load()
    seen.replace(SeenRecord(AT + timedelta(minutes=1)), durable=False)
    assert not (directory / SEEN_NAME).is_symlink()
    assert target.read_bytes() == encode(SeenRecord(AT))  # what the link named is untouched


def test_an_unusable_state_directory_is_never_touched(tmp_path: Path) -> None:
    directory = tmp_path / "hung"
    seen = SeenFile(str(directory), unusable="the state directory's file system did not answer")
    for attempt in (seen.load, lambda: seen.replace(SeenRecord(AT), durable=True)):
        with pytest.raises(StateError, match="did not answer"):
            attempt()
    assert not directory.exists()


def test_an_unsafe_state_directory_is_refused_before_writing(tmp_path: Path) -> None:
    directory = state_dir(tmp_path)
    directory.chmod(0o777)
    with pytest.raises(StateError, match="writable by every user"):
        SeenFile(str(directory)).replace(SeenRecord(AT), durable=False)
    assert os.listdir(directory) == []


@pytest.mark.parametrize("durable", [False, True], ids=["kernel-locks", "durable"])
def test_a_replacement_that_fails_leaves_no_older_record_to_carry_series_over(
    tiny_tmpfs: Path, durable: bool
) -> None:
    """A full disk: the new record cannot be written. The one it should have replaced is
    removed too: a later run reading it would carry series over this run's sightings (which may
    have ended them) and date a new hold from an old series' start, a false "held too long".
    (A replacement that was renamed into place but whose directory could not be synced keeps
    the new record: tests/hung/test_seen_file_sync.py.)"""
    directory = tiny_tmpfs / "state"
    directory.mkdir(mode=0o700)
    seen = SeenFile(str(directory))
    seen.replace(SeenRecord(AT, {"k": SeenEntry("pid:1:1:b", AT)}), durable=False)
    filler = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:  # until the tmpfs is full
                os.write(filler, b"\0" * 4096)
    finally:
        os.close(filler)
    later = SeenRecord(AT + timedelta(minutes=1), {"k": SeenEntry("pid:2:1:b", AT)})
    with pytest.raises(StateError, match="cannot write"):
        seen.replace(later, durable=durable)
    assert os.listdir(directory) == []
    assert seen.load() is None
