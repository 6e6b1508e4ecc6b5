"""classify's record mechanisms as tables: executable hints, machine ids,
several recorded holders. Pure: Claims, Processes and Evidence are built by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from factories import make_evidence, make_process
from lockwarden.check.classify import Policy, classify
from lockwarden.check.identify import Evidence
from lockwarden.model import Claim, PidProof, Process, State

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BOOTED = NOW - timedelta(days=1)
POLICY = Policy(warn_after=900, critical_after=3600)


def process(
    pid: int, name: str = "chromium", started: datetime = NOW - timedelta(minutes=2)
) -> Process:
    return make_process(
        pid=pid, cmdline=(f"/usr/lib/{name}/{name}", "--flag"), name=name[:15], started_at=started
    )


def evidence(record: Process | None, *others: Process | None, node: int | None = 7) -> Evidence:
    return make_evidence(
        boot_id="b",
        hostname="web1",
        booted_at=BOOTED,
        captured_at=NOW,
        record_process=record,
        other_processes=others,
        host_node=node,
    )


CLAIM = Claim(
    format="t",
    path="/x",
    present=True,
    existence_is_lock=True,
    pid=10,
    host="web1",
    started_at=NOW - timedelta(minutes=1),
)


@pytest.mark.parametrize(
    ("hint", "name", "state"),
    [
        (("chromium", "chrome"), "chromium", State.HELD),
        # probably a reused PID, but an Electron app takes the lock under its own name: no proof
        (("chromium", "chrome"), "sleep", State.UNKNOWN),
        (("chromium", "chrome"), "code", State.UNKNOWN),
        (("chrome-headless-shell",), "chrome-headless-shell", State.HELD),  # comm is cut to 15
        ((), "sleep", State.HELD),
    ],
)
def test_recorded_executables_name_the_holder_and_never_prove_a_reused_pid(
    hint: tuple[str, ...], name: str, state: State
) -> None:
    claim = replace(CLAIM, pid_proof=PidProof(executables=hint))
    assert classify("l", claim, evidence(process(10, name)), POLICY, NOW).state is state


def test_other_programs_prove_reuse_only_where_a_kernel_lock_would_name_any_holder() -> None:
    """Firefox's profile: a fork of any name holds `.parentlock`'s kernel lock, which decides
    before the PID; with none held, a PID running another program is reused."""
    firefox = PidProof(executables=("firefox",), others_prove_reuse=True)
    claim = replace(CLAIM, pid_proof=firefox)
    assert classify("l", claim, evidence(process(10, "sleep")), POLICY, NOW).state is State.STALE
    assert classify("l", claim, evidence(process(10, "firefox")), POLICY, NOW).state is State.HELD


@pytest.mark.parametrize(
    ("node", "aliases", "state"),
    [(7, (), State.HELD), (8, (), State.UNKNOWN), (8, ("web1@8",), State.HELD)],
)
def test_machine_id_beside_the_host_name_must_match(
    node: int, aliases: tuple[str, ...], state: State
) -> None:
    claim = replace(CLAIM, pid_proof=PidProof(machine_id=node))
    policy = replace(POLICY, host_aliases=aliases)
    assert classify("l", claim, evidence(process(10)), policy, NOW).state is state


@pytest.mark.parametrize(
    ("others", "state"),
    [
        ((None, replace(process(12), uid=1000)), State.HELD),  # one shared holder still runs
        ((None, None), State.STALE),  # every holder is gone
        ((None, process(12)), State.UNKNOWN),  # runs as root, record owned by uid 1000
    ],
)
def test_several_recorded_holders_are_stale_only_when_all_are_gone(
    others: tuple[Process | None, ...], state: State
) -> None:
    claim = replace(CLAIM, owner_uid=1000, pid_proof=PidProof(others=(11, 12)))
    finding = classify("l", claim, evidence(None, *others), POLICY, NOW)
    assert finding.state is state
    if state is State.HELD:
        assert finding.holder is not None and finding.holder.pid == 12


def test_a_stale_lock_offers_its_programs_own_break_command() -> None:
    claim = replace(CLAIM, break_command="borg break-lock /r", remove_path="/x")
    assert classify("l", claim, evidence(None), POLICY, NOW).action == "borg break-lock /r"
