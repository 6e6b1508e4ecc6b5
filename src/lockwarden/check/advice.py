"""Which action an alert and the report advise: one that does no harm.

An action is advised only for a lock that needs one (held past its budget, or stale). It prefers
the holder's own way out: its systemd unit (`systemctl stop UNIT` lets the service shut down as
it was written to), or waiting. A package manager is never to be killed: dpkg, rpm or apt cut
off mid-transaction leave the package database half-written. A database server is stopped
through its unit or its own shutdown command, never with a signal that skips its checkpoint.
Only a plain process outside any unit gets `kill PID` (SIGTERM, which lets it clean up).
"""

from __future__ import annotations

import shlex

from lockwarden.model import Holder, State

# Process names (the kernel's 15-character comm) of package managers and their front ends.
PACKAGE_MANAGERS = frozenset(
    {
        "dpkg",
        "apt",
        "apt-get",
        "aptitude",
        "unattended-upgr",  # unattended-upgrade(s), as comm cuts it
        "unattended-upgrade",
        "rpm",
        "dnf",
        "yum",
        "zypper",
        "packagekitd",
        "pacman",
    }
)
DATABASE_SERVERS = frozenset({"postgres", "postmaster", "mysqld", "mariadbd", "mongod"})
# Formats whose lock belongs to a package manager whatever process holds it.
PACKAGE_MANAGER_FORMATS = frozenset({"dpkg", "pacman"})


# An SQL statement to run on a database server, not a shell command.
SQL_ADVICE = "on the server: "
# Advice in words rather than a command to copy starts with one of these.
PROSE_ADVICE = ("wait for ", "shut ", SQL_ADVICE)


def is_command(action: str) -> bool:
    """A command to run (shown as code), or advice in words."""
    return not action.startswith(PROSE_ADVICE)


def shell_argv(action: str) -> list[str] | None:
    """The action as the argv of one shell command, or None when it is not one: advice in
    words, SQL for a server, or a command followed by a note in parentheses
    (`systemctl stop deploy.service (else, on the server: ...)`)."""
    if not is_command(action):
        return None
    try:
        argv = shlex.split(action)
    except ValueError:
        return None
    if not argv or any(word.startswith("(") for word in argv):
        return None
    return argv


def needs_action(state: State) -> bool:
    return state in (State.HELD_TOO_LONG, State.STALE)


def program_of(holder: Holder) -> str:
    if holder.name:
        return holder.name
    return holder.cmdline[0].rsplit("/", 1)[-1] if holder.cmdline else ""


def is_package_manager(holder: Holder, lock_format: str) -> bool:
    return lock_format in PACKAGE_MANAGER_FORMATS or program_of(holder) in PACKAGE_MANAGERS


def wait_for_package_manager(holder: Holder) -> str:
    return (
        f"wait for {holder.describe()} to finish; never kill a package manager mid-transaction "
        "(it leaves the package database broken). If it is truly hung, stop it only between "
        "packages and run `dpkg --configure -a` (or your distribution's repair) afterwards"
    )


def advise_holder(holder: Holder, sharers: tuple[Holder, ...], lock_format: str) -> str:
    """The action for a live holder past its budget."""
    if is_package_manager(holder, lock_format):
        return wait_for_package_manager(holder)
    if holder.unit:
        if holder.user_unit:
            return f"systemctl --user -M {holder.user}@ stop {holder.unit}"
        return f"systemctl stop {holder.unit}"
    if program_of(holder) in DATABASE_SERVERS:
        return (
            f"shut {holder.describe()} down with its own command (pg_ctl stop -m fast, "
            "mysqladmin shutdown); never kill -9 a database server"
        )
    pids = [holder.pid, *(sharer.pid for sharer in sharers if sharer.pid is not None)]
    return "kill " + " ".join(str(pid) for pid in pids)


def why_no_action(state: State, has_holder: bool) -> str:
    """What an alert says instead of an action, so a missing one is never a puzzle."""
    if state is State.FREE:
        return "none needed: the lock is free"
    if state is State.HELD:
        return "none needed: the holder is within its time budget"
    if state is State.UNKNOWN:
        return "none advised: lockwarden cannot tell who holds the lock (see State)"
    if not has_holder:
        return "none advised: no live holder could be named, so nothing is safe to stop"
    return "none advised"
