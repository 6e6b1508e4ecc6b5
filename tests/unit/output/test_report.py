"""output/report.py: the report of a run. The JSON document of a run with every kind of
process in it is what schema/report-v2 describes, its action argv is what the shell would
split its line into, and each text block carries the syslog priority of what it says.
(The detail rows and unknown_cause have their own tests: test_text_report.py and
test_json_report.py.)"""

from __future__ import annotations

import os
import shlex
from datetime import timedelta

import pytest

from conftest import validate_report
from factories import NOW, make_finding, make_holder, make_waiter
from lockwarden import __version__
from lockwarden.model import (
    Bound,
    Container,
    Held,
    Removal,
    RemovalStep,
    Severity,
    State,
    Unattributed,
)
from lockwarden.output.report import (
    action_document,
    file_document,
    json_document,
    render_blocks,
    render_json,
    render_text,
    report_blocks,
    rfc3339,
)
from lockwarden.pipeline import RunResult

STOP = "systemctl stop wa-resync.service"

HELD_TOO_LONG = make_finding(
    name="wa-store",
    path="/srv/wa/store/LOCK",
    format="owner-record",
    state=State.HELD_TOO_LONG,
    severity=Severity.CRITICAL,
    reason="writes blocked 2h01m",
    held=Held.of(7260.0, Bound.AT_LEAST, NOW),
    holder=make_holder(
        role="maintenance-job",
        unit="wa-resync.service",
        cmdline=("python3", "resync.py"),
        lock_kind="FLOCK WRITE",
        lock_start=0,
        container=Container("podman", "wa-sync", ident="c0ffee", init=True),
    ),
    waiters=(make_waiter(), make_waiter(pid=5152)),
    readers=(make_holder(pid=777, name="reader", lock_kind="POSIX READ", lock_start=10),),
    unattributed=Unattributed(holders=0, waiters=1, why="another PID namespace"),
    action=STOP,
    key=(os.makedev(8, 1), 131),
    store="WhatsApp session store",
)
FREE = make_finding(name="cache")
UNKNOWN = make_finding(
    name="nfs-store", state=State.UNKNOWN, severity=Severity.UNKNOWN, reason="no answer"
)


def run(*findings: object, notes: tuple[str, ...] = ()) -> RunResult:
    return RunResult("db1", "boot-1", NOW, tuple(findings), notes)  # type: ignore[arg-type]


def test_a_runs_document_is_what_the_schema_describes() -> None:
    document = validate_report(json_document(run(HELD_TOO_LONG, FREE, UNKNOWN, notes=("n",))))
    assert (document["version"], document["command"], document["status"]) == (2, "once", "critical")
    assert (document["host"], document["checked_at"]) == ("db1", "2026-03-01T12:00:00Z")
    assert [lock["name"] for lock in document["locks"]] == ["wa-store", "cache", "nfs-store"]
    assert document["notes"] == ["n"]


def test_a_locks_document_carries_its_holder_waiters_readers_and_file() -> None:
    [lock] = json_document(run(HELD_TOO_LONG), command="inspect")["locks"]
    assert lock["held"] == {"seconds": 7260.0, "bound": "at_least", "since": "2026-03-01T09:59:00Z"}
    assert lock["file"] == {"device": "8:1", "inode": 131}
    [holder] = lock["holders"]
    assert holder["lock"] == {
        "kind": "FLOCK",
        "mode": "WRITE",
        "start": 0,
        "end": None,
        "name": None,
    }
    assert holder["via"] == "kernel lock"
    assert holder["container"] == {
        "runtime": "podman",
        "name": "wa-sync",
        "id": "c0ffee",
        "init": True,
    }
    assert [waiter["pid"] for waiter in lock["waiters"]] == [5151, 5152]
    assert lock["waiters_unnamed"] == 1
    assert [(r["pid"], r["lock"]["mode"]) for r in lock["readers"]] == [(777, "READ")]
    assert lock["unattributed"] == {"holders": 0, "waiters": 1, "why": "another PID namespace"}


def test_a_holder_named_by_a_record_is_via_the_record() -> None:
    finding = make_finding(state=State.HELD, holder=make_holder(lock_kind=None))
    [holder] = json_document(run(finding))["locks"][0]["holders"]
    assert (holder["via"], holder["lock"]) == ("record", None)


@pytest.mark.parametrize(
    "line",
    [STOP, "kill 4242", "rm -r '/srv/wa/store/LOCK'", "rm '/srv/my store/x.lock'"],
)
def test_an_actions_argv_is_what_its_line_splits_into(line: str) -> None:
    assert action_document(line) == {"argv": shlex.split(line), "line": line}


@pytest.mark.parametrize(
    "line",
    [
        "wait for apt to finish; never delete the lock file",
        f"{STOP} (else, on the server: SELECT pg_terminate_backend(6639))",
    ],
)
def test_advice_that_is_no_one_command_has_no_argv(line: str) -> None:
    assert action_document(line) == {"argv": None, "line": line}


def test_no_action_and_no_file_are_null() -> None:
    assert action_document(None) is None
    assert file_document(None) is None


def test_the_json_text_is_the_document_and_keeps_non_ascii() -> None:
    finding = make_finding(name="café", store="Läger")
    text = render_json(run(finding))
    assert "café" in text and "\\u" not in text
    assert text.endswith("}\n")


def test_each_block_has_the_syslog_priority_of_what_it_says() -> None:
    blocks = report_blocks(run(HELD_TOO_LONG, FREE, UNKNOWN, notes=("the state is degraded",)))
    assert [(block.priority, block.finding, block.note) for block in blocks] == [
        (2, None, False),  # the summary: the run is critical
        (2, HELD_TOO_LONG, False),
        (6, FREE, False),
        (4, UNKNOWN, False),
        (5, None, True),
    ]


def test_the_summary_line_counts_each_severity() -> None:
    [summary] = report_blocks(run(HELD_TOO_LONG, FREE, UNKNOWN))[0].lines
    assert summary == (
        f"lockwarden {__version__} on db1 at 2026-03-01T12:00:00Z: "
        "CRITICAL (1 ok, 1 critical, 1 unknown)"
    )
    [empty] = report_blocks(run())[0].lines
    assert empty.endswith(": OK (no locks configured)")


def test_a_free_lock_is_one_line_and_a_held_one_has_its_details() -> None:
    blocks = report_blocks(run(HELD_TOO_LONG, FREE))
    assert len(blocks[2].lines) == 1
    keys = [line.split()[0] for line in blocks[1].lines[1:]]
    assert keys == ["path", "store", "holder", "command", "waiting", "reader", "action"]


def test_every_journal_line_starts_with_its_blocks_priority() -> None:
    result = run(HELD_TOO_LONG, FREE)
    blocks = report_blocks(result)
    lines = render_text(result, journal=True).splitlines()
    expected = [f"<{block.priority}>" for block in blocks for _ in block.lines]
    assert [line[: line.index(">") + 1] for line in lines] == expected
    assert render_blocks(blocks) == render_text(result)


def test_colour_only_when_asked() -> None:
    result = run(HELD_TOO_LONG, FREE)
    assert "\033[" not in render_text(result)
    painted = render_text(result, colour=True)
    assert "\033[1;31mCRITICAL" in painted and "\033[32mOK" in painted


def test_a_removal_is_said_under_its_lock() -> None:
    removal = Removal(
        RemovalStep.CONFIRMING, "will remove at 12:05", NOW, NOW + timedelta(minutes=5)
    )
    stale = make_finding(state=State.STALE, severity=Severity.CRITICAL, removal=removal)
    assert report_blocks(run(stale))[1].lines[-1].split() == [
        "removal:",
        "will",
        "remove",
        "at",
        "12:05",
    ]


def test_a_removal_is_a_sentence_and_a_status_in_json() -> None:
    removal = Removal(RemovalStep.REMOVED, "removed (…)", NOW, moved_aside_as="/srv/.LOCK.x")
    stale = make_finding(state=State.STALE, severity=Severity.CRITICAL, removal=removal)
    [lock] = validate_report(json_document(run(stale)))["locks"]
    assert lock["removal"] == "removed (…)"
    assert lock["removal_status"] == {
        "step": "removed",
        "stale_since": rfc3339(NOW),
        "remove_at": None,
        "moved_aside_as": "/srv/.LOCK.x",
    }
    [quiet] = validate_report(json_document(run(make_finding())))["locks"]
    assert quiet["removal"] is None and quiet["removal_status"] is None
