"""The words of an alert: a title, a Markdown body for chat, a plain-text body for email.

Pure: everything (host, finding, times) is passed in. Written to be read on a phone: the title
says severity, host, lock, holder and for how long (`CRITICAL db-01: wa-store blocked 2h01m by
PID 64969 (maintenance-job, wa-resync.service)`); the body leads with what to do, then what the
store is, then where, who, for how long and who waits. Each message carries apprise's notify
type for its severity (critical -> failure, warning -> warning, resolved -> success), which
chat services show as its colour.

Everything a message shows that came from outside (a process's name and command line, a path,
a cgroup's unit, a record's role, a proof) is escaped here, when rows become text, through
support/escape.py: one bounded line in the title, which is also the mail's Subject; visible
escapes in the plain text, so no value starts a line of its own (`Action: kill 1`); inert
Markdown for chat. `compose` is the one way a message is made from a title and rows.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime

from lockwarden.check.advice import is_command, why_no_action
from lockwarden.check.blocked import is_blocked_name
from lockwarden.model import Finding, Holder, Severity, State, command_text
from lockwarden.state.history import ALERT, REMINDER
from lockwarden.support.durations import format_duration, stamp
from lockwarden.support.escape import header, markdown, markdown_code, visible

MAX_COMMAND = 300
MAX_WAITERS_NAMED = 5

# apprise's NotifyType values (the same strings in every apprise version lockwarden supports).
INFO = "info"
SUCCESS = "success"
WARNING = "warning"
FAILURE = "failure"
NOTIFY_TYPES = {
    Severity.OK: INFO,
    Severity.WARNING: WARNING,
    Severity.CRITICAL: FAILURE,
    Severity.UNKNOWN: WARNING,
}


@dataclass(frozen=True)
class Message:
    """One notification: a title, a plain-text body for email and a Markdown body for chat."""

    title: str
    markdown: str
    text: str
    notify_type: str = INFO


@dataclass(frozen=True)
class Row:
    """One labelled line of a message body."""

    label: str
    value: str
    code: bool = False


@dataclass(frozen=True)
class Ended:
    """What a resolved message needs to know about the incident that ended."""

    lock: str
    path: str
    holder: str | None
    opened_at: datetime
    held_since: datetime | None
    state: str


def holder_label(holder: Holder | None) -> str | None:
    """`PID 64969 (maintenance-job, wa-resync.service)`: the role if the record gave one, else
    the program, and the unit; None when nothing at all names it."""
    if holder is None or (holder.pid is None and not (holder.role or holder.name or holder.unit)):
        return None
    return holder.describe()


def held_words(finding: Finding) -> str | None:
    """`at least 5m00s`, `up to 9s`, `2h01m`: the duration with the bound it is."""
    if finding.held_for_s is None:
        return None
    return f"{finding.held_bound.words}{format_duration(finding.held_for_s)}"


def alert_title(finding: Finding, host: str) -> str:
    """`CRITICAL db-01: wa-store blocked 2h01m by PID 64969 (maintenance-job, wa-resync.service)`"""
    lead = f"{finding.severity.name} {host}: {finding.name}"
    held = held_words(finding)
    holder = finding.holder.describe() if finding.holder is not None else None
    if finding.state is State.HELD_TOO_LONG:
        by = f" by {holder}" if holder else ""
        return f"{lead} blocked {held or 'too long'}{by}"
    if finding.state is State.STALE:
        return f"{lead} stale lock left by a dead holder; writes blocked"
    if finding.state is State.UNKNOWN:
        return f"{lead} cannot be judged: {finding.reason}"
    return f"{lead} {finding.state.value}"


def render_alert(
    finding: Finding,
    host: str,
    kind: str = ALERT,
    role: str | None = None,
    escalated: bool = False,
    died: str | None = None,
) -> Message:
    """`role`: what the store is, from the lock's config (`role = "WhatsApp session store"`).
    `escalated`: a reminder sent early, as the incident was told as a warning and is now
    critical. `died`: the holder that was paged about, which died and left the lock stale."""
    title = alert_title(finding, host)
    if died is not None:
        title = (
            f"{finding.severity.name} {host}: writes to {finding.name} still blocked: "
            f"{died} died and left the lock"
        )
    if kind == REMINDER:
        word = "now critical" if escalated else "reminder"
        title = title.replace(f"{host}: ", f"{host}: {word}: ", 1)
    rows = [action_row(finding)]
    if died is not None:
        rows.append(Row("Was held by", f"{died}, which held it too long and then died"))
    if escalated:
        rows.append(Row("Escalated", "reported as a warning before; critical now"))
    elif kind == REMINDER:
        rows.append(Row("Reminder", "still going on; this incident was reported before"))
    if role:
        rows.append(Row("Store", role))
    rows.extend([Row("Host", host), *finding_rows(finding)])
    return compose(title, rows, NOTIFY_TYPES[finding.severity])


def action_row(finding: Finding) -> Row:
    """What to do, first: a command to copy, or why none is advised."""
    if finding.action:
        return Row("Action", finding.action, code=is_command(finding.action))
    return Row("Action", why_no_action(finding.state, finding.holder is not None))


def finding_rows(finding: Finding) -> list[Row]:
    rows = [
        Row("Lock", f"{finding.name} at {finding.path} ({finding.format})"),
        Row("State", f"{finding.state.value} ({finding.severity.label}): {finding.reason}"),
    ]
    rows.extend(holder_rows(finding.holder))
    held = held_words(finding)
    if held is not None:
        rows.append(Row("Held for", held))
    if finding.waiters:
        named = ", ".join(
            f"PID {waiter.pid} ({command_text(waiter.cmdline, 60)})"
            for waiter in finding.waiters[:MAX_WAITERS_NAMED]
        )
        rows.append(Row("Waiting", f"{len(finding.waiters)} blocked: {named}"))
    if finding.proof:
        rows.append(Row("Proof", finding.proof))
    if finding.state is State.STALE and finding.action and finding.action.startswith("rm "):
        rows.append(Row("Remove", shlex.split(finding.action)[-1], code=True))
    return rows


def holder_rows(holder: Holder | None) -> list[Row]:
    if holder is None:
        return []
    facts = [f"PID {holder.pid}" if holder.pid is not None else "PID unknown"]
    facts.extend(
        f"{label} {value}"
        for label, value in (("role", holder.role), ("user", holder.user), ("unit", holder.unit))
        if value
    )
    if holder.started_at is not None:
        facts.append(f"started {stamp(holder.started_at)}")
    rows = [Row("Holder", ", ".join(facts))]
    if holder.cmdline:
        command = command_text(holder.cmdline, 1000)
        rows.append(Row("Command", command[:MAX_COMMAND], code=True))
    return rows


def render_resolved(
    ended: Ended, finding: Finding | None, host: str, now: datetime, superseded: bool = False
) -> Message:
    since = ended.held_since or ended.opened_at
    lasted = format_duration((now - since).total_seconds())
    was = f", held by {ended.holder}" if ended.holder else ""
    title = f"RESOLVED {host}: {ended.lock} no longer blocked after {lasted}{was}"
    if superseded:
        title = (
            f"RESOLVED {host}: {ended.lock} incident over after {lasted}{was}; a new one follows"
        )
    if finding is not None:
        now_state = finding.reason
    elif is_blocked_name(ended.lock):
        now_state = "no process waits on it past the budget any more"
    else:
        now_state = "no longer checked"
    rows = [
        Row("Resolved", f"the {ended.state} incident is over; it lasted {lasted}"),
        Row("Host", host),
        Row("Lock", f"{ended.lock} at {ended.path}"),
        Row("Was held by", ended.holder or "unknown"),
        Row("From", f"{stamp(since)} to {stamp(now)}"),
        Row("Now", now_state),
    ]
    return compose(title, rows, SUCCESS)


def render_test(host: str, now: datetime) -> Message:
    title = f"lockwarden test message from {host}"
    rows = [
        Row("Host", host),
        Row("Sent", stamp(now)),
        Row("Meaning", "this service will receive lockwarden's alerts"),
    ]
    return compose(title, rows)


def render_state_degraded(problem: str, host: str, now: datetime) -> Message:
    title = f"WARNING {host}: lockwarden state degraded, alerts may repeat"
    rows = [
        Row("Host", host),
        Row("Problem", problem),
        Row("Effect", "lockwarden cannot remember what it sent, so alerts may be repeated"),
        Row("Seen", stamp(now)),
    ]
    return compose(title, rows, WARNING)


def render_state_healthy(problem: str, host: str, now: datetime) -> Message:
    title = f"RESOLVED {host}: lockwarden state usable again"
    rows = [
        Row("Host", host),
        Row("Was", problem),
        Row("Effect", "lockwarden remembers what it sent again; alerts no longer repeat"),
        Row("Seen", stamp(now)),
    ]
    return compose(title, rows, SUCCESS)


def compose(title: str, rows: list[Row], notify_type: str = INFO) -> Message:
    """The message these words make: the title as one bounded line (it is the mail's Subject,
    which a line break in a process's name would otherwise end, adding a header), the rows in
    Markdown for chat and in plain text for email, every value escaped for its format."""
    line = header(title)
    return Message(line, render_markdown(rows), render_text(line, rows), notify_type)


def render_markdown(rows: list[Row]) -> str:
    return "\n".join(f"**{row.label}:** {_markdown_value(row)}  " for row in rows)


def _markdown_value(row: Row) -> str:
    return markdown_code(row.value) if row.code else markdown(row.value)


def render_text(title: str, rows: list[Row]) -> str:
    """Plain text: each row one line, whatever its value holds."""
    width = max(len(row.label) for row in rows) + 1
    lines = [header(title), ""]
    lines.extend(f"{row.label + ':':<{width}} {visible(row.value)}" for row in rows)
    return "\n".join(lines) + "\n"
