"""The alert stage of a run: journal -> decide -> notify -> journal append.

Order matters for "never lose an alert, never storm": the decision records and each message's
`due` record (with its target services) are appended *before* sending, and each service's
result after. A crash mid-send is then retried next run (at most one duplicate), never lost.
A broken journal never stops an alert: the messages still go out, and the run reports the
state problem (severity unknown) and sends one "state degraded" notice.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lockwarden.alerts.decide import LockPolicy, Outgoing, Plan, Retry, decide
from lockwarden.check.blocked import is_blocked_name
from lockwarden.check.sightings import keep_latest_seen
from lockwarden.config import Config
from lockwarden.model import Finding, own_finding
from lockwarden.state.history import (
    KEEP_RUNS,
    UNRESOLVED,
    History,
    fold,
    keep_for_dedupe,
    keep_for_removal,
)
from lockwarden.state.journal import (
    Journal,
    StateError,
    default_state_path,
    state_directory_of,
)
from lockwarden.state.records import DueRecord, GiveUpRecord, JournalRecord, SentRecord
from lockwarden.support.checkpoints import Checkpoint, skip
from lockwarden.support.durations import format_duration, format_time

if TYPE_CHECKING:
    from lockwarden.alerts.messages import Message
    from lockwarden.alerts.notify import Delivery, Notifier

log = logging.getLogger(__name__)

STATE_FINDING = "lockwarden:state"
NOTICE_ID = "state-degraded"  # the per-run notice: never journaled, so never retried
NOTIFY_FINDING = "lockwarden:notify"


@dataclass(frozen=True, eq=False)
class Sending:
    """One message sent (or not) to one service this run."""

    message_id: str
    kind: str
    lock: str
    title: str
    service_url: str
    ok: bool
    status: str
    service_origin: str = ""  # where the service was configured: `notify.urls[1]`, ...


@dataclass
class AlertOutcome:
    """What the alert stage decided, sent and could not do."""

    plan: Plan
    state_path: str
    deliveries: list[Sending] = field(default_factory=list)
    state_problems: list[str] = field(default_factory=list)
    notify_problem: str | None = None
    unsent: int = 0
    invalid_services: list[str] = field(default_factory=list)  # `notify.urls[1]: why`
    unrouted: list[str] = field(default_factory=list)  # `lock db: notify_tags x match no ...`
    unrouted_messages: int = 0  # messages of this run that no service was to get
    dropped: list[str] = field(default_factory=list)  # retries to services since removed
    last_delivered_at: datetime | None = None  # the journal's latest confirmed delivery

    @property
    def failed(self) -> bool:
        """The run could not do its whole job (for the heartbeat's /fail)."""
        return bool(
            self.state_problems
            or self.notify_problem
            or self.invalid_services
            or self.unrouted
            or self.plan.given_up
            or any(not d.ok for d in self.deliveries)
        )

    @property
    def undelivered(self) -> int:
        """Messages that some service did not confirm this run (retried next run), plus those
        given up on: what the textfile counts as undelivered."""
        failed = {d.message_id for d in self.deliveries if not d.ok and d.message_id != NOTICE_ID}
        unsent = self.unsent if self.notify_problem else 0
        return len(failed) + len(self.plan.given_up) + unsent + self.unrouted_messages


def state_path(config: Config) -> str:
    return config.state.path or default_state_path()


def policies(
    config: Config, findings: Sequence[Finding] = (), history: History | None = None
) -> dict[str, LockPolicy]:
    """Each configured lock's; a blocked writer's finding, or its open incident (no
    [[lock]] of its own), gets the [alerts] section's settings."""
    names = [finding.name for finding in findings]
    names += [incident.lock for incident in history.open_incidents()] if history else []
    blocked_writers = {name: LockPolicy(config.alerts) for name in names if is_blocked_name(name)}
    return blocked_writers | {
        lock.name: LockPolicy(lock.alerts, lock.notify_tags, lock.role) for lock in config.locks
    }


class JournalWriter:
    """Appends records; after the first failure it stops trying and remembers why.

    With a `fallback` journal (the runtime directory's), a record the journal cannot take goes
    there instead, and so does every later one: a journal that loads but cannot be written
    (read-only, full) then still remembers what this run sent, and the next run does not send
    it again."""

    def __init__(
        self, journal: Journal, problems: list[str], fallback: Journal | None = None
    ) -> None:
        self.journal = journal
        self.problems = problems
        self.broken = False
        self.fallback = fallback

    def append(self, record: JournalRecord) -> None:
        if self.broken:
            return
        try:
            self.journal.append(record)
        except StateError as error:
            self.problems.append(str(error))
            if (
                self.fallback is None
                or self.fallback is self.journal
                or not _private_directory(self.fallback.directory)
            ):
                self.broken = True
                return
            self.journal.close()
            self.journal = self.fallback
            self.append(record)


def load_history(
    journal: Journal,
    problems: list[str],
    read_only: bool,
    last_delivery: list[datetime] | None = None,
) -> History:
    """The journal's history; a state problem is noted and the run goes on with none."""
    try:
        if not read_only:  # only a run that will write may create the state directory
            journal.check_directory()
        records = journal.load().records
        if last_delivery is not None:
            last_delivery.extend(_last_delivery(records))
        history = fold(records)
        for problem in history.malformed:  # what it said is not known: a duplicate may follow
            log.warning("%s: %s; what it said was left out", journal.path, problem)
        return history
    except StateError as error:
        problems.append(str(error))
        return History()


def _last_delivery(records: list[JournalRecord]) -> list[datetime]:
    times = (record.at for record in records if isinstance(record, SentRecord) and record.ok)
    latest = max(times, default=None)
    return [] if latest is None else [latest]


def alert_stage(
    config: Config,
    findings: tuple[Finding, ...],
    hostname: str,
    now: datetime,
    dry_run: bool = False,
    extra: tuple[Outgoing, ...] = (),
    state_unusable: str | None = None,
    checkpoint: Checkpoint = skip,
    still_blocked: frozenset[str] = frozenset(),
) -> AlertOutcome:
    """Decide, send, journal. With no [notify] service configured, alerting is off: the
    journal is only read (never created), and the report says how many alerts were due.
    `extra` are messages an earlier stage of the run wants sent (a stale lock removed).
    `still_blocked`: blocked-writer findings this run saw within their budget (their count
    started over): their incidents are not over.
    `state_unusable`: why the state directory is not touched this run (a hung mount).
    `checkpoint`: called at each step of the run (checkpoints.py)."""
    journal = Journal(state_path(config), config.state.max_bytes, state_unusable, checkpoint)
    problems: list[str] = []
    read_only = dry_run or not config.notify.configured
    delivered_before: list[datetime] = []
    history = load_history(journal, problems, read_only, delivered_before)
    fallback = None if read_only else _fallback_journal(config)
    if fallback is not None:
        journal, history = _with_fallback(journal, history, fallback, problems)
    plan = decide(
        findings, history, now, policies(config, findings, history), hostname, still_blocked
    )
    plan.outgoing[:0] = extra  # what this run did to a lock comes before its "resolved"
    checkpoint("after-decide")
    outcome = AlertOutcome(plan, journal.path, state_problems=problems)
    outcome.last_delivered_at = delivered_before[0] if delivered_before else None
    if read_only:
        outcome.state_problems = [] if not dry_run else problems
        outcome.unsent = 0 if dry_run else len(plan.outgoing)
        if dry_run and config.notify.configured:  # what a real run would say of the services
            _said(outcome, _check_now(config))
        return outcome
    writer = JournalWriter(journal, problems, fallback)
    for record in plan.records:
        writer.append(record)
    _deliver(config, plan, writer, outcome, hostname, now)
    _compact(writer.journal, writer, config)
    journal.close()
    writer.journal.close()
    return outcome


def _deliver(
    config: Config,
    plan: Plan,
    writer: JournalWriter,
    outcome: AlertOutcome,
    hostname: str,
    now: datetime,
) -> None:
    wants_notice = (
        bool(outcome.state_problems)
        or _read_marker(degraded_marker(state_path(config))) is not None
    )
    if not (plan.sends_anything or wants_notice):
        if config.notify.configured:
            _said(outcome, _remembered_check(config))
        return
    from lockwarden.alerts.notify import Notifier, NotifyConfigError  # only a run that sends

    try:
        notifier = Notifier(config.notify, checkpoint=writer.journal.checkpoint)
    except NotifyConfigError as error:
        _said(outcome, _remember_check(config, NotifyCheck(problem=str(error))))
        outcome.unsent = len(plan.outgoing) + len(plan.retries)
        for item in plan.outgoing:  # targets unresolved: sent once notify works again
            writer.append(_due_record(item, None, now))
        return
    _said(outcome, _remember_check(config, _checked(notifier, config)))
    if not notifier.services:  # every URL unusable (said above): kept for when one works
        outcome.unsent = len(plan.outgoing) + len(plan.retries)
        for item in plan.outgoing:
            writer.append(_due_record(item, None, now))
        return
    for retry in plan.retries:  # one due while notify was broken is routed only now
        if UNRESOLVED in retry.services and not notifier.targets(retry.sent.tags):
            outcome.unrouted_messages += 1
    jobs = [_retry(notifier, retry, writer, now, outcome) for retry in plan.retries]
    for item in plan.outgoing:  # each one's due record is journaled before anything is sent
        targets = notifier.targets(item.tags)
        if not targets and notifier.services:  # sent to nobody: counted as undelivered
            outcome.unrouted_messages += 1
        writer.append(_due_record(item, targets, now))
        jobs.append(Job(item.message_id, item.kind, item.lock, item.message, targets))
    notice = _degraded_notice(notifier, outcome, state_path(config), hostname, now)
    if notice is not None:
        jobs.append(notice)
    # One batch: each service sends its messages in its own thread, so a hanging service
    # holds back neither another service nor this run past its budget.
    results = notifier.send_batch([(job.message, job.targets) for job in jobs])
    for job, sent in zip(jobs, results, strict=True):
        _record(writer, outcome, job.message_id, job.kind, job.lock, job.message, sent, now)
        if job.message_id == NOTICE_ID:
            _remember_notice(outcome, state_path(config), sent)
    for sending in outcome.deliveries:
        if sending.ok:
            outcome.last_delivered_at = now


@dataclass(frozen=True, eq=False)
class Job:
    """One message to send this run, and the services to send it to."""

    message_id: str
    kind: str
    lock: str
    message: Message
    targets: tuple[str, ...]


def _degraded_notice(
    notifier: Notifier, outcome: AlertOutcome, path: str, hostname: str, now: datetime
) -> Job | None:
    """One notice per cause of degradation, and one when it is over: remembered by a marker
    in the runtime directory (the state directory is the thing that is broken)."""
    from lockwarden.alerts.messages import render_state_degraded, render_state_healthy

    said = _read_marker(degraded_marker(path))
    if outcome.state_problems:
        cause = _cause(outcome)
        if cause == said:
            return None  # said already; stderr, the report and the textfile say it each run
        notice = render_state_degraded(cause, hostname, now)
        kind = "state degraded notice"
    elif said is not None:
        notice = render_state_healthy(said, hostname, now)
        kind = "state healthy notice"
    else:
        return None
    return Job(NOTICE_ID, kind, "", notice, notifier.targets(()))


def _cause(outcome: AlertOutcome) -> str:
    return "; ".join(dict.fromkeys(outcome.state_problems))


def _remember_notice(outcome: AlertOutcome, path: str, sent: list[Delivery]) -> None:
    marker = degraded_marker(path)
    if marker is None or not any(delivery.ok for delivery in sent):
        return  # not told: the notice is due again next run
    if outcome.state_problems and not _private_directory(os.path.dirname(marker)):
        return
    _write_marker(marker, _cause(outcome) if outcome.state_problems else None)


def runtime_directory(state_file: str) -> str | None:
    """A private directory for what a run must remember while its state directory is broken
    (and what the last check of the notify URLs found): the unit's own $RUNTIME_DIRECTORY
    (RuntimeDirectory=lockwarden), else /run/lockwarden for root, $XDG_RUNTIME_DIR/lockwarden
    for a user (None without one); one subdirectory per state file so two configurations
    never share it."""
    given = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]  # systemd lists several so
    ours = os.path.isabs(given) and os.path.basename(given.rstrip("/")) == "lockwarden"
    base = (  # another unit's RuntimeDirectory= (a monitoring agent running us) is not ours
        given
        if ours
        else "/run/lockwarden"
        if os.geteuid() == 0
        else os.path.join(os.environ.get("XDG_RUNTIME_DIR", ""), "lockwarden")
    )
    if not os.path.isabs(base):
        return None
    # The path itself, escaped one-to-one (no hash: a quiet run checks this and must stay
    # cheap); a path too long for one file name is hashed.
    name = state_file.replace("%", "%25").replace("/", "%2F")
    if len(name) > 200:
        import hashlib

        name = hashlib.sha256(state_file.encode()).hexdigest()
    return os.path.join(base, name)


def degraded_marker(state_file: str) -> str | None:
    directory = runtime_directory(state_file)
    return None if directory is None else os.path.join(directory, "degraded-notice")


def _private_directory(directory: str) -> bool:
    from lockwarden.state.journal import check_state_dir

    try:
        os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
        check_state_dir(os.path.dirname(directory))
        check_state_dir(directory)
    except (OSError, StateError) as error:
        log.debug("no runtime directory %s: %s", directory, error)
        return False
    return True


def _read_marker(marker: str | None) -> str | None:
    """What the last notice said; None when none is remembered (a healthy run creates
    nothing here: only a degraded one makes the directory)."""
    if marker is None or not os.path.lexists(marker):
        return None
    if not _private_directory(os.path.dirname(marker)):
        return None
    return _read_private(marker)


def _read_private(marker: str) -> str | None:
    """A marker in a directory already found private; never through a symlink."""
    try:
        with open(marker, encoding="utf-8", opener=_nofollow) as handle:
            return handle.read(65536)
    except OSError:
        return None


def _write_marker(marker: str, cause: str | None) -> None:
    from lockwarden.support.atomic import write_atomically

    try:
        if cause is None:
            os.unlink(marker)
        else:
            write_atomically(marker, cause, mode=0o600)
    except OSError as error:  # then the notice may come again next run: never lost
        log.debug("cannot update %s: %s", marker, error.strerror)


# A run with nothing to send does not load apprise; it says what the last check of the notify
# services found (remembered in the runtime directory by every run that checks them), and
# checks them again when the config file, a URL file, the unit's credentials or $urls_env
# change, the host reboots (the runtime directory is gone), or an hour has passed.
NOTIFY_CHECK_S = 3600.0
NOTIFY_CHECKED = "notify-checked"
CLOCK_SLACK_S = 60.0  # a check dated further in the future than this is from a stepped clock


@dataclass(frozen=True, eq=False)
class NotifyCheck:
    """What one check of the notify services found (each line as a run reports it)."""

    invalid: tuple[str, ...] = ()  # `notify.urls[1]: nosuch://…: why`
    problem: str | None = None  # why no service can be set up at all (an unreadable urls_file)
    unrouted: tuple[str, ...] = ()  # `lock db: notify_tags x match no notify service (...)`


def _said(outcome: AlertOutcome, check: NotifyCheck | None) -> None:
    if check is not None:
        outcome.invalid_services = list(check.invalid)
        outcome.notify_problem = check.problem
        outcome.unrouted = list(check.unrouted)


def _checked(notifier: Notifier, config: Config) -> NotifyCheck:
    return NotifyCheck(
        invalid=tuple(f"{bad.origin}: {bad.shown}: {bad.problem}" for bad in notifier.invalid),
        unrouted=tuple(
            f"lock {lock.name}: {why}: its alerts reach nobody"
            for lock in config.locks
            if (why := notifier.unrouted(lock.notify_tags)) is not None
        ),
    )


def _remembered_check(config: Config) -> NotifyCheck | None:
    """On a run with nothing to send: what the last check found, else a check made now (it
    loads apprise). None where no runtime directory can remember it (a user's cron without
    $XDG_RUNTIME_DIR): then only check-config and runs that send check the services, as a
    quiet run every minute must not load apprise each time."""
    marker = _check_marker(config)
    if marker is None:
        return None
    remembered = _read_check(marker, _notify_fingerprint(config))
    if remembered is not None:
        return remembered
    return _remember_check(config, _check_now(config))


def _check_now(config: Config) -> NotifyCheck:
    """Check the notify services now (this loads apprise), remembering nothing."""
    from lockwarden.alerts.notify import Notifier, NotifyConfigError

    try:
        return _checked(Notifier(config.notify), config)
    except NotifyConfigError as error:
        return NotifyCheck(problem=str(error))


def _check_marker(config: Config) -> str | None:
    directory = runtime_directory(state_path(config))
    if directory is None or not _private_directory(directory):
        return None
    return os.path.join(directory, NOTIFY_CHECKED)


def _remember_check(config: Config, check: NotifyCheck) -> NotifyCheck:
    marker = _check_marker(config)
    if marker is not None:
        lines = [_notify_fingerprint(config), *(f"invalid\t{line}" for line in check.invalid)]
        lines += [f"problem\t{check.problem}"] if check.problem else []
        lines += [f"unrouted\t{line}" for line in check.unrouted]
        _write_marker(marker, "\n".join(line.replace("\n", " ") for line in lines) + "\n")
    return check


def _notify_fingerprint(config: Config) -> str:
    """What the configured services are made of: the config file (its identity and
    modification), the URL file and apprise config file (CRCs of their contents: a systemd
    credential is a new copy on every start), and the environment they are read with (the
    URL variable as a CRC: it holds tokens). Read on every quiet run: a few small reads."""
    from binascii import crc32

    from lockwarden.config import credential_file

    try:
        status = os.stat(config.source) if config.source else None
    except OSError:
        status = None
    identity = "" if status is None else f"{status.st_ino}:{status.st_mtime_ns}:{status.st_size}"
    notify = config.notify
    value = os.environ.get(notify.urls_env, "") if notify.urls_env else ""
    files = [
        credential_file(notify.urls_file, os.environ) if notify.urls_file else None,
        notify.config if notify.config and "://" not in notify.config else None,
    ]
    contents = [_content_crc(path) for path in files]
    credentials = os.environ.get("CREDENTIALS_DIRECTORY", "")
    return (
        f"v2 {config.source}:{identity} {crc32(value.encode()):08x} {' '.join(contents)} "
        f"{credentials}"
    )


def _content_crc(path: str | None) -> str:
    from binascii import crc32

    if path is None:
        return "-"
    try:
        with open(path, "rb") as handle:
            return f"{crc32(handle.read(1 << 20)):08x}"
    except OSError as error:
        return f"error:{error.errno}"


def _read_check(marker: str, fingerprint: str) -> NotifyCheck | None:
    """What the last check found, if it was made for this fingerprint within the hour (a
    check dated in the future is from a clock stepped back since: it is made again)."""
    try:
        age = time.time() - os.lstat(marker).st_mtime
    except OSError:
        return None
    if not -CLOCK_SLACK_S <= age <= NOTIFY_CHECK_S:
        return None
    text = _read_private(marker)  # _check_marker found its directory private
    if text is None or not text.startswith(fingerprint + "\n"):
        return None
    said: dict[str, list[str]] = {"invalid": [], "problem": [], "unrouted": []}
    for line in text.splitlines()[1:]:
        kind, _tab, what = line.partition("\t")
        said.setdefault(kind, []).append(what)
    problem = said["problem"][0] if said["problem"] else None
    return NotifyCheck(tuple(said["invalid"]), problem, tuple(said["unrouted"]))


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def _fallback_journal(config: Config) -> Journal | None:
    """The runtime directory's journal: where a run records what the state journal cannot
    take, so each run does not page again for the same incident. Nothing is made until it
    is needed. None without a runtime directory (then an unusable state journal means a
    repeat each run)."""
    directory = runtime_directory(state_path(config))
    if directory is None:
        return None
    return Journal(os.path.join(directory, "state.jsonl"), config.state.max_bytes)


def _with_fallback(
    journal: Journal, history: History, fallback: Journal, problems: list[str]
) -> tuple[Journal, History]:
    """The journal this run writes and the history it decides on, given the fallback.

    While the state journal cannot be read, the run decides on the fallback's records and
    writes there. Once it can, what the fallback holds (the runs it could not record) is
    appended to it and the fallback removed; a journal that still refuses the write keeps the
    run on the fallback, deciding on both."""
    if not os.path.lexists(fallback.path) and not problems:
        return journal, history  # the usual run: nothing to remember from a degraded one
    if not _private_directory(fallback.directory):
        return journal, history
    try:
        remembered = fallback.load().records
    except StateError as error:
        log.debug("no fallback journal: %s", error)
        return journal, history
    if problems:
        return fallback, fold(remembered)
    try:
        mine = journal.load().records
        for record in remembered:
            journal.append(record)
    except StateError as error:
        problems.append(str(error))
        journal.close()
        return fallback, fold(mine + remembered)
    _remove_fallback(fallback)
    return journal, fold(mine + remembered)


def _remove_fallback(fallback: Journal) -> None:
    try:
        os.unlink(fallback.path)
    except OSError as error:  # the next run appends its records again: a duplicate, not a loss
        log.debug("cannot remove %s: %s", fallback.path, error.strerror)


def _retry(
    notifier: Notifier, retry: Retry, writer: JournalWriter, now: datetime, outcome: AlertOutcome
) -> Job:
    if UNRESOLVED in retry.services:  # due while notify was broken: resolve its services now
        targets = notifier.targets(retry.sent.tags)
        writer.append(_resolved_due(retry, targets))
        retry = Retry(retry.sent, targets, retry.lock)
    retry = _renamed(notifier, retry, writer)
    gone = [service for service in retry.services if not notifier.known(service)]
    readdressed = notifier.targets(retry.sent.tags)
    if gone and len(gone) == len(retry.services) and not retry.sent.delivered and readdressed:
        # Nobody has it and none of its services is left (a bad URL fixed, a service
        # replaced): it goes to the services configured now, as one due while notify was
        # broken does, rather than nobody being told until a reminder.
        writer.append(_resolved_due(retry, readdressed))
        retry, gone = Retry(retry.sent, readdressed, retry.lock), []
    if gone:  # a service removed from the config can never confirm: stop waiting for it
        dropped = (
            f"{retry.sent.kind} for {retry.lock or 'a lock no longer configured'}: not retried "
            f"to {len(gone)} service(s) no longer configured"
        )
        log.warning("%s", dropped)
        outcome.dropped.append(dropped)
        writer.append(
            GiveUpRecord(now, retry.sent.message_id, tuple(gone), "service no longer configured")
        )
    live = [service for service in retry.services if notifier.known(service)]
    # The same message (its title is what a service shows): said to be late, as its figures
    # ("held at least 6s") are those of when it was due.
    from lockwarden.alerts.messages import Message

    ago = format_duration(max(0.0, (now - retry.sent.due_at).total_seconds()))
    late = (
        f"Due at {format_time(retry.sent.due_at)} ({ago} ago) and sent late, as no earlier "
        "attempt reached this service: the figures above are from then."
    )
    message = Message(
        retry.sent.title,
        f"{retry.sent.markdown}\n\n_{late}_",
        f"{retry.sent.text}\n\n{late}",
        retry.sent.notify_type,
    )
    return Job(retry.sent.message_id, retry.sent.kind, retry.lock, message, tuple(live))


def _renamed(notifier: Notifier, retry: Retry, writer: JournalWriter) -> Retry:
    """A retry whose services were journaled under other ids (an older lockwarden, or apprise
    naming a config-file service differently) is readdressed to the ids they have now."""
    shown = {attempt.service: attempt.url for attempt in retry.sent.attempts}
    renamed: dict[str, str] = {}
    for service in retry.services:
        if notifier.known(service):
            continue
        now_named = notifier.match(service, [shown[service]] if service in shown else [])
        if now_named is not None:
            renamed[service] = now_named
    if not renamed:
        return retry
    services = tuple(renamed.get(service, service) for service in retry.services)
    targets = tuple(renamed.get(t, t) for t in (retry.sent.targets or ()))
    writer.append(_resolved_due(retry, targets))
    return Retry(retry.sent, services, retry.lock)


def _resolved_due(retry: Retry, targets: tuple[str, ...]) -> DueRecord:
    sent = retry.sent
    return DueRecord(
        at=sent.due_at,
        incident=sent.incident,
        message=sent.message_id,
        kind=sent.kind,
        title=sent.title,
        markdown=sent.markdown,
        text=sent.text,
        notify_type=sent.notify_type,
        tags=sent.tags,
        targets=tuple(targets),
    )


def _due_record(item: Outgoing, targets: tuple[str, ...] | None, now: datetime) -> DueRecord:
    return DueRecord(
        at=now,
        incident=item.incident,
        message=item.message_id,
        kind=item.kind,
        lock=item.lock,
        title=item.message.title,
        markdown=item.message.markdown,
        text=item.message.text,
        notify_type=item.message.notify_type,
        tags=item.tags,
        targets=None if targets is None else tuple(targets),
    )


def _record(
    writer: JournalWriter,
    outcome: AlertOutcome,
    message_id: str,
    kind: str,
    lock: str,
    message: Message,
    deliveries: list[Delivery],
    now: datetime,
) -> None:
    if deliveries and message_id != NOTICE_ID:
        writer.journal.checkpoint("after-send")  # delivered, not yet journaled
    for delivery in deliveries:
        outcome.deliveries.append(
            Sending(
                message_id,
                kind,
                lock,
                message.title,
                delivery.url,
                delivery.ok,
                delivery.status,
                delivery.origin,
            )
        )
        if message_id == NOTICE_ID:
            continue
        writer.append(
            SentRecord(
                now, message_id, delivery.service, delivery.ok, delivery.status, delivery.url
            )
        )


def _compact(journal: Journal, writer: JournalWriter, config: Config) -> None:
    if writer.broken or not journal.needs_compaction():
        return
    longest = max(
        (max(lock.alerts.resolve_after, lock.alerts.unknown_after) for lock in config.locks),
        default=0,
    )
    keep_runs = max(KEEP_RUNS, longest + 1)
    try:
        dropped = journal.compact(
            lambda records: keep_latest_seen(
                keep_for_removal(
                    # closed incidents may fill half the threshold, so that what is kept stays
                    # well below it and quiet runs do not compact again and again
                    keep_for_dedupe(records, keep_runs, closed_budget=config.state.max_bytes // 2)
                )
            )
        )
        log.debug("compacted %s: %d records dropped", journal.path, dropped)
    except StateError as error:
        writer.problems.append(str(error))


def with_outcome(
    findings: tuple[Finding, ...], notes: tuple[str, ...], outcome: AlertOutcome
) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """The report's findings and notes after alerting: a state problem is an unknown finding,
    each delivery and failure a note. The lock findings are never hidden or changed."""
    extra_notes = list(notes)
    for sending in outcome.deliveries:
        retried = "" if sending.message_id == NOTICE_ID else "; will retry"
        verdict = "delivered" if sending.ok else f"NOT delivered ({sending.status}){retried}"
        extra_notes.append(f"{sending.kind} {verdict} to {sending.service_url}: {sending.title}")
    for retry in outcome.plan.given_up:
        extra_notes.append(
            f"undeliverable: {retry.sent.kind} {retry.sent.title!r} to {len(retry.services)} "
            "service(s) gave up after give_up_after"
        )
    extra_notes.extend(f"notify service unusable: {bad}" for bad in outcome.invalid_services)
    extra_notes.extend(outcome.unrouted)
    extra_notes.extend(outcome.dropped)
    if outcome.notify_problem:
        extra_notes.append(f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent")
    elif outcome.unsent:
        extra_notes.append(
            f"alerting is off: {outcome.unsent} alert(s) not sent, as no [notify] service is "
            "configured (see the README's Alerts section)"
        )
    notify = notify_finding(outcome)
    if notify is not None:
        findings = (*findings, notify)
    if not outcome.state_problems:
        return findings, tuple(extra_notes)
    problem = "; ".join(dict.fromkeys(outcome.state_problems))  # each problem once
    reason = f"state degraded: {problem}; alerts are still sent but may repeat"
    return (*findings, state_finding(outcome.state_path, reason)), tuple(extra_notes)


def state_finding(path: str, reason: str) -> Finding:
    """lockwarden's own `lockwarden:state` finding: its state journal cannot be used, so what it
    remembers between runs (alerts sent, locks seen held) is lost; unknown, so the run's exit
    code and the unit's result show it."""
    return own_finding(STATE_FINDING, path, "journal", reason)


def state_directory(config: Config) -> str:
    return state_directory_of(config.state.path)


def delivery_problems(outcome: AlertOutcome) -> list[str]:
    """Why a person may not have been told this run, one line per cause."""
    problems = [f"notify service unusable: {bad}" for bad in outcome.invalid_services]
    problems.extend(outcome.unrouted)
    if outcome.notify_problem:
        problems.append(f"notify: {outcome.notify_problem}; {outcome.unsent} message(s) unsent")
    failed = [d for d in outcome.deliveries if not d.ok and d.message_id != NOTICE_ID]
    problems.extend(
        f"{d.kind} NOT delivered to {d.service_url} ({d.status}); will retry: {d.title}"
        for d in failed
    )
    return problems


def notify_finding(outcome: AlertOutcome) -> Finding | None:
    """An unknown finding when alerts could not go out: the run's exit code and the unit's
    result then show it (a critical lock still outranks it, so nothing is hidden)."""
    problems = delivery_problems(outcome) + [
        f"gave up on {retry.sent.kind} {retry.sent.title!r} to {len(retry.services)} service(s)"
        for retry in outcome.plan.given_up
    ]
    if not problems:
        return None
    reason = "alerts may not reach a person: " + "; ".join(problems)
    return own_finding(NOTIFY_FINDING, "[notify]", "notify", reason)


def report_failures(outcome: AlertOutcome) -> None:
    """What means a person may not be told goes to stderr at its journald priority: warning
    (<4>) for what the next run retries, error (<3>) for what no retry will fix."""
    for bad in outcome.invalid_services:
        log.error("notify service unusable, never sent to: %s", bad)
    for unrouted in outcome.unrouted:
        log.error("%s", unrouted)
    if outcome.notify_problem:
        log.error("notify: %s; %d message(s) unsent", outcome.notify_problem, outcome.unsent)
    for sending in outcome.deliveries:
        if not sending.ok:
            retried = "" if sending.message_id == NOTICE_ID else "; will retry next run"
            log.warning(
                "%s NOT delivered to %s (%s)%s: %s",
                sending.kind,
                sending.service_url,
                sending.status,
                retried,
                sending.title,
            )
    for retry in outcome.plan.given_up:
        log.error(
            "gave up delivering %s %r to %d service(s) after give_up_after",
            retry.sent.kind,
            retry.sent.title,
            len(retry.services),
        )
    for problem in dict.fromkeys(outcome.state_problems):
        log.warning("state degraded: %s; alerts are still sent but may repeat", problem)
