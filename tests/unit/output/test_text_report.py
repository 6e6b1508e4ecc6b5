"""The text report's detail lines, as structured rows (`key  value`)."""

from __future__ import annotations

from factories import make_finding, make_holder
from lockwarden.model import Severity, State
from lockwarden.output.report import detail_lines


def rows(lines: list[str]) -> dict[str, str]:
    return {line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1] for line in lines}


def test_a_holder_with_no_process_here_is_shown_without_a_pid() -> None:
    """A database session whose client is on another host (or hidden from the monitor's role)
    has no PID on this host: the report names what it knows, never `PID None`."""
    session = make_holder(pid=None, role="PostgreSQL backend 6639", user="migrator")
    finding = make_finding(state=State.HELD, severity=Severity.OK, holder=session)
    shown = rows(detail_lines(finding))["holder"]
    assert shown.startswith("PostgreSQL backend 6639, user migrator"), shown
    local = make_finding(state=State.HELD, severity=Severity.OK, holder=make_holder(pid=42))
    assert rows(detail_lines(local))["holder"].startswith("PID 42, process started")
