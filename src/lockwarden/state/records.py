"""The state journal's records: one frozen dataclass per kind, and their JSON form.

Every record a run writes is one of these, and only this module turns one into JSON or back.
The kinds (one JSON object per line, its `type` the kind):

* ``run``      what a run found not good: ``{at, locks: {name: [class, key]}}``;
* ``open``     an incident begins: ``{at, incident, lock, key, class, path, holder, held_since}``;
* ``close``    it ends: ``{at, incident, why}``;
* ``due``      a message, written before it is sent, so a crash mid-send is retried (at most
  one duplicate), never lost: ``{at, incident, message, kind, lock, title, markdown, text,
  notify_type, tags, targets}`` (``targets`` null: its services were not known yet);
* ``sent``     one service's result for one attempt: ``{at, message, service, url, ok,
  status}``; ``url`` is apprise's privacy form, never the URL itself;
* ``giveup``   undeliverable: ``{at, message, services, why}``;
* ``sighting`` `remove_stale`'s first run that saw a stale lock: ``{at, lock, key, path,
  proof}`` (the key names the finding's identity, the inode and a digest of the record);
* ``removed``  a stale lock moved aside and deleted: ``{at, lock, key, path, quarantine,
  proof}``;
* ``seen``     the sighting memory: ``{at, locks: {name: [identity, since(, seen_at)]}}``,
  and what ran below record-named holders: ``below: {name: {holder, boot, work: [[pid,
  start_ticks, comm], ...](, more: true)}}`` (only when there is some; `more`: more ran below
  it than `work` lists).

Records are passed along and written, never compared (`eq=False`, docs/development.md,
"Records"): compare their JSON form.

A line of a kind this version does not know, or of a known kind in a shape it cannot read
(a key missing, a wrong type), is an `Unreadable` record: kept as it was, and reported by
whoever folds the journal, never skipped in silence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple, TypeGuard

from lockwarden.model import LeftWork
from lockwarden.support.durations import format_time, parse_time


@dataclass(frozen=True, eq=False)
class RunRecord:
    """What a run found not good, lock by lock: (state class, incident key)."""

    KIND: ClassVar[str] = "run"
    at: datetime
    locks: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class OpenRecord:
    """An incident begins: one bad episode of one lock with one holder."""

    KIND: ClassVar[str] = "open"
    at: datetime
    incident: str
    lock: str
    key: str
    state_class: str
    path: str = ""
    holder: str | None = None
    held_since: datetime | None = None


@dataclass(frozen=True, eq=False)
class CloseRecord:
    """An incident ends, and why (resolved, superseded, holder died, unchecked, wait over)."""

    KIND: ClassVar[str] = "close"
    at: datetime
    incident: str
    why: str | None = None


@dataclass(frozen=True, eq=False)
class DueRecord:
    """A message due, journaled before it is sent; written again when its services are
    resolved or renamed later (the same message, now addressed)."""

    KIND: ClassVar[str] = "due"
    at: datetime
    incident: str
    message: str
    kind: str
    title: str
    markdown: str
    text: str
    notify_type: str = "info"  # journals before it had none
    tags: tuple[str, ...] = ()
    targets: tuple[str, ...] | None = None  # None: its services were not known yet
    lock: str | None = None


@dataclass(frozen=True, eq=False)
class SentRecord:
    """One service's result for one attempt to deliver a message."""

    KIND: ClassVar[str] = "sent"
    at: datetime
    message: str
    service: str
    ok: bool
    status: str
    url: str = "?"


@dataclass(frozen=True, eq=False)
class GiveUpRecord:
    """A message no longer tried for these services (give_up_after passed, or they are gone)."""

    KIND: ClassVar[str] = "giveup"
    at: datetime
    message: str
    services: tuple[str, ...]
    why: str | None = None


@dataclass(frozen=True, eq=False)
class SightingRecord:
    """The first run that saw a stale lock with this key (`remove_stale` needs two)."""

    KIND: ClassVar[str] = "sighting"
    at: datetime
    lock: str
    key: str
    path: str = ""
    proof: str | None = None


@dataclass(frozen=True, eq=False)
class RemovedRecord:
    """A stale lock moved aside as `quarantine` and deleted."""

    KIND: ClassVar[str] = "removed"
    at: datetime
    lock: str
    key: str
    path: str = ""
    quarantine: str = ""
    proof: str | None = None


class SeenEntry(NamedTuple):
    """One lock's series in the sighting memory: its holder, when the series began, and when
    its holder was last seen (None: by the run that wrote the record)."""

    identity: str
    since: datetime
    seen_at: datetime | None = None


@dataclass(frozen=True, eq=False)
class SeenRecord:
    """The sighting memory: each lock held with no dated record, with its series."""

    KIND: ClassVar[str] = "seen"
    at: datetime
    locks: Mapping[str, SeenEntry] = field(default_factory=dict)
    below: Mapping[str, LeftWork] = field(default_factory=dict)
    """Each lock held by a record-named holder with processes below it: what they are."""


@dataclass(frozen=True, eq=False)
class Unreadable:
    """A journal line this version cannot read: kept as it was, reported by the fold."""

    KIND: ClassVar[str] = ""
    raw: Mapping[str, Any]
    problem: str

    @property
    def kind(self) -> str:
        return str(self.raw.get("type"))


JournalRecord = (
    RunRecord
    | OpenRecord
    | CloseRecord
    | DueRecord
    | SentRecord
    | GiveUpRecord
    | SightingRecord
    | RemovedRecord
    | SeenRecord
    | Unreadable
)


class _Malformed(Exception):
    """A key missing or of the wrong type: the record is Unreadable."""


def to_json(record: JournalRecord) -> dict[str, Any]:
    """The record as the journal stores it."""
    if isinstance(record, Unreadable):
        return dict(record.raw)
    body: dict[str, Any] = {"type": record.KIND, "at": format_time(record.at)}
    match record:
        case RunRecord():
            body["locks"] = {name: list(value) for name, value in record.locks.items()}
        case OpenRecord():
            body |= {
                "incident": record.incident,
                "lock": record.lock,
                "key": record.key,
                "class": record.state_class,
                "path": record.path,
                "holder": record.holder,
                "held_since": _time_or_none(record.held_since),
            }
        case CloseRecord():
            body |= {"incident": record.incident, "why": record.why}
        case DueRecord():
            body |= {
                "incident": record.incident,
                "message": record.message,
                "kind": record.kind,
                "title": record.title,
                "markdown": record.markdown,
                "text": record.text,
                "notify_type": record.notify_type,
                "tags": list(record.tags),
                "targets": None if record.targets is None else list(record.targets),
            }
            if record.lock is not None:
                body["lock"] = record.lock
        case SentRecord():
            body |= {
                "message": record.message,
                "service": record.service,
                "url": record.url,
                "ok": record.ok,
                "status": record.status,
            }
        case GiveUpRecord():
            body |= {"message": record.message, "services": list(record.services)}
            if record.why is not None:
                body["why"] = record.why
        case SightingRecord():
            body |= {"lock": record.lock, "key": record.key, "path": record.path}
            body["proof"] = record.proof
        case RemovedRecord():
            body |= {"lock": record.lock, "key": record.key, "path": record.path}
            body |= {"quarantine": record.quarantine, "proof": record.proof}
        case SeenRecord():
            body["locks"] = {name: _seen_entry(entry) for name, entry in record.locks.items()}
            if record.below:
                body["below"] = {name: _left_work(left) for name, left in record.below.items()}
    return body


def from_json(value: Mapping[str, Any]) -> JournalRecord:
    """A stored record (a JSON object with a `type`) as its dataclass; Unreadable when its
    kind is unknown or its shape wrong."""
    reader = _READERS.get(str(value.get("type")))
    if reader is None:
        return Unreadable(value, f"a kind this version does not know ({value.get('type')!r})")
    try:
        return reader(_Fields(value))
    except _Malformed as problem:
        return Unreadable(value, str(problem))


def _moment(text: Any) -> datetime | None:
    """A stored moment, or None for anything that is not one, or that could not be written
    back (year 9999 west of UTC: compaction writes every record again)."""
    found = parse_time(text)
    if found is None:
        return None
    try:
        found.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return found


def _time_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else format_time(moment)


def _seen_entry(entry: SeenEntry) -> list[str]:
    moments = [entry.identity, format_time(entry.since)]
    return moments if entry.seen_at is None else [*moments, format_time(entry.seen_at)]


def _left_work(left: LeftWork) -> dict[str, Any]:
    work = [[pid, ticks, name] for pid, ticks, name in left.work]
    more = {"more": True} if left.more else {}  # an earlier version's file has none
    return {"holder": left.holder, "boot": left.boot_id, "work": work} | more


class _Fields:
    """Typed reads of one stored record's keys, each raising _Malformed when wrong."""

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value
        self.at = self.moment("at")

    def text(self, key: str) -> str:
        found = self.value.get(key)
        if not isinstance(found, str):
            raise _Malformed(f"{key} is {'missing' if found is None else 'not text'}")
        return found

    def optional_text(self, key: str, default: str | None = None) -> str | None:
        found = self.value.get(key)
        if found is None:
            return default
        if not isinstance(found, str):
            raise _Malformed(f"{key} is not text")
        return found

    def moment(self, key: str) -> datetime:
        found = _moment(self.value.get(key))
        if found is None:
            raise _Malformed(f"{key} is not a moment ({self.value.get(key)!r})")
        return found

    def optional_moment(self, key: str) -> datetime | None:
        return None if self.value.get(key) is None else self.moment(key)

    def texts(self, key: str) -> tuple[str, ...]:
        found = self.value.get(key)
        if found is None:
            return ()
        if not isinstance(found, list) or not all(isinstance(item, str) for item in found):
            raise _Malformed(f"{key} is not a list of text")
        return tuple(found)

    def table(self, key: str) -> dict[str, Any]:
        found = self.value.get(key)
        if not isinstance(found, dict):
            raise _Malformed(f"{key} is not a table")
        return found


def _run(fields: _Fields) -> RunRecord:
    locks: dict[str, tuple[str, str | None]] = {}
    for name, value in fields.table("locks").items():
        if not (isinstance(value, list) and value and isinstance(value[0], str)):
            raise _Malformed(f"locks.{name} is not [class, key]")
        key = value[1] if len(value) > 1 else None
        locks[str(name)] = (value[0], key if isinstance(key, str) else None)
    return RunRecord(fields.at, locks)


def _open(fields: _Fields) -> OpenRecord:
    return OpenRecord(
        at=fields.at,
        incident=fields.text("incident"),
        lock=fields.text("lock"),
        key=fields.text("key"),
        state_class=fields.text("class"),
        path=fields.optional_text("path") or "",
        holder=fields.optional_text("holder"),
        held_since=fields.optional_moment("held_since"),
    )


def _close(fields: _Fields) -> CloseRecord:
    return CloseRecord(fields.at, fields.text("incident"), fields.optional_text("why"))


def _due(fields: _Fields) -> DueRecord:
    targets = None if fields.value.get("targets") is None else fields.texts("targets")
    return DueRecord(
        at=fields.at,
        incident=fields.text("incident"),
        message=fields.text("message"),
        kind=fields.text("kind"),
        title=fields.text("title"),
        markdown=fields.text("markdown"),
        text=fields.text("text"),
        notify_type=fields.optional_text("notify_type") or "info",
        tags=fields.texts("tags"),
        targets=targets,
        lock=fields.optional_text("lock"),
    )


def _sent(fields: _Fields) -> SentRecord:
    ok = fields.value.get("ok")
    if not isinstance(ok, bool):
        raise _Malformed("ok is not true or false")
    return SentRecord(
        at=fields.at,
        message=fields.text("message"),
        service=fields.text("service"),
        ok=ok,
        status=str(fields.value.get("status")),
        url=fields.optional_text("url") or "?",
    )


def _giveup(fields: _Fields) -> GiveUpRecord:
    services = fields.texts("services")
    return GiveUpRecord(fields.at, fields.text("message"), services, fields.optional_text("why"))


def _sighting(fields: _Fields) -> SightingRecord:
    return SightingRecord(
        at=fields.at,
        lock=fields.text("lock"),
        key=fields.text("key"),
        path=fields.optional_text("path") or "",
        proof=fields.optional_text("proof"),
    )


def _removed(fields: _Fields) -> RemovedRecord:
    return RemovedRecord(
        at=fields.at,
        lock=fields.text("lock"),
        key=fields.text("key"),
        path=fields.optional_text("path") or "",
        quarantine=fields.optional_text("quarantine") or "",
        proof=fields.optional_text("proof"),
    )


def _seen(fields: _Fields) -> SeenRecord:
    locks: dict[str, SeenEntry] = {}
    for name, value in fields.table("locks").items():
        moments = [_moment(item) for item in value[1:]] if isinstance(value, list) else []
        if not (
            isinstance(value, list)
            and len(value) in (2, 3)
            and isinstance(value[0], str)
            and None not in moments
        ):
            raise _Malformed(f"locks.{name} is not [identity, since(, seen_at)]")
        since, *seen_at = (moment for moment in moments if moment is not None)
        locks[str(name)] = SeenEntry(value[0], since, seen_at[0] if seen_at else None)
    below = fields.table("below") if "below" in fields.value else {}
    left = {str(name): _read_left(name, value) for name, value in below.items()}
    return SeenRecord(fields.at, locks, left)


def _read_left(name: str, value: object) -> LeftWork:
    problem = _Malformed(
        f"below.{name} is not {{holder, boot, work: [[pid, ticks, name]](, more: true)}}"
    )
    if not isinstance(value, dict):
        raise problem
    holder, boot, work = value.get("holder"), value.get("boot"), value.get("work")
    if not (_is_int(holder) and isinstance(boot, str) and isinstance(work, list)):
        raise problem
    more = value.get("more", False)
    if not isinstance(more, bool):
        raise problem
    rows = []
    for row in work:
        if not (isinstance(row, list) and len(row) == 3):
            raise problem
        pid, ticks, comm = row
        if not (_is_int(pid) and _is_int(ticks) and isinstance(comm, str)):
            raise problem
        rows.append((pid, ticks, comm))
    return LeftWork(holder, boot, tuple(rows), more)


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


_READERS: dict[str, Callable[[_Fields], JournalRecord]] = {
    RunRecord.KIND: _run,
    OpenRecord.KIND: _open,
    CloseRecord.KIND: _close,
    DueRecord.KIND: _due,
    SentRecord.KIND: _sent,
    GiveUpRecord.KIND: _giveup,
    SightingRecord.KIND: _sighting,
    RemovedRecord.KIND: _removed,
    SeenRecord.KIND: _seen,
}
