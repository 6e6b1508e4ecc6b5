"""The sighting file on a real FUSE file system whose directory fsync fails (syncfailfs.py):
the new record was renamed into place before the sync failed, so it is the record a later run
reads. Only a failure before the rename removes the old one (tests/unit/state/test_seen_file.py,
a full tmpfs): removing here would delete the record just written, and every durable run on
such a directory would lose the database sessions it names."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from lockwarden.state.journal import SEEN_NAME, SeenFile, StateError
from lockwarden.state.records import SeenEntry, SeenRecord, to_json

from .conftest import HangingMounts

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def read(seen: SeenFile) -> object:
    loaded = seen.load()
    assert loaded is not None
    return to_json(loaded)


def test_a_record_renamed_into_place_is_kept_when_only_its_directory_sync_fails(
    hanging: HangingMounts,
) -> None:
    directory = hanging.mount_syncfail()
    seen = SeenFile(str(directory))
    first = SeenRecord(AT, {"db": SeenEntry("session:1", AT)})
    seen.replace(first, durable=False)  # no sync asked for: written
    assert read(seen) == to_json(first)
    later = SeenRecord(AT + timedelta(minutes=1), {"db": SeenEntry("session:1", AT)})
    with pytest.raises(StateError, match="Input/output error"):
        seen.replace(later, durable=True)
    assert os.listdir(directory) == [SEEN_NAME]
    assert read(seen) == to_json(later)
