"""The journal's records: each kind's JSON form round-trips, journals written before a field
existed still read, and what cannot be read is an Unreadable record that says why, kept as it
was (never dropped, never guessed at)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockwarden.model import LeftWork
from lockwarden.state.journal import encode, parse_lines
from lockwarden.state.records import (
    CloseRecord,
    DueRecord,
    GiveUpRecord,
    JournalRecord,
    OpenRecord,
    RemovedRecord,
    RunRecord,
    SeenEntry,
    SeenRecord,
    SentRecord,
    SightingRecord,
    Unreadable,
    from_json,
    to_json,
)

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
EARLIER = AT - timedelta(hours=2)

EVERY_KIND: list[JournalRecord] = [
    RunRecord(AT, {"wa-store": ("held_too_long", "wa-store|held_too_long|pid:1:2:b")}),
    RunRecord(AT, {"db": ("unknown", None)}),
    OpenRecord(AT, "a1b2", "wa-store", "k", "held_too_long", "/srv/LOCK", "PID 7 (job)", EARLIER),
    OpenRecord(AT, "c3d4", "gone", "k2", "stale"),
    CloseRecord(AT, "a1b2", "resolved"),
    DueRecord(AT, "a1b2", "a1b2/alert", "alert", "T", "**m**", "t", "failure", ("ops",), ("s1",)),
    DueRecord(AT, "a1b2", "a1b2/reminder@x", "reminder", "T", "m", "t", lock="wa-store"),
    SentRecord(AT, "a1b2/alert", "s1", True, "success", "json://127.0.0.1/..."),
    GiveUpRecord(AT, "a1b2/alert", ("s1", "s2")),
    GiveUpRecord(AT, "a1b2/alert", ("s3",), "service no longer configured"),
    SightingRecord(AT, "pidfile", "id|ino|digest", "/run/x.pid", "PID 9 is not running"),
    RemovedRecord(AT, "pidfile", "id|ino|digest", "/run/x.pid", "/run/.x.q", "PID 9 gone"),
    SeenRecord(AT, {"k": SeenEntry("pid:1:2:b", EARLIER)}),
    SeenRecord(AT, {"k": SeenEntry("pg-backend:7:1", EARLIER, AT - timedelta(minutes=1))}),
    SeenRecord(AT, {}, {"job": LeftWork(4242, "boot-a", ((4250, 1234, "sleep"),))}),
    SeenRecord(AT, {}, {"build": LeftWork(4242, "boot-a", ((4250, 1234, "cc"),), more=True)}),
]


@pytest.mark.parametrize("record", EVERY_KIND, ids=lambda record: type(record).__name__)
def test_every_kind_reads_back_as_it_was_written(record: JournalRecord) -> None:
    stored = json.loads(encode(record))
    assert stored["type"] == record.KIND
    again = from_json(stored)
    assert type(again) is type(record)
    assert vars(again) == vars(record)  # every field as it was (records compare no other way)


def test_the_stored_form_is_the_documented_one() -> None:
    """What older and newer versions of lockwarden read: the keys of each kind as the
    module's docstring lists them (a renamed key would make every journal unreadable)."""
    assert to_json(EVERY_KIND[2]) == {
        "type": "open",
        "at": "2026-12-04T10:00:00Z",
        "incident": "a1b2",
        "lock": "wa-store",
        "key": "k",
        "class": "held_too_long",
        "path": "/srv/LOCK",
        "holder": "PID 7 (job)",
        "held_since": "2026-12-04T08:00:00Z",
    }
    assert to_json(EVERY_KIND[13])["locks"] == {
        "k": ["pg-backend:7:1", "2026-12-04T08:00:00Z", "2026-12-04T09:59:00Z"]
    }
    assert to_json(EVERY_KIND[14])["below"] == {
        "job": {"holder": 4242, "boot": "boot-a", "work": [[4250, 1234, "sleep"]]}
    }
    assert "below" not in to_json(EVERY_KIND[13])  # written only when there is some
    assert to_json(EVERY_KIND[15])["below"]["build"]["more"] is True  # an earlier one has none
    assert to_json(EVERY_KIND[5])["targets"] == ["s1"]
    assert to_json(EVERY_KIND[6])["targets"] is None  # not known yet: resolved when sent


def test_a_journal_written_before_a_field_existed_still_reads() -> None:
    """A `due` with no notify_type, a `sent` with no url, an `open` with no path: the
    defaults the fold used before the records were typed."""
    due = from_json(
        {"type": "due", "at": "2026-12-04T10:00:00Z", "incident": "i", "message": "m",
         "kind": "alert", "title": "T", "markdown": "", "text": ""}
    )  # fmt: skip
    sent = from_json(
        {"type": "sent", "at": "2026-12-04T10:00:00Z", "message": "m", "service": "s", "ok": False}
    )
    opened = from_json(
        {"type": "open", "at": "2026-12-04T10:00:00Z", "incident": "i", "lock": "l", "key": "k",
         "class": "stale"}
    )  # fmt: skip
    assert isinstance(due, DueRecord) and (due.notify_type, due.targets, due.tags) == (
        "info",
        None,
        (),
    )
    assert isinstance(sent, SentRecord) and (sent.url, sent.status) == ("?", "None")
    assert isinstance(opened, OpenRecord) and (opened.path, opened.held_since) == ("", None)


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ({"type": "open", "at": "2026-12-04T10:00:00Z", "incident": "x"}, "lock is missing"),
        ({"type": "run", "at": "2026-12-04T10:00:00Z", "locks": [1]}, "locks is not a table"),
        ({"type": "run", "at": "yesterday", "locks": {}}, "at is not a moment ('yesterday')"),
        ({"type": "close", "incident": "x"}, "at is not a moment (None)"),
        ({"type": "sent", "at": "2026-12-04T10:00:00Z", "message": "m", "service": "s",
          "ok": "yes"}, "ok is not true or false"),
        ({"type": "giveup", "at": "2026-12-04T10:00:00Z", "message": "m", "services": [1]},
         "services is not a list of text"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {"k": ["id"]}},
         "locks.k is not [identity, since(, seen_at)]"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {"k": ["id", "soon"]}},
         "locks.k is not [identity, since(, seen_at)]"),
        # a moment compaction could not write back in UTC is none
        ({"type": "run", "at": "9999-12-31T23:59:59-01:00", "locks": {}},
         "at is not a moment ('9999-12-31T23:59:59-01:00')"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z",
          "locks": {"k": ["id", "9999-12-31T23:59:59-01:00"]}},
         "locks.k is not [identity, since(, seen_at)]"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {},
          "below": {"job": {"holder": 7, "boot": "b", "work": [[8, "1234", "sleep"]]}}},
         "below.job is not {holder, boot, work: [[pid, ticks, name]](, more: true)}"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {},
          "below": {"job": {"holder": True, "boot": "b", "work": []}}},
         "below.job is not {holder, boot, work: [[pid, ticks, name]](, more: true)}"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {},
          "below": {"job": {"holder": 7, "boot": "b", "work": [], "more": 1}}},
         "below.job is not {holder, boot, work: [[pid, ticks, name]](, more: true)}"),
        ({"type": "seen", "at": "2026-12-04T10:00:00Z", "locks": {}, "below": []},
         "below is not a table"),
        ({"type": "future-kind", "at": "2026-12-04T10:00:00Z"},
         "a kind this version does not know ('future-kind')"),
    ],
)  # fmt: skip
def test_what_cannot_be_read_is_unreadable_and_says_why(
    stored: dict[str, Any], problem: str
) -> None:
    record = from_json(stored)
    assert isinstance(record, Unreadable)
    assert (record.kind, record.problem) == (stored["type"], problem)
    assert to_json(record) == stored  # kept as it was: compaction writes it back unchanged


def test_a_journal_line_of_an_unknown_kind_is_kept_and_a_torn_or_corrupt_one_is_not() -> None:
    data = (
        encode(EVERY_KIND[4])
        + b'{"type":"future-kind","at":"2026-12-04T10:00:00Z","x":1}\n'
        + b"not json\n\n"
        + encode(EVERY_KIND[0])
        + b'{"type":"run","at":'
    )
    loaded = parse_lines(data, "state.jsonl")
    assert [type(record).__name__ for record in loaded.records] == [
        "CloseRecord",
        "Unreadable",
        "RunRecord",
    ]
    assert len(loaded.warnings) == 2  # line 3 is no record; the last line is torn
    assert loaded.torn_at == len(data) - len(b'{"type":"run","at":')
