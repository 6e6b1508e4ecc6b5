"""Which action is advised: a table over holders and states (advice.py is pure)."""

from __future__ import annotations

import pytest

from lockwarden.check.advice import (
    advise_holder,
    call_to_act,
    is_command,
    needs_action,
    why_no_action,
)
from lockwarden.model import Descendant, Holder, State


def holder(name: str, unit: str | None = None, pid: int = 4242, **extra: object) -> Holder:
    return Holder(pid=pid, alive=True, name=name, unit=unit, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("who", "lock_format", "advised"),
    [
        (holder("node", "wa-resync.service"), "owner-record", "systemctl stop wa-resync.service"),
        (holder("python3"), "owner-record", "kill 4242"),
        (holder("dpkg"), "kernel", "wait for PID 4242 (dpkg) to finish"),
        (holder("apt-get", "apt-daily-upgrade.service"), "kernel", "wait for PID 4242"),
        (holder("unattended-upgr", "unattended-upgrades.service"), "dpkg", "wait for PID 4242"),
        (holder("rpm"), "kernel", "wait for PID 4242 (rpm)"),
        (holder("bash"), "dpkg", "wait for PID 4242 (bash)"),  # dpkg's lock, whoever holds it
        (holder("postgres", "postgresql@15-main.service"), "postgres", "systemctl stop postgresql"),
        (holder("postgres"), "postgres", "shut PID 4242 (postgres) down with its own command"),
        (
            holder("sleep", "backup.service", user="alice", user_unit=True),
            "kernel",
            "systemctl --user -M alice@ stop backup.service",
        ),
    ],
)
def test_the_advised_action_does_no_harm(who: Holder, lock_format: str, advised: str) -> None:
    action = advise_holder(who, (), lock_format)
    assert action.startswith(advised)
    if "wait for" in advised:
        assert "never kill a package manager mid-transaction" in action
        assert not is_command(action)
        assert "kill 4242" not in action


@pytest.mark.parametrize(
    ("leads", "sharers", "advised"),
    [
        (False, (), "kill 4242"),
        (True, (), "kill -TERM -- -4242"),  # its whole group: what it started goes with it
        (True, (holder("sh", pid=4243),), "kill -TERM -- -4242 4243"),
        (False, (holder("sh", pid=4243, leads_group=True),), "kill -TERM -- 4242 -4243"),
    ],
)
def test_a_holder_that_leads_its_process_group_is_killed_with_its_group(
    leads: bool, sharers: tuple[Holder, ...], advised: str
) -> None:
    assert advise_holder(holder("python3", leads_group=leads), sharers, "owner-record") == advised


IN_ITS_GROUP = Descendant(4250, 4242, "sleep")
OWN_GROUP = Descendant(4251, 4251, "sleep")  # setsid: out of the holder's group
ANOTHER_GROUP = Descendant(4252, 4100, "pg_dump")  # its group is the holder's parent's


TERM_IGNORED = 1 << 14
HUP_IGNORED = 1 << 0


@pytest.mark.parametrize(
    ("who", "advised"),
    [
        (holder("python3", ignored=TERM_IGNORED), "kill -KILL 4242"),
        (  # its group still gets SIGTERM; the leader, ignoring it, SIGKILL
            holder("python3", leads_group=True, ignored=TERM_IGNORED),
            "kill -TERM -- -4242; kill -KILL 4242",
        ),
        (  # a child in its group that ignores SIGTERM: the group's kill does not end it
            holder(
                "python3", leads_group=True, below=(IN_ITS_GROUP._replace(ignored=TERM_IGNORED),)
            ),
            "kill -TERM -- -4242; kill -KILL 4250",
        ),
        (holder("bash", ignored=TERM_IGNORED), "kill -HUP 4242"),  # a shell: HUP, not ignored
        (holder("bash", ignored=HUP_IGNORED), "kill 4242"),  # nohup bash: SIGTERM ends it
        (holder("bash", ignored=HUP_IGNORED | TERM_IGNORED), "kill -KILL 4242"),
    ],
)
def test_a_process_that_ignores_its_signal_gets_sigkill(who: Holder, advised: str) -> None:
    assert advise_holder(who, (), "kernel") == advised


def test_a_sharer_its_holders_group_kill_reaches_is_signalled_once() -> None:
    """`flock FILE cmd`: cmd shares the lock and is in flock's group, below it."""
    flock = holder("flock", leads_group=True, below=(IN_ITS_GROUP, OWN_GROUP))
    child = holder("sleep", pid=IN_ITS_GROUP.pid)
    outside = holder("sleep", pid=OWN_GROUP.pid)
    assert advise_holder(flock, (child,), "kernel") == "kill -TERM -- -4242 4251"
    assert advise_holder(flock, (outside,), "kernel") == "kill -TERM -- -4242 4251"


@pytest.mark.parametrize(
    ("leads", "below", "advised"),
    [
        (False, (IN_ITS_GROUP, ANOTHER_GROUP), "kill 4242 4250 4252"),
        (True, (IN_ITS_GROUP,), "kill -TERM -- -4242"),  # its group's kill reaches it: once
        (True, (IN_ITS_GROUP, OWN_GROUP), "kill -TERM -- -4242 4251"),
        (True, (Descendant(4254, 4254, "postgres"), OWN_GROUP), "kill -TERM -- -4242 4251"),
    ],
)
def test_what_runs_below_a_holder_is_stopped_with_it(
    leads: bool, below: tuple[Descendant, ...], advised: str
) -> None:
    """A tool's work in a child outlives the holder's kill; only its group's kill reaches it
    (and is not sent twice)."""
    who = holder("python3", leads_group=leads, below=below)
    assert advise_holder(who, (), "owner-record") == advised


@pytest.mark.parametrize("leads", [False, True])
def test_a_package_manager_below_a_holder_is_waited_for(leads: bool) -> None:
    """Its group's kill would cut it off mid-transaction; the holder's alone leaves it working
    under the lock."""
    who = holder("bash", leads_group=leads, below=(Descendant(4253, 4100, "dpkg"), OWN_GROUP))
    assert advise_holder(who, (), "owner-record").startswith("wait for PID 4253 (dpkg), below ")
    assert call_to_act(who, "owner-record") == " — let it finish"


@pytest.mark.parametrize(
    ("who", "advised"),
    [
        (holder("bash", leads_group=True), "kill -HUP -- -4242"),  # a person's shell: HUP ends it
        (holder("zsh"), "kill -HUP 4242"),
        (holder("python3"), "kill 4242"),  # a daemon may reload on HUP: TERM
    ],
)
def test_a_shell_gets_the_hangup_it_does_not_ignore(who: Holder, advised: str) -> None:
    assert advise_holder(who, (), "kernel") == advised


def test_only_a_lock_that_needs_it_gets_an_action() -> None:
    assert [state for state in State if needs_action(state)] == [
        State.HELD_TOO_LONG,
        State.STALE,
    ]
    assert why_no_action(State.HELD, True) == "none needed: the holder is within its time budget"
    assert "no live holder could be named" in why_no_action(State.HELD_TOO_LONG, False)
