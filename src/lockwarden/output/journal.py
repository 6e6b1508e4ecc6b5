"""The report as journald entries with fields, over journald's native protocol.

Under systemd the report's stdout is a journal stream, which carries a priority per line but
no fields. A run whose stdout is that stream sends the report to journald's native socket
instead: one entry per lock (its line and detail lines as one message), with the lock, its
state, holder and action as fields, so `journalctl LOCKWARDEN_LOCK=wa-store` and
`journalctl MESSAGE_ID=…` find them, and the priority of what each says, so `journalctl -p
warning` shows exactly the locks that need a person.

The protocol (systemd's "Native Journal Protocol"): one datagram per entry, `KEY=value` lines,
a value with a newline as `KEY`, newline, its length as 64-bit little endian, the value,
newline. journald attributes an entry to its sender's unit by reading the sender's cgroup
when the datagram arrives; a one-shot run may have exited by then, so root (whose `_UID=0`
journald records from the socket's credentials) also names its own unit in
`OBJECT_SYSTEMD_UNIT`, which `journalctl -u` matches for UID 0 senders. Any failure to send
leaves the rest of the report to the stream, as before: nothing is lost or said twice.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Mapping, Sequence

from lockwarden.model import Finding, State
from lockwarden.output.report import Block

SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "lockwarden"

# One MESSAGE_ID per kind of entry (sd-id128 values made for lockwarden; never change one).
MESSAGE_IDS: Mapping[str, str] = {
    "summary": "820299a404784a149d2d3b8cfa7695ba",
    State.FREE.value: "98197b85ea8b48c2bdeddd17605b1568",
    State.HELD.value: "7c126f9f0fc44723bbb08e0aff7569bd",
    State.HELD_TOO_LONG.value: "c3fccceaf13a4c03a6138696355f3f86",
    State.STALE.value: "fa16a47fe1954e669991fdead2506d93",
    State.UNKNOWN.value: "0c0c7c09b3414bf6a745a8d03aacaaba",
    "note": "5a94127f51c34c23bc83d2d957e4bd15",
}


def lock_fields(finding: Finding) -> dict[str, str]:
    """The fields of one lock's entry; a field with nothing to say is left out."""
    pids = [str(process.pid) for process in finding.holders if process.pid is not None]
    holder = finding.holder
    fields = {
        "LOCKWARDEN_LOCK": finding.name,
        "LOCKWARDEN_PATH": finding.path,
        "LOCKWARDEN_FORMAT": finding.format,
        "LOCKWARDEN_STATE": finding.state.value,
        "LOCKWARDEN_SEVERITY": finding.severity.label,
        "LOCKWARDEN_STORE": finding.store or "",
        "LOCKWARDEN_HOLDER_PID": pids[0] if pids and holder is not None else "",
        "LOCKWARDEN_HOLDER_PIDS": " ".join(pids),
        "LOCKWARDEN_HOLDER_UNIT": (holder.unit or "") if holder is not None else "",
        "LOCKWARDEN_HOLDER_ROLE": (holder.role or holder.name or "") if holder else "",
        "LOCKWARDEN_GONE_PIDS": " ".join(str(pid) for pid in finding.gone_pids),
        "LOCKWARDEN_HELD_SECONDS": (
            "" if finding.held_for_s is None else f"{finding.held_for_s:.0f}"
        ),
        "LOCKWARDEN_ACTION": finding.action or "",
    }
    return {key: value for key, value in fields.items() if value}


def entry(block: Block, own_unit: str | None) -> dict[str, str]:
    kind = "note" if block.note else "summary"
    if block.finding is not None:
        kind = block.finding.state.value
    fields = {
        "MESSAGE": "\n".join(block.lines),
        "PRIORITY": str(block.priority),
        "SYSLOG_IDENTIFIER": IDENTIFIER,
        "MESSAGE_ID": MESSAGE_IDS[kind],
    }
    if own_unit is not None:
        fields["OBJECT_SYSTEMD_UNIT"] = own_unit
    if block.finding is not None:
        fields.update(lock_fields(block.finding))
    return fields


def encode(fields: Mapping[str, str]) -> bytes:
    parts = []
    for key, value in fields.items():
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            parts.append(key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key.encode() + b"=" + data + b"\n")
    return b"".join(parts)


def own_system_unit(cgroup_file: str = "/proc/self/cgroup") -> str | None:
    """The system service this process runs in, for root only (journald trusts
    OBJECT_SYSTEMD_UNIT from UID 0 alone); None for a user's unit or outside one."""
    if os.geteuid() != 0:
        return None
    try:
        with open(cgroup_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(":", 2)[-1]
        if "/user@" in path:
            return None
        name = path.rstrip("/").rpartition("/")[2]
        if name.endswith(".service"):
            return name
    return None


def send(blocks: Sequence[Block], path: str | None = None) -> int:
    """Send each block as one entry to `path` (journald's socket); the number sent (the caller
    writes the rest to the stream: a failure part-way says nothing twice and loses nothing)."""
    own_unit = own_system_unit()
    path = path or SOCKET
    sent = 0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as journal:
            journal.connect(path)
            for block in blocks:
                journal.send(encode(entry(block, own_unit)))
                sent += 1
    except OSError:
        pass
    return sent
