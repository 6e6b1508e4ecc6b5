"""The report of a run: a text table that reads at a glance, and a stable JSON document."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockwarden import __version__
from lockwarden.check.advice import shell_argv
from lockwarden.model import (
    Bound,
    Container,
    Finding,
    Holder,
    InodeKey,
    Removal,
    Severity,
    State,
    Unattributed,
    Waiter,
    command_text,
)
from lockwarden.pipeline import RunResult
from lockwarden.support.durations import format_duration, format_time
from lockwarden.support.escape import visible
from lockwarden.support.redact import redact_argv

JSON_VERSION = 2

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


KERNEL_LOCK_KINDS = ("FLOCK", "POSIX", "OFDLCK", "LEASE")


def process_document(process: Holder | Waiter) -> dict[str, Any]:
    """A holder, reader or waiter: the same shape for each (version 2)."""
    kind, _, mode = (process.lock_kind or "").partition(" ")
    kernel = kind in KERNEL_LOCK_KINDS
    return {
        "pid": process.pid,
        "alive": process.alive,
        "name": process.name,
        "cmdline": list(redact_argv(process.cmdline)),  # as the text shows it: secrets hidden
        "user": process.user,
        "unit": process.unit,
        "user_unit": process.user_unit,
        "role": process.role,
        "host": process.host,
        "started_at": rfc3339(process.started_at),
        "start_ticks": process.start_ticks,
        "lock": (
            {
                "kind": kind,
                "mode": mode,
                "start": process.lock_start,
                "end": process.lock_end,
                "name": process.lock_name,
            }
            if kernel
            else None
        ),
        "via": "kernel lock" if kernel else (process.lock_kind or "record"),
        "container": container_document(process.container),
        "below": [{"pid": below.pid, "name": below.name} for below in process.below],
        "more_below": process.more_below,
    }


def container_document(container: Container | None) -> dict[str, Any] | None:
    if container is None:
        return None
    return {
        "runtime": container.runtime,
        "name": container.name,
        "id": container.ident,
        "init": container.init,
    }


def action_document(line: str | None) -> dict[str, Any] | None:
    """The action as argv (to run without a shell) and as the line a person reads; the line
    is built with shlex.quote, so splitting it gives the argv back. Advice in words (wait for a
    package manager, shut a database down its own way), SQL, or a command with a note has no
    argv: there is no one command to run."""
    if line is None:
        return None
    return {"argv": shell_argv(line), "line": line}


def file_document(key: InodeKey | None) -> dict[str, Any] | None:
    if key is None:
        return None
    device, inode = key
    return {"device": f"{os.major(device)}:{os.minor(device)}", "inode": inode}


def unattributed_document(unattributed: Unattributed | None) -> dict[str, Any] | None:
    if unattributed is None:
        return None
    return {
        "holders": unattributed.holders,
        "waiters": unattributed.waiters,
        "why": unattributed.why,
    }


def finding_document(finding: Finding) -> dict[str, Any]:
    seconds = None if finding.held_for_s is None else round(finding.held_for_s, 1)
    unattributed = finding.unattributed
    return {
        "name": finding.name,
        "path": finding.path,
        "format": finding.format,
        "file": file_document(finding.key),
        "state": finding.state.value,
        "severity": finding.severity.label,
        "reason": finding.reason,
        "unknown_cause": finding.unknown_cause.value if finding.unknown_cause else None,
        "proof": finding.proof,
        "held": {
            "seconds": seconds,
            "bound": finding.held_bound.value,
            "since": rfc3339(finding.held_since),
        },
        "holders": [process_document(holder) for holder in finding.holders],
        "waiters": [process_document(waiter) for waiter in finding.waiters],
        "waiters_unnamed": unattributed.waiters if unattributed else 0,
        "readers": [process_document(reader) for reader in finding.readers],
        "unattributed": unattributed_document(unattributed),
        "action": action_document(finding.action),
        "note": finding.note,
        "store": finding.store,
        "never_remove": finding.never_remove,
        "removal": finding.removal.text if finding.removal else None,
        "removal_status": removal_document(finding.removal),
    }


def removal_document(removal: Removal | None) -> dict[str, Any] | None:
    """The removal's step and moments, for a machine (`removal` is its sentence)."""
    if removal is None:
        return None
    return {
        "step": removal.step.value,
        "stale_since": rfc3339(removal.stale_since),
        "remove_at": rfc3339(removal.remove_at),
        "moved_aside_as": removal.moved_aside_as,
    }


def json_document(result: RunResult, command: str = "once") -> dict[str, Any]:
    """The version 2 document of `--once`, `inspect` and `discover` (schema/report-v2.json)."""
    return {
        "version": JSON_VERSION,
        "command": command,
        "host": result.hostname,
        "boot_id": result.boot_id,
        "checked_at": rfc3339(result.checked_at),
        "status": result.status.label,
        "locks": [finding_document(finding) for finding in result.findings],
        "notes": list(result.notes),
    }


def render_json(result: RunResult, command: str = "once") -> str:
    return json_text(json_document(result, command))


def json_text(document: dict[str, Any]) -> str:
    """A JSON document as UTF-8 text, every string kept whole. A file name that is not UTF-8
    reaches lockwarden as Python's surrogate escapes (`\\udcff` for the byte 0xff), which no
    UTF-8 encoder writes: printed raw they crashed the run (or wrote bytes no JSON parser
    takes). Each is written as the JSON escape `\\udcff`, which a parser reads back into the
    same string, and `os.fsencode` into the file's own bytes: lossless."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n"


JOURNAL_PRIORITIES = {
    Severity.OK: 6,  # info
    Severity.WARNING: 4,  # warning
    Severity.CRITICAL: 2,  # crit
    Severity.UNKNOWN: 4,  # warning: nobody can tell, which `journalctl -p warning` must show
}
NOTE_PRIORITY = 5  # notice


@dataclass(frozen=True)
class Block:
    """One entry of the report: the run's summary line, one lock with its detail lines, or a
    note; `priority` is the syslog priority of what it says."""

    priority: int
    lines: tuple[str, ...]
    finding: Finding | None = None
    note: bool = False


def render_text(result: RunResult, colour: bool = False, journal: bool = False) -> str:
    """The report. `journal`: stdout is the journal stream systemd connected, so every line
    starts with the syslog priority of what it says (`<2>` for a critical lock and its
    details, `<4>` warning or unknown, `<6>` OK) and `journalctl -p warning` shows exactly the
    locks that need a person. (A run under systemd sends output.journal's structured entries
    instead, and falls back to this.)"""
    return render_blocks(report_blocks(result, colour), journal)


def render_blocks(blocks: Sequence[Block], journal: bool = False) -> str:
    if not journal:
        return "".join(f"{line}\n" for block in blocks for line in block.lines)
    return "".join(f"<{block.priority}>{line}\n" for block in blocks for line in block.lines)


def report_blocks(result: RunResult, colour: bool = False) -> list[Block]:
    counts = Counter(finding.severity for finding in result.findings)
    summary = ", ".join(
        f"{counts[severity]} {severity.label}" for severity in Severity if counts[severity]
    )
    status = _paint(result.status.name, result.status, colour)
    blocks = [
        Block(
            JOURNAL_PRIORITIES[result.status],
            (
                visible(
                    f"lockwarden {__version__} on {result.hostname} at "
                    f"{rfc3339(result.checked_at)}: "
                )
                + f"{status} ({summary or 'no locks configured'})",
            ),
        )
    ]
    width = max((len(finding.name) for finding in result.findings), default=4)
    for finding in result.findings:
        label = _paint(f"{finding.severity.name:<8}", finding.severity, colour)
        # Each line is escaped whole once composed (support/escape.py): a file name, a
        # process's name or a record can neither end it nor move the cursor to forge another.
        said = f"{finding.name:<{width}}  {finding.state.value:<13}  {finding.reason}"
        lines = [f"  {label}  {visible(said)}"]
        if finding.state is not State.FREE:
            lines.extend(visible(f"            {line}") for line in detail_lines(finding))
        if finding.removal:
            lines.append(visible(f"            removal: {finding.removal.text}"))
        blocks.append(Block(JOURNAL_PRIORITIES[finding.severity], tuple(lines), finding))
    blocks.extend(
        Block(NOTE_PRIORITY, (visible(f"note: {note}"),), note=True) for note in result.notes
    )
    return blocks


def detail_lines(finding: Finding) -> list[str]:
    """The lines under a lock that is not free: where, who, since when, who waits, what to do."""
    rows: list[tuple[str, str]] = [("path", f"{finding.path} ({finding.format})")]
    if finding.store:
        rows.append(("store", finding.store))
    if finding.holder is not None:
        rows.extend(_holder_rows(finding.holder, finding.held_for_s, finding.held_bound))
    for sharer in finding.sharers:
        holding = f" (holding {sharer.lock_name})" if sharer.lock_name else ""
        rows.append(
            ("also", f"PID {sharer.pid} {command_text(sharer.cmdline) or sharer.name}{holding}")
        )
    unattributed = finding.unattributed
    unnamed = unattributed.waiters if unattributed else 0
    if finding.waiters or unnamed:
        who = [
            f"PID {w.pid} ({command_text(w.cmdline, 60)}"
            + (f", holding {w.lock_name}" if w.lock_name else "")
            + (f", in {w.container.describe()})" if w.container is not None else ")")
            for w in finding.waiters[:5]
        ]
        who += [f"{unnamed} unnamed"] if unnamed else []
        rows.append(("waiting", f"{len(finding.waiters) + unnamed}: {', '.join(who)}"))
    if unattributed is not None and unattributed.holders and finding.holder is not None:
        rows.append(("unnamed", f"{unattributed.holders} holder(s): {unattributed.why}"))
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


def _holder_rows(
    holder: Holder, held_for: float | None, bound: Bound = Bound.EXACT
) -> list[tuple[str, str]]:
    facts = [] if holder.pid is None else [f"PID {holder.pid}"]  # a session with no client here
    if holder.role:
        facts.append(holder.role)
    if holder.user:
        facts.append(f"user {holder.user}")
    if holder.unit:
        facts.append(f"unit {holder.unit}")
    if holder.container is not None:
        job = " (its own job)" if holder.container.init else ""
        facts.append(f"in {holder.container.describe()}{job}")
    if holder.started_at is not None:
        facts.append(f"process started {rfc3339(holder.started_at)}")
    if held_for is not None:
        facts.append(f"held {bound.words}{format_duration(held_for)}")
    rows = [("holder", ", ".join(facts))]
    if holder.cmdline:
        rows.append(("command", command_text(holder.cmdline)))
    if holder.below:
        shown = [f"PID {each.pid} ({each.name})" for each in holder.below[:SHOWN_BELOW]]
        more = len(holder.below) - SHOWN_BELOW
        said = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        rows.append(("below", said + (" (and more not listed)" if holder.more_below else "")))
    return rows


SHOWN_BELOW = 6
"""What runs below a holder, shown by name (JSON lists every one)."""


def _paint(text: str, severity: Severity, colour: bool) -> str:
    return f"{_COLOURS[severity]}{text}{_RESET}" if colour else text
