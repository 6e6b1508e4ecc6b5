"""The journal's records (state/records.py, where each kind is described) folded into what
dedupe needs: runs, incidents, messages, deliveries, and what `remove_stale` has seen.

Pure: typed records in, typed history out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lockwarden.state.journal import encode
from lockwarden.state.records import (
    CloseRecord,
    DueRecord,
    GiveUpRecord,
    JournalRecord,
    OpenRecord,
    RemovedRecord,
    RunRecord,
    SentRecord,
    SightingRecord,
    Unreadable,
)

GOOD = "good"
# The kinds of message an incident journals (its "due" and "sent" records' `kind`).
ALERT = "alert"
REMINDER = "reminder"
RESOLVED = "resolved"
UNRESOLVED = "*"  # a message due before its services were known: every matching service
KEEP_CLOSED_INCIDENTS = 50
KEEP_RUNS = 5  # at least; compaction keeps max(resolve_after, unknown_after) + 1 if more


@dataclass
class Attempt:
    """One delivery attempt of a message to one service, as the journal recorded it."""

    at: datetime
    service: str
    url: str
    ok: bool
    status: str


@dataclass
class Sent:
    """One message an incident produced, and what each service did with it."""

    message_id: str
    incident: str
    kind: str
    due_at: datetime
    title: str
    markdown: str
    text: str
    tags: tuple[str, ...]
    targets: tuple[str, ...] | None
    attempts: list[Attempt] = field(default_factory=list)
    notify_type: str = "info"  # apprise's notify type: journals before it had none
    gave_up: set[str] = field(default_factory=set)

    @property
    def delivered(self) -> set[str]:
        return {attempt.service for attempt in self.attempts if attempt.ok}

    @property
    def pending(self) -> tuple[str, ...]:
        done = self.delivered | self.gave_up
        targets = (UNRESOLVED,) if self.targets is None else self.targets
        return tuple(service for service in targets if service not in done)


@dataclass
class Incident:
    """One bad episode of one lock with one holder, folded from the journal."""

    incident_id: str
    lock: str
    key: str
    state_class: str
    path: str
    holder: str | None
    opened_at: datetime
    held_since: datetime | None
    closed_at: datetime | None = None
    why_closed: str | None = None
    messages: list[Sent] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.closed_at is None

    @property
    def last_notice_at(self) -> datetime:
        notices = [m.due_at for m in self.messages if m.kind in (ALERT, REMINDER)]
        return max(notices, default=self.opened_at)

    def superseded_reminders(self) -> set[str]:
        """Delivered reminders older than the latest: dedupe needs only the latest one."""
        reminders = [m for m in self.messages if m.kind == REMINDER and not m.pending]
        latest = max((m.due_at for m in reminders), default=None)
        return {m.message_id for m in reminders if m.due_at != latest}


@dataclass(frozen=True)
class RunSummary:
    """What a journaled run recorded about one lock."""

    at: datetime
    locks: dict[str, tuple[str, str | None]]

    def state_class(self, lock: str) -> str:
        return self.locks.get(lock, (GOOD, None))[0]


@dataclass(frozen=True)
class Sighting:
    """The first run that saw a lock stale with this key (removal needs two, far enough apart)."""

    key: str
    first_at: datetime


@dataclass
class History:
    """Everything the journal says, folded: incidents, runs, sightings."""

    runs: list[RunSummary] = field(default_factory=list)
    incidents: dict[str, Incident] = field(default_factory=dict)
    messages: dict[str, Sent] = field(default_factory=dict)
    sightings: dict[str, Sighting] = field(default_factory=dict)
    malformed: list[str] = field(default_factory=list)
    """Records whose shape the fold could not read (a missing key, a wrong type): what they
    said is left out, and the run says so (RunState.history logs each at warning, once a run)."""

    def open_incident(self, lock: str) -> Incident | None:
        found = [i for i in self.incidents.values() if i.open and i.lock == lock]
        return max(found, key=lambda incident: incident.opened_at, default=None)

    def open_incidents(self) -> list[Incident]:
        return [incident for incident in self.incidents.values() if incident.open]

    def pending_messages(self) -> list[Sent]:
        return [message for message in self.messages.values() if message.pending]

    def streak(self, lock: str, state_class: str) -> int:
        """How many of the latest recorded runs in a row saw `lock` in `state_class`."""
        count = 0
        for run in reversed(self.runs):
            if run.state_class(lock) != state_class:
                break
            count += 1
        return count


def fold(records: list[JournalRecord]) -> History:
    """The records, in order, into a History. A record of a shape this version cannot read
    teaches nothing, and the rest still counts; it is listed in `malformed`, never skipped in
    silence (a lost `open` or `sent` means a duplicate alert, which a person should hear of)."""
    history = History()
    for number, record in enumerate(records, start=1):
        if isinstance(record, Unreadable):
            at = record.raw.get("at")
            history.malformed.append(
                f"record {number} ({record.kind!r} at {at!r}) cannot be read: {record.problem}"
            )
        else:
            _apply(history, record)
    return history


def _apply(history: History, record: JournalRecord) -> None:
    match record:
        case RunRecord():
            history.runs.append(RunSummary(record.at, dict(record.locks)))
        case OpenRecord():
            history.incidents[record.incident] = Incident(
                incident_id=record.incident,
                lock=record.lock,
                key=record.key,
                state_class=record.state_class,
                path=record.path,
                holder=record.holder,
                opened_at=record.at,
                held_since=record.held_since,
            )
        case CloseRecord():
            incident = history.incidents.get(record.incident)
            if incident is not None and incident.open:
                incident.closed_at, incident.why_closed = record.at, record.why
        case DueRecord():
            _apply_due(history, record)
        case SentRecord():
            message = history.messages.get(record.message)
            if message is not None:
                message.attempts.append(
                    Attempt(record.at, record.service, record.url, record.ok, record.status)
                )
        case GiveUpRecord():
            message = history.messages.get(record.message)
            if message is not None:
                message.gave_up.update(record.services)
        case SightingRecord() | RemovedRecord():
            _apply_removal(history, record)


def _apply_removal(history: History, record: SightingRecord | RemovedRecord) -> None:
    """A sighting of a new key replaces the lock's last one; a removal ends it."""
    current = history.sightings.get(record.lock)
    if isinstance(record, RemovedRecord):
        if current is not None and current.key == record.key:
            del history.sightings[record.lock]
    elif current is None or current.key != record.key:
        history.sightings[record.lock] = Sighting(record.key, record.at)


def _apply_due(history: History, record: DueRecord) -> None:
    previous = history.messages.get(record.message)
    if previous is not None:  # its services resolved later: the same message, now addressed
        previous.targets = record.targets
        return
    message = Sent(
        message_id=record.message,
        incident=record.incident,
        kind=record.kind,
        due_at=record.at,
        title=record.title,
        markdown=record.markdown,
        text=record.text,
        tags=record.tags,
        targets=record.targets,
        notify_type=record.notify_type,
    )
    history.messages[message.message_id] = message
    incident = history.incidents.get(message.incident)
    if incident is not None:
        incident.messages.append(message)


def keep_for_dedupe(
    records: list[JournalRecord], keep_runs: int = KEEP_RUNS, closed_budget: int | None = None
) -> list[JournalRecord]:
    """What compaction keeps: open incidents, incidents with messages still pending, the last
    KEEP_CLOSED_INCIDENTS closed ones (for `history`), and the last `keep_runs` run records;
    of an incident's delivered reminders only the latest (a week-long incident stays small).

    `closed_budget` (bytes) caps what the kept closed incidents may weigh, newest first: were
    they to fill the journal past its compaction threshold, every run (quiet ones included)
    would compact it again. Open and pending incidents are never dropped for size."""
    history = fold(records)
    closed = sorted(
        (i for i in history.incidents.values() if not i.open and not _has_pending(i)),
        key=lambda incident: incident.closed_at or incident.opened_at,
    )
    kept_closed = closed[-KEEP_CLOSED_INCIDENTS:]
    if closed_budget is not None:
        kept_closed = _within(kept_closed, _incident_sizes(records, history), closed_budget)
    dropped = {incident.incident_id for incident in closed} - {
        incident.incident_id for incident in kept_closed
    }
    dropped_messages = {
        message_id for message_id, m in history.messages.items() if m.incident in dropped
    }
    for incident in history.incidents.values():
        dropped_messages |= incident.superseded_reminders()
    dropped_messages |= _old_orphans(history)
    runs = [index for index, record in enumerate(records) if isinstance(record, RunRecord)]
    kept_runs = set(runs[-keep_runs:])
    kept: list[JournalRecord] = []
    for index, record in enumerate(records):
        if isinstance(record, RunRecord) and index not in kept_runs:
            continue
        if _incident_of(record) in dropped or _message_of(record) in dropped_messages:
            continue
        kept.append(record)
    return kept


def _incident_of(record: JournalRecord) -> str | None:
    if isinstance(record, OpenRecord | CloseRecord | DueRecord):
        return record.incident
    if isinstance(record, Unreadable):
        found = record.raw.get("incident")
        return found if isinstance(found, str) else None
    return None


def _message_of(record: JournalRecord) -> str | None:
    if isinstance(record, DueRecord | SentRecord | GiveUpRecord):
        return record.message
    if isinstance(record, Unreadable):
        found = record.raw.get("message")
        return found if isinstance(found, str) else None
    return None


def _old_orphans(history: History) -> set[str]:
    """Delivered messages of no journaled incident (a stale lock removed before any alert
    opened one) beyond the latest KEEP_CLOSED_INCIDENTS: else they would pile up forever."""
    orphans = sorted(
        (
            message
            for message in history.messages.values()
            if message.incident not in history.incidents and not message.pending
        ),
        key=lambda message: message.due_at,
    )
    old = orphans[: max(0, len(orphans) - KEEP_CLOSED_INCIDENTS)]
    return {message.message_id for message in old}


def _incident_sizes(records: list[JournalRecord], history: History) -> dict[str, int]:
    """Bytes each incident's records take in the journal (its messages' deliveries too)."""
    sizes: dict[str, int] = {}
    for record in records:
        incident = _incident_of(record)
        if incident is None:
            message = history.messages.get(_message_of(record) or "")
            incident = message.incident if message is not None else None
        if isinstance(incident, str):
            sizes[incident] = sizes.get(incident, 0) + len(encode(record))
    return sizes


def _within(incidents: list[Incident], sizes: dict[str, int], budget: int) -> list[Incident]:
    """The newest of `incidents` (oldest first) whose sizes add up to at most `budget`."""
    total = 0
    kept: list[Incident] = []
    for incident in reversed(incidents):
        total += sizes.get(incident.incident_id, 0)
        if total > budget:
            break
        kept.append(incident)
    return kept[::-1]


def _has_pending(incident: Incident) -> bool:
    return any(message.pending for message in incident.messages)


KEEP_REMOVALS = 20


def keep_for_removal(records: list[JournalRecord]) -> list[JournalRecord]:
    """What compaction keeps of `remove_stale`'s records: each lock's current sighting (the
    record that started it, so the confirm delay is never shortened) and the last
    KEEP_REMOVALS removals; superseded sightings go."""
    current = fold(records).sightings
    removals = [i for i, record in enumerate(records) if isinstance(record, RemovedRecord)]
    kept_removals = set(removals[-KEEP_REMOVALS:])
    kept: list[JournalRecord] = []
    started: set[str] = set()
    for index, record in enumerate(records):
        if isinstance(record, RemovedRecord) and index not in kept_removals:
            continue
        if isinstance(record, SightingRecord):
            sighting = current.get(record.lock)
            if sighting is None or record.lock in started or not _starts(record, sighting):
                continue
            started.add(record.lock)
        kept.append(record)
    return kept


def _starts(record: SightingRecord, sighting: Sighting) -> bool:
    return record.key == sighting.key and record.at == sighting.first_at
