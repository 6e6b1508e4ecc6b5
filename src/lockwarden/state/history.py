"""The journal's records folded into what dedupe needs: runs, incidents, messages, deliveries.

Pure: records in, typed history out. The record kinds (one JSON object per line):

* ``run``      ``{at, locks: {name: [class, key]}}`` — only locks that were not good;
* ``open``     ``{at, incident, lock, key, class, path, holder, held_since}``;
* ``due``      ``{at, incident, message, kind, title, markdown, text, tags, targets}`` — written
  before sending, so a crash mid-send is retried (at most one duplicate), never lost;
* ``sent``     ``{at, message, service, url, ok, status}`` — one per service and attempt;
  ``url`` is apprise's privacy form, never the URL itself;
* ``close``    ``{at, incident, why}``;
* ``giveup``   ``{at, message, services}`` — undeliverable after give_up_after.
* ``sighting`` ``{at, lock, key, path, proof}`` — `remove_stale`: the first run that saw this
  stale lock (its key names the finding's identity, the inode and a digest of the record);
* ``removed``  ``{at, lock, key, path, quarantine, proof}`` — a stale lock moved aside and deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lockwarden.state.journal import Record, encode
from lockwarden.support.durations import parse_time

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
    said is left out, and the run says so (stage.load_history logs each at warning)."""

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


def fold(records: list[Record]) -> History:
    """The records, in order, into a History. A record of a shape this version cannot read
    teaches nothing, and the rest still counts; it is listed in `malformed`, never skipped in
    silence (a lost `open` or `sent` means a duplicate alert, which a person should hear of)."""
    history = History()
    for number, record in enumerate(records, start=1):
        try:
            _apply(history, record)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            history.malformed.append(_malformed(number, record, error))
    return history


def _malformed(number: int, record: Record, error: Exception) -> str:
    kind = record.get("type") if isinstance(record, dict) else None
    what = f"missing {error}" if isinstance(error, KeyError) else type(error).__name__
    return f"record {number} ({kind!r} at {record.get('at')!r}) cannot be read: {what}"


def _apply(history: History, record: Record) -> None:
    kind = record["type"]
    at = parse_time(record.get("at"))
    if at is None:
        return
    if kind == "run":
        locks = {str(name): (str(v[0]), v[1]) for name, v in dict(record["locks"]).items()}
        history.runs.append(RunSummary(at, locks))
    elif kind == "open":
        history.incidents[record["incident"]] = Incident(
            incident_id=record["incident"],
            lock=record["lock"],
            key=record["key"],
            state_class=record["class"],
            path=record.get("path") or "",
            holder=record.get("holder"),
            opened_at=at,
            held_since=parse_time(record.get("held_since")),
        )
    elif kind == "close":
        incident = history.incidents.get(record["incident"])
        if incident is not None and incident.open:
            incident.closed_at, incident.why_closed = at, record.get("why")
    elif kind == "due":
        _apply_due(history, record, at)
    elif kind == "sent":
        message = history.messages.get(record["message"])
        if message is not None:
            message.attempts.append(
                Attempt(
                    at,
                    record["service"],
                    record.get("url", "?"),
                    bool(record["ok"]),
                    str(record.get("status")),
                )
            )
    elif kind == "giveup":
        message = history.messages.get(record["message"])
        if message is not None:
            message.gave_up.update(record["services"])
    elif kind in ("sighting", "removed"):
        _apply_removal(history, kind, str(record["lock"]), str(record["key"]), at)


def _apply_removal(history: History, kind: str, lock: str, key: str, at: datetime) -> None:
    """A sighting of a new key replaces the lock's last one; a removal ends it."""
    current = history.sightings.get(lock)
    if kind == "removed":
        if current is not None and current.key == key:
            del history.sightings[lock]
    elif current is None or current.key != key:
        history.sightings[lock] = Sighting(key, at)


def _apply_due(history: History, record: Record, at: datetime) -> None:
    targets = None if record.get("targets") is None else tuple(record["targets"])
    previous = history.messages.get(record["message"])
    if previous is not None:  # its services resolved later: the same message, now addressed
        previous.targets = targets
        return
    message = Sent(
        message_id=record["message"],
        incident=record["incident"],
        kind=record["kind"],
        due_at=at,
        title=record["title"],
        markdown=record["markdown"],
        text=record["text"],
        tags=tuple(record.get("tags") or ()),
        targets=targets,
        notify_type=str(record.get("notify_type") or "info"),
    )
    history.messages[message.message_id] = message
    incident = history.incidents.get(message.incident)
    if incident is not None:
        incident.messages.append(message)


def keep_for_dedupe(
    records: list[Record], keep_runs: int = KEEP_RUNS, closed_budget: int | None = None
) -> list[Record]:
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
    runs = [index for index, record in enumerate(records) if record.get("type") == "run"]
    kept_runs = set(runs[-keep_runs:])
    kept: list[Record] = []
    for index, record in enumerate(records):
        kind = record.get("type")
        if kind == "run" and index not in kept_runs:
            continue
        if record.get("incident") in dropped or record.get("message") in dropped_messages:
            continue
        kept.append(record)
    return kept


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


def _incident_sizes(records: list[Record], history: History) -> dict[str, int]:
    """Bytes each incident's records take in the journal (its messages' deliveries too)."""
    sizes: dict[str, int] = {}
    for record in records:
        incident = record.get("incident")
        if not isinstance(incident, str):
            message = history.messages.get(str(record.get("message")))
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


def keep_for_removal(records: list[Record]) -> list[Record]:
    """What compaction keeps of `remove_stale`'s records: each lock's current sighting (the
    record that started it, so the confirm delay is never shortened) and the last
    KEEP_REMOVALS removals; superseded sightings go."""
    current = fold(records).sightings
    removals = [index for index, record in enumerate(records) if record.get("type") == "removed"]
    kept_removals = set(removals[-KEEP_REMOVALS:])
    kept: list[Record] = []
    started: set[str] = set()
    for index, record in enumerate(records):
        kind = record.get("type")
        if kind == "removed" and index not in kept_removals:
            continue
        if kind == "sighting":
            lock = record.get("lock")
            sighting = current.get(lock) if isinstance(lock, str) else None
            if sighting is None or lock in started or not _starts(record, sighting):
                continue
            started.add(str(lock))
        kept.append(record)
    return kept


def _starts(record: Record, sighting: Sighting) -> bool:
    return record.get("key") == sighting.key and parse_time(record.get("at")) == sighting.first_at
