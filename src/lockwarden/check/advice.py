"""Which action an alert and the report advise: one that does no harm.

An action is advised only for a lock that needs one (held past its budget, or stale). It prefers
the holder's own way out: its systemd unit (`systemctl stop UNIT` lets the service shut down as
it was written to), or waiting. A package manager is never to be killed: dpkg, rpm or apt cut
off mid-transaction leave the package database half-written. A database server is stopped
through its unit or its own shutdown command, never with a signal that skips its checkpoint.
Only a plain process outside any unit gets `kill PID` (SIGTERM, which lets it clean up).

Each format declares its own safe action where it is defined (`holder_action`, a
formats.base.SafeAction: dpkg's and pacman's locks say wait, whoever holds them). The process
names below cover a package manager or database server holding a lock of any other format,
a plain kernel lock above all.
"""

from __future__ import annotations

import re
import shlex

from lockwarden.formats.base import STOP_HOLDER, HolderAction, SafeAction
from lockwarden.model import Claim, Container, Descendant, Holder, State
from lockwarden.procfs.snapshot import valid_unit_name

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
NEVER_SIGNALLED = PACKAGE_MANAGERS | DATABASE_SERVERS
# What a package manager or database server found by its name is told (a format's own
# declaration says more: its repair command).
PACKAGE_MANAGER_WAIT = SafeAction(
    HolderAction.WAIT,
    "never kill a package manager mid-transaction (it leaves the package database broken). "
    "If it is truly hung, stop it only between packages and run `dpkg --configure -a` (or "
    "your distribution's repair) afterwards",
)
DATABASE_SHUTDOWN = SafeAction(
    HolderAction.SHUTDOWN,
    "pg_ctl stop -m fast, mysqladmin shutdown; never kill -9 a database server",
)


# An SQL statement to run on a database server, not a shell command.
SQL_ADVICE = "on the server: "
# Advice in words rather than a command to copy starts with one of these.
PROSE_ADVICE = ("wait for ", "shut ", "stop ", SQL_ADVICE)


def is_command(action: str) -> bool:
    """A command to run (shown as code), or advice in words."""
    return not action.startswith(PROSE_ADVICE)


def shell_argv(action: str) -> list[str] | None:
    """The action as the argv of one shell command, or None when it is not one: advice in
    words, SQL for a server, a command followed by a note in parentheses
    (`systemctl stop deploy.service (else, on the server: ...)`), or two commands
    (`kill -HUP 4242; kill 4250`)."""
    if not is_command(action):
        return None
    try:
        argv = shlex.split(action)
    except ValueError:
        return None
    if not argv or any(word.startswith("(") or word.endswith(";") for word in argv):
        return None
    return argv


def command(*argv: str) -> str:
    """One shell command line that a POSIX shell (bash, dash) parses back to exactly `argv`:
    every word that came from outside (a unit, a user, a container's name) is quoted, so no
    name can end the command or start another when on-call pastes the line into a root shell
    (output/report.py's `action.argv` is this line parsed back)."""
    return shlex.join(argv)


# What docker, podman and machined accept as a name: a letter or digit, then those and `_.-`.
_RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def valid_runtime_name(name: str) -> bool:
    return _RUNTIME_NAME.fullmatch(name) is not None


def needs_action(state: State) -> bool:
    return state in (State.HELD_TOO_LONG, State.STALE)


def program_of(holder: Holder) -> str:
    if holder.name:
        return holder.name
    return holder.cmdline[0].rsplit("/", 1)[-1] if holder.cmdline else ""


def declared_action(lock_format: str) -> SafeAction:
    """The safe action the lock's format declares; a lock of no registered format (a database
    key, a holder seen without one) declares nothing beyond the default."""
    from lockwarden.formats import FORMATS  # the lock's own format: already loaded by now

    if lock_format not in FORMATS:
        return STOP_HOLDER
    return FORMATS[lock_format].holder_action


def may_be_flocked(claim: Claim) -> bool:
    """The claim's lock may be a flock(2): its format says so (Format.flock), and so may a
    lock of no registered format."""
    from lockwarden.formats import FORMATS  # the lock's own format: already loaded by now

    return claim.format not in FORMATS or FORMATS[claim.format].flock


def safe_action(holder: Holder, lock_format: str) -> SafeAction:
    """The format's declared action, unless the holder's own name asks for more care."""
    declared = declared_action(lock_format)
    if declared.kind is HolderAction.WAIT:
        return declared
    if program_of(holder) in PACKAGE_MANAGERS or _package_manager_below(holder):
        return PACKAGE_MANAGER_WAIT
    if declared.kind is HolderAction.SHUTDOWN:
        return declared
    if program_of(holder) in DATABASE_SERVERS:
        return DATABASE_SHUTDOWN
    return declared


def _package_manager_below(holder: Holder) -> Descendant | None:
    """A package manager running below the holder (a deploy script's `apt-get install`): its
    group's kill would cut it off mid-transaction, and killing the holder alone leaves it
    working under the lock the holder's record claims."""
    return next((below for below in holder.below if below.name in PACKAGE_MANAGERS), None)


def _waited_for(holder: Holder) -> str:
    manager = None if program_of(holder) in PACKAGE_MANAGERS else _package_manager_below(holder)
    if manager is None:
        return holder.describe()
    return f"PID {manager.pid} ({manager.name}), below {holder.describe()},"


def call_to_act(holder: Holder, lock_format: str) -> str:
    """How a headline about a holder past its budget ends: what its action asks, in two words
    (a package manager is waited for, never stopped)."""
    if safe_action(holder, lock_format).kind is HolderAction.WAIT:
        return " — let it finish"
    return " — stop it"


def advise_holder(holder: Holder, sharers: tuple[Holder, ...], lock_format: str) -> str:
    """The action for a live holder past its budget."""
    safe = safe_action(holder, lock_format)
    if safe.kind is HolderAction.WAIT:
        return f"wait for {_waited_for(holder)} to finish; {safe.why}"
    if holder.container is not None and safe.kind is not HolderAction.SHUTDOWN:
        return advise_in_container(holder, holder.container, sharers)
    if holder.unit and holder.container is None and valid_unit_name(holder.unit):
        if holder.user_unit and holder.user:
            return command("systemctl", "--user", "-M", f"{holder.user}@", "stop", holder.unit)
        if not holder.user_unit:
            return command("systemctl", "stop", holder.unit)
    if safe.kind is HolderAction.SHUTDOWN:
        return f"shut {holder.describe()} down with its own command ({safe.why})"
    return kill(holder, sharers)


# An interactive shell ignores SIGTERM; SIGHUP (its terminal hung up) ends it and its jobs,
# and ends a shell running a script as SIGTERM would.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ksh93", "fish", "tcsh", "csh"})


def kill(holder: Holder, sharers: tuple[Holder, ...]) -> str:
    """`kill` for each process by its PID; for one that leads its process group, the whole
    group (`-PID`); and what runs below each that its group's kill would not reach: a tool
    that runs its work in a child, killed alone, leaves the child working, and the lock with
    it. A package manager below the holder makes its action a wait (safe_action); one below
    a sharer, and a database server below any, is not signalled by PID (NEVER_SIGNALLED). A
    shell (a person's debug shell at its prompt) gets SIGHUP, which it does not ignore; what
    runs below it gets SIGTERM in a second `kill`, unless it is a shell too: a program may
    reload on SIGHUP, or ignore it (`nohup`), and run on. A process that ignores the signal it
    would get (stat's sigignore) gets SIGTERM by its PID, a shell started with `nohup` among
    them; one that ignores SIGTERM too (`trap '' TERM`) gets SIGKILL, by its PID, in a last
    `kill`: sent SIGTERM again and again, it ran on, and the lock with it."""
    parties = [party for party in (holder, *sharers) if party.pid is not None]
    crowded = next((party for party in parties if party.more_below), None)
    if crowded is not None:
        return (
            f"stop {crowded.describe()} with everything that runs below it: more than "
            f"{len(crowded.below)} processes, too many to name in one command"
        )
    hangup = all(program_of(party) in SHELLS for party in parties)  # a daemon may reload on HUP
    first = "-HUP " if hangup else ""
    in_groups = _in_killed_groups(parties)
    lines: dict[str, list[str]] = {first: [], "": [], KILL: []}
    for party in parties:
        if party.pid in in_groups:
            continue  # a sharer its holder's group kill reaches: signalled once
        heeded = _heeded(party.ignored, first)
        if party.leads_group or heeded == first:
            lines[first].append(f"-{party.pid}" if party.leads_group else str(party.pid))
        for below in party.below:
            signal = first if (not hangup or below.name in SHELLS) else ""
            reached = party.leads_group and below.group == party.pid
            if below.name in NEVER_SIGNALLED or (reached and not _ignores(below.ignored, first)):
                continue
            lines[_heeded(below.ignored, signal)].append(str(below.pid))
        if heeded != first:
            lines[heeded].append(str(party.pid))
    said: set[str] = set()
    commands = []
    for signal, targets in lines.items():
        fresh = [target for target in dict.fromkeys(targets) if target not in said]
        said.update(fresh)
        if fresh:
            commands.append(_kill_line(signal, fresh))
    return "; ".join(commands)


KILL = "-KILL "
"""What a process that ignores the signal it would get is sent: the one no process can
ignore (it skips its cleanup, which a process that ignores SIGTERM has chosen to skip)."""
_SIGNAL_NUMBERS = {"-HUP ": 1, "": 15}


def _heeded(ignored: int, signal: str) -> str:
    """The signal a process ignoring `ignored` is sent in place of `signal`: `signal` itself,
    else SIGTERM (a shell started with `nohup` ignores SIGHUP, not SIGTERM, and SIGTERM lets it
    run its EXIT trap), else SIGKILL."""
    for heeded in dict.fromkeys((signal, "")):
        if not _ignores(ignored, heeded):
            return heeded
    return KILL


def _ignores(ignored: int, signal: str) -> bool:
    """Whether a process ignoring `ignored` (Process.ignored) ignores `signal`."""
    number = _SIGNAL_NUMBERS.get(signal)
    return number is not None and bool(ignored & (1 << (number - 1)))


def _in_killed_groups(parties: list[Holder]) -> set[int]:
    """The processes a group kill of one of `parties` reaches, as far as the capture saw them
    (what runs below a group leader, still in its group): `flock FILE cmd`'s cmd shares the
    lock, and listed by PID too it got the signal twice, which some programs take as 'quit
    now, without cleaning up'."""
    return {
        below.pid
        for party in parties
        if party.leads_group
        for below in party.below
        if below.group == party.pid and below.pid != party.pid
    }


def _kill_line(signal: str, targets: list[str]) -> str:
    if any(target.startswith("-") for target in targets):
        # procps's kill reads `kill -- -6` as signal 6 with no PID; with the signal named it
        # reads every `-PID` after `--` as a group (bash's builtin reads both forms alike).
        # No one form serves dash's builtin too: it refuses `kill -TERM -- -6` ("Illegal
        # number: -") and takes `kill -s TERM -- -6`, which procps 4.0 misreads (the group
        # is not signalled). The argv runs procps's; a `sh` script must run it as /bin/kill.
        signal = f"{signal or '-TERM '}-- "
    return "kill " + signal + " ".join(dict.fromkeys(targets))


CONTAINER_STOP = {
    "podman": ("podman", "stop"),
    "docker": ("docker", "stop"),
    "systemd-nspawn": ("machinectl", "stop"),
    "lxc": ("lxc-stop", "-n"),
}


def advise_in_container(holder: Holder, container: Container, sharers: tuple[Holder, ...]) -> str:
    """Stop the holder without stopping what it lives beside: the container when the holder
    is the container's own job (its PID 1), the holder's unit inside a machine systemd runs,
    else its processes by their PIDs on this host. Never the host's unit of the container (a
    scope or nspawn's service), which is the whole container."""
    named = container.by_name and valid_runtime_name(container.name)
    if container.init and named:
        return command(*CONTAINER_STOP[container.runtime], container.name)
    unit = holder.unit if holder.unit and valid_unit_name(holder.unit) else None
    if container.runtime == "systemd-nspawn" and unit and named:
        return command("systemctl", "-M", container.name, "stop", unit)
    return kill(holder, sharers)


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
