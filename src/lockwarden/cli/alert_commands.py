"""The alerting side of the command line: what `--once` prints (a busy run lock, the dry run,
the JSON of deliveries), `notify-test` and `history`. Each returns its exit code and text;
cli.py prints and exits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lockwarden.config import Config
from lockwarden.model import Holder
from lockwarden.output.report import json_document, json_text, render_text
from lockwarden.run import AlertedRun
from lockwarden.support.durations import format_duration, stamp
from lockwarden.support.escape import visible
from lockwarden.support.exit_codes import EXIT_CONFIG, EXIT_NOTIFY_FAILED, EXIT_UNKNOWN

if TYPE_CHECKING:
    from lockwarden.state.history import Incident
    from lockwarden.state.journal import RunBusy


@dataclass(frozen=True)
class Output:
    """What a command prints and the exit code it returns; cli.py does the printing."""

    code: int
    stdout: str = ""
    error: str = ""


STUCK_AFTER_S = 600.0
"""A run holding the run lock this long is stuck: twice the unit's TimeoutStartSec (5 min), and
a run takes seconds. Every later run is skipped while it holds it."""


def run_lock_holder(busy: RunBusy, now: datetime) -> Holder | None:
    """Who holds the run lock now, as the kernel says (its flock holder, found through
    /proc/*/fdinfo like any monitored lock): the PID written in the file may be a dead run's."""
    from lockwarden.pipeline import inspect_path

    try:
        return inspect_path(busy.lock_path, now, lock_format="kernel").findings[0].holder
    except Exception:  # naming the holder is a courtesy: the run is busy either way
        return None


def stuck_message(busy: RunBusy, holder: Holder | None, now: datetime) -> str | None:
    """What to say when the run lock's holder has held it past STUCK_AFTER_S; None before."""
    if holder is None or holder.pid is None or holder.started_at is None:
        return None
    held = (now - holder.started_at).total_seconds()
    if held < STUCK_AFTER_S:
        return None
    skipped = (
        f"the run lock {busy.lock_path} has been held for {format_duration(held)} by "
        f"{holder.describe()}: every run is skipped while it holds it, so no lock is checked "
        "and no alert is sent"
    )
    if _hung(holder.pid):  # a reader stuck on a hung mount: no signal ends it
        return (
            f"{skipped}; it is in uninterruptible sleep (a file system that stopped answering): "
            "kill cannot end it; make the mount answer again or detach it (umount -l MOUNT), "
            "and see which mount in the report of the run before it"
        )
    return f"{skipped}; stop it: kill {holder.pid}"


def _hung(pid: int) -> bool:
    """In uninterruptible sleep (state D), as a read on a dead mount leaves a process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("D")


def busy_message(busy: RunBusy, now: datetime, holder: Holder | None = None) -> str:
    """Who holds the run lock now (run_lock_holder), or what the file recorded."""
    if holder is not None and holder.pid is not None:
        return (
            f"another lockwarden run is in progress (PID {holder.pid}, run lock "
            f"{busy.lock_path}; the kernel names its holder: {holder.describe()})"
        )
    if busy.pid is None:
        return f"another lockwarden run is in progress (run lock {busy.lock_path}; no PID named)"
    return (
        f"another lockwarden run is in progress (PID {busy.pid}, run lock {busy.lock_path}; as "
        "recorded in the file: /proc named no holder, so that run may have just ended)"
    )


def would_send(alerted: AlertedRun) -> list[dict[str, Any]]:
    if alerted.outcome is None:
        return []
    plan = alerted.outcome.plan
    items: list[dict[str, Any]] = [
        {
            "kind": item.kind,
            "lock": item.lock,
            "tags": list(item.tags),
            "title": item.message.title,
            "text": item.message.text,
        }
        for item in plan.outgoing
    ]
    items.extend(
        {
            "kind": f"retry of {retry.sent.kind}",
            "lock": retry.lock,
            "tags": list(retry.sent.tags),
            "title": retry.sent.title,
            "text": retry.sent.text,
            "services": len(retry.services),
        }
        for retry in plan.retries
    )
    return items


def alerts_document(alerted: AlertedRun) -> dict[str, Any]:
    """What the alert stage did, for `--once --json`: each delivery, each state problem."""
    outcome = alerted.outcome
    if outcome is None:  # alerting off and nothing wrong: the alert stage did not run
        return {
            "deliveries": [],
            "undeliverable": [],
            "state_problems": [],
            "notify_problem": None,
            "unusable_services": [],
            "unrouted": [],
            "journal": None,
        }
    return {
        "deliveries": [
            {
                "message": sending.message_id,
                "kind": sending.kind,
                "lock": sending.lock or None,
                "title": sending.title,
                "service": sending.service_url,
                "origin": sending.service_origin,
                "delivered": sending.ok,
                "status": sending.status,
            }
            for sending in outcome.deliveries
        ],
        "undeliverable": [retry.sent.message_id for retry in outcome.plan.given_up],
        "state_problems": list(dict.fromkeys(outcome.state_problems)),
        "notify_problem": outcome.notify_problem,
        "unusable_services": list(outcome.invalid_services),
        "unrouted": list(outcome.unrouted),
        "journal": outcome.state_path,
    }


def render_once_json(alerted: AlertedRun) -> str:
    document = json_document(alerted.result) | {"alerts": alerts_document(alerted)}
    return json_text(document)


def render_dry_run(alerted: AlertedRun, as_json: bool) -> str:
    items = would_send(alerted)
    if as_json:
        document = json_document(alerted.result) | {"dry_run": True, "would_send": items}
        return json_text(document)
    lines = [render_text(alerted.result).rstrip("\n"), ""]
    if not items:
        lines.append("dry run: nothing would be sent")
    for item in items:
        about = f"for {item['lock']}" if item["lock"] else repr(item["title"])
        lines.append(visible(f"dry run: would send {item['kind']} {about}"))
        lines.extend(visible(f"    {line}") for line in str(item["text"]).splitlines())
    lines.append("dry run: nothing was sent and the journal was not written")
    return "\n".join(lines) + "\n"


def notify_test(config: Config, tags: list[str], now: datetime, as_json: bool = False) -> Output:
    import socket

    from lockwarden.alerts.messages import render_test
    from lockwarden.alerts.notify import Notifier, NotifyConfigError

    if not config.notify.configured:
        return Output(EXIT_CONFIG, error="no [notify] service is configured")
    try:
        notifier = Notifier(config.notify)
    except NotifyConfigError as error:
        return Output(EXIT_CONFIG, error=f"config error: {error}")
    where = config.source or "built-in defaults"
    targets = notifier.targets(tuple(tags))
    services = {service.service_id: service for service in notifier.services}
    deliveries = notifier.send(render_test(socket.gethostname(), now), targets) if targets else []
    results: list[dict[str, Any]] = [
        {
            "url": delivery.url,
            "origin": services[delivery.service].origin,
            "tags": sorted(str(tag) for tag in services[delivery.service].tags),
            "delivered": delivery.ok,
            "status": delivery.status,
        }
        for delivery in deliveries
    ]
    unusable = [
        {"origin": b.origin, "url": b.shown, "problem": b.problem} for b in notifier.invalid
    ]
    unrouted = [
        {"lock": lock.name, "problem": why}
        for lock in config.locks
        if (why := notifier.unrouted(lock.notify_tags)) is not None
    ]
    nothing = "" if targets else "no usable configured service matches those tags"
    if unusable or unrouted or nothing:  # the usable services were still tried
        code = EXIT_CONFIG
    else:
        code = 0 if all(delivery.ok for delivery in deliveries) else EXIT_NOTIFY_FAILED
    if as_json:
        document = {
            "config": where,
            "services": results,
            "unusable": unusable,
            "unrouted": unrouted,
        }
        return Output(code, json.dumps(document, indent=2) + "\n", nothing)
    lines = [
        f"{'delivered' if r['delivered'] else 'FAILED':<9} {r['url']} "
        f"({r['origin']}{', tags ' + ','.join(r['tags']) if r['tags'] else ''})"
        + ("" if r["delivered"] else f": {r['status']}")
        for r in results
    ]
    lines.extend(
        f"{'UNUSABLE':<9} {where}: {b['origin']}: {b['url']}: {b['problem']}" for b in unusable
    )
    lines.extend(
        f"{'UNROUTED':<9} lock {r['lock']}: {r['problem']}: its alerts reach nobody"
        for r in unrouted
    )
    return Output(code, "".join(line + "\n" for line in lines), nothing)


def history(config: Config, lock: str | None, as_json: bool) -> Output:
    from lockwarden.state.history import fold
    from lockwarden.state.journal import Journal, StateError

    journal = Journal(config.state.journal_path, config.state.max_bytes)
    try:
        records = journal.load().records
    except StateError as error:
        return Output(EXIT_UNKNOWN, error=str(error))
    incidents = sorted(fold(records).incidents.values(), key=lambda i: i.opened_at)
    chosen = [incident for incident in incidents if lock is None or incident.lock == lock]
    if as_json:
        document = {"journal": journal.path, "incidents": [_incident_doc(i) for i in chosen]}
        return Output(0, json.dumps(document, indent=2) + "\n")
    if not chosen:
        names = [configured.name for configured in config.locks]
        unknown = (
            lock is not None
            and lock not in names
            and not any(incident.lock == lock for incident in incidents)
        )
        hint = f" (no lock of that name is configured: {', '.join(names) or 'none'})"
        said = f" for {lock}{hint if unknown else ''}" if lock else ""
        alerting = config.notify.configured or config.alertmanager.configured
        why = "" if alerting else " (alerting is off: runs journal incidents only for alerts)"
        return Output(0, f"no incidents in {journal.path}{said}{why}\n")
    return Output(0, "".join("\n".join(_incident_lines(i)) + "\n" for i in chosen))


def _incident_doc(incident: Incident) -> dict[str, Any]:
    return {
        "incident": incident.incident_id,
        "lock": incident.lock,
        "class": incident.state_class,
        "holder": incident.holder,
        "opened_at": stamp(incident.opened_at),
        "closed_at": stamp(incident.closed_at) if incident.closed_at else None,
        "why_closed": incident.why_closed,
        "messages": [
            {
                "kind": message.kind,
                "due_at": stamp(message.due_at),
                "title": message.title,
                "pending": len(message.pending),
                "gave_up": len(message.gave_up),
                "attempts": [
                    {"at": stamp(a.at), "url": a.url, "ok": a.ok, "status": a.status}
                    for a in message.attempts
                ],
            }
            for message in incident.messages
        ],
    }


def _incident_lines(incident: Incident) -> list[str]:
    ended = f"{incident.why_closed} {stamp(incident.closed_at)}" if incident.closed_at else "OPEN"
    lines = [
        f"{incident.lock}  {incident.state_class}  {incident.holder or 'no holder'}  "
        f"opened {stamp(incident.opened_at)}  {ended}  [{incident.incident_id}]"
    ]
    for message in incident.messages:
        lines.append(f"    {message.kind:<9} due {stamp(message.due_at)}  {message.title}")
        for attempt in message.attempts:
            verdict = "delivered" if attempt.ok else f"failed ({attempt.status})"
            lines.append(f"        {stamp(attempt.at)}  {verdict:<18} {attempt.url}")
        if message.pending:
            lines.append(f"        still pending for {len(message.pending)} service(s)")
        if message.gave_up:
            lines.append(f"        undeliverable to {len(message.gave_up)} service(s)")
        if message.targets == () and not message.attempts:
            tags = f" (notify_tags {', '.join(message.tags)})" if message.tags else ""
            lines.append(f"        sent to no service: none matched{tags}")
    return lines
