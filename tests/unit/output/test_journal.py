"""output/journal.py, pure parts: the native protocol's encoding (a value with a newline as
a length-prefixed binary field), each entry's fields, and which unit root names itself as.
(The socket and journald are tests/unit/support/test_logs.py's and tests/system's.)"""

from __future__ import annotations

import struct
from pathlib import Path

from factories import NOW, make_finding, make_holder
from lockwarden.model import Bound, Held, Severity, State
from lockwarden.output.journal import MESSAGE_IDS, encode, entry, lock_fields, own_system_unit
from lockwarden.output.report import Block


def test_a_value_with_a_newline_is_a_length_prefixed_field() -> None:
    data = encode({"MESSAGE": "one\ntwo", "PRIORITY": "2"})
    assert data == b"MESSAGE\n" + struct.pack("<Q", 7) + b"one\ntwo\n" + b"PRIORITY=2\n"


def test_a_locks_entry_carries_its_fields_and_none_empty() -> None:
    held = make_finding(
        name="wa-store",
        state=State.HELD_TOO_LONG,
        severity=Severity.CRITICAL,
        holder=make_holder(pid=64969, role="maintenance-job", unit="wa-resync.service"),
        action="systemctl stop wa-resync.service",
        held=Held.of(7260.4, Bound.UNKNOWN, NOW),
    )
    fields = entry(
        Block(2, ("  CRITICAL  wa-store ...", "    path ..."), held), "lockwarden.service"
    )
    assert fields["MESSAGE"] == "  CRITICAL  wa-store ...\n    path ..."
    assert fields["MESSAGE_ID"] == MESSAGE_IDS["held_too_long"]
    assert fields["OBJECT_SYSTEMD_UNIT"] == "lockwarden.service"
    assert (
        fields["LOCKWARDEN_HOLDER_PID"] == "64969" and fields["LOCKWARDEN_HELD_SECONDS"] == "7260"
    )
    free = lock_fields(make_finding(name="db", state=State.FREE, severity=Severity.OK))
    assert all(free.values()) and "LOCKWARDEN_HOLDER_PID" not in free
    note = entry(Block(5, ("note: x",), note=True), None)
    assert note["MESSAGE_ID"] == MESSAGE_IDS["note"] and "OBJECT_SYSTEMD_UNIT" not in note


def test_root_names_its_system_service_and_never_a_users(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/system.slice/lockwarden.service\n")
    assert own_system_unit(str(cgroup)) == "lockwarden.service"  # the tests run as root
    cgroup.write_text("0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n")
    assert own_system_unit(str(cgroup)) is None
    cgroup.write_text("0::/user.slice/user-0.slice/session-1.scope\n")
    assert own_system_unit(str(cgroup)) is None
