"""The report of a run: a text table that reads at a glance, and a stable JSON document."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

from lockwarden import __version__
from lockwarden.durations import format_duration, format_time
from lockwarden.model import Finding, Holder, Severity, State, command_text
from lockwarden.run import RunResult

JSON_VERSION = 1

_COLOURS = {
    Severity.OK: "\033[32m",
    Severity.WARNING: "\033[33m",
    Severity.CRITICAL: "\033[1;31m",
    Severity.UNKNOWN: "\033[35m",
}
_RESET = "\033[0m"


def rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return format_time(moment)


def holder_document(holder: Holder | None) -> dict[str, Any] | None:
    if holder is None:
        return None
    return {
        "pid": holder.pid,
        "role": holder.role,
        "host": holder.host,
        "user": holder.user,
        "cmdline": list(holder.cmdline),
        "started_at": rfc3339(holder.started_at),
        "unit": holder.unit,
        "alive": holder.alive,
    }


def finding_document(finding: Finding) -> dict[str, Any]:
    return {
        "name": finding.name,
        "path": finding.path,
        "format": finding.format,
        "state": finding.state.value,
        "severity": finding.severity.label,
        "held_for_s": None if finding.held_for_s is None else round(finding.held_for_s, 1),
        "reason": finding.reason,
        "proof": finding.proof,
        "holder": holder_document(finding.holder),
        "also_held_by": [holder_document(sharer) for sharer in finding.sharers],
        "waiters": [{"pid": w.pid, "cmdline": list(w.cmdline)} for w in finding.waiters],
        "action": finding.action,
        "note": finding.note,
        "readers": [holder_document(reader) for reader in finding.readers],
        "never_remove": finding.never_remove,
        "removal": finding.removal,
    }


def json_document(result: RunResult) -> dict[str, Any]:
    return {
        "version": JSON_VERSION,
        "host": result.hostname,
        "boot_id": result.boot_id,
        "checked_at": rfc3339(result.checked_at),
        "status": result.status.label,
        "locks": [finding_document(finding) for finding in result.findings],
        "notes": list(result.notes),
    }


def render_json(result: RunResult) -> str:
    return json.dumps(json_document(result), indent=2, ensure_ascii=False) + "\n"


def render_text(result: RunResult, colour: bool = False) -> str:
    counts = Counter(finding.severity for finding in result.findings)
    summary = ", ".join(
        f"{counts[severity]} {severity.label}" for severity in Severity if counts[severity]
    )
    status = _paint(result.status.name, result.status, colour)
    lines = [
        f"lockwarden {__version__} on {result.hostname} at {rfc3339(result.checked_at)}: "
        f"{status} ({summary or 'no locks configured'})"
    ]
    width = max((len(finding.name) for finding in result.findings), default=4)
    for finding in result.findings:
        label = _paint(f"{finding.severity.name:<8}", finding.severity, colour)
        lines.append(
            f"  {label}  {finding.name:<{width}}  {finding.state.value:<13}  {finding.reason}"
        )
        if finding.state is not State.FREE:
            lines.extend(f"            {line}" for line in detail_lines(finding))
        if finding.removal:
            lines.append(f"            removal: {finding.removal}")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines) + "\n"


def detail_lines(finding: Finding) -> list[str]:
    """The lines under a lock that is not free: where, who, since when, who waits, what to do."""
    rows: list[tuple[str, str]] = [("path", f"{finding.path} ({finding.format})")]
    if finding.holder is not None:
        rows.extend(_holder_rows(finding.holder, finding.held_for_s))
    for sharer in finding.sharers:
        rows.append(("also", f"PID {sharer.pid} {command_text(sharer.cmdline) or sharer.name}"))
    if finding.waiters:
        who = ", ".join(f"PID {w.pid} ({command_text(w.cmdline, 60)})" for w in finding.waiters[:5])
        rows.append(("waiting", f"{len(finding.waiters)}: {who}"))
    if finding.proof:
        rows.append(("proof", finding.proof))
    for reader in finding.readers:
        rows.append(("reader", f"PID {reader.pid} {command_text(reader.cmdline) or reader.name}"))
    if finding.action:
        rows.append(("action", finding.action))
    if finding.never_remove:
        rows.append(("never", f"delete the lock file: {finding.never_remove}"))
    if finding.note:
        rows.append(("note", finding.note))
    return [f"{key:<8} {value}" for key, value in rows]


def _holder_rows(holder: Holder, held_for: float | None) -> list[tuple[str, str]]:
    facts = [f"PID {holder.pid}"]
    if holder.role:
        facts.append(holder.role)
    if holder.user:
        facts.append(f"user {holder.user}")
    if holder.unit:
        facts.append(f"unit {holder.unit}")
    if holder.started_at is not None:
        facts.append(f"process started {rfc3339(holder.started_at)}")
    if held_for is not None:
        facts.append(f"held {format_duration(held_for)}")
    rows = [("holder", ", ".join(facts))]
    if holder.cmdline:
        rows.append(("command", command_text(holder.cmdline)))
    return rows


def _paint(text: str, severity: Severity, colour: bool) -> str:
    return f"{_COLOURS[severity]}{text}{_RESET}" if colour else text
