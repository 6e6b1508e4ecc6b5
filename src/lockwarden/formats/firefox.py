"""A Firefox-family profile (Firefox, Firefox ESR, Thunderbird, SeaMonkey, LibreWolf).

A running browser makes `PROFILE/lock -> IP:+PID` (the address of its host, `127.0.0.1` when
it has no other) and holds a POSIX write lock on the empty `PROFILE/.parentlock`. A clean exit
removes the symlink and leaves `.parentlock`; a killed browser leaves the symlink too, and the
kernel drops the fcntl lock with the process. Automation that finds the symlink left behind
fails with "Firefox is already running".

So: a kernel lock on `.parentlock` is held (its holder found in fdinfo), whatever the program
is called (a Firefox fork of a name not listed here holds it too); the symlink alone names a
PID, and a dead PID, or one running another program, is stale: the kernel lock would show if
it were held. An address that is not this host's makes the
PID meaningless here: another host's profile (a shared home directory) is `unknown`.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import stat
from dataclasses import replace

from lockwarden.formats.base import STOP_HOLDER, key_of, lstat_or_none, one_name
from lockwarden.formats.symlink_lock import (
    LinkRecord,
    RecordProblem,
    claim_from_link,
    parse_pid,
    read_or_problem,
)
from lockwarden.model import Claim, PidProof

NAME = "firefox-profile"
LOCK_NAME = "lock"
PARENT_LOCK = ".parentlock"
SEPARATOR = ":+"
# The executables that take a profile's lock (argv[0] basenames, or the kernel's name).
FIREFOX_EXECUTABLES = (
    "firefox",
    "firefox-esr",
    "firefox-bin",
    "thunderbird",
    "thunderbird-bin",
    "seamonkey",
    "librewolf",
    "icecat",
)


class FirefoxProfile:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a Firefox/Thunderbird profile: lock -> IP:+PID and an fcntl-locked .parentlock"
    layout = True
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISLNK(status.st_mode):
            return os.path.basename(path) == LOCK_NAME and _is_record(path)
        if not stat.S_ISDIR(status.st_mode):
            return os.path.basename(path) == PARENT_LOCK
        return lstat_or_none(os.path.join(path, PARENT_LOCK)) is not None or _is_record(
            os.path.join(path, LOCK_NAME)
        )

    def read(self, path: str, pid_max: int) -> Claim:
        directory = _profile_directory(path)
        lock_path = os.path.join(directory, LOCK_NAME)
        parent_path = os.path.join(directory, PARENT_LOCK)
        parent = lstat_or_none(parent_path)
        keys = (key_of(parent),) if parent is not None else ()
        # The browser's kernel lock is on .parentlock, beside the symlink: its one name shows
        # a holder's descriptor to be on the profile's own file (Claim.key_names).
        named = one_name(parent_path, parent) if parent is not None else None
        names = (named,) if named is not None else ()
        found = read_or_problem(NAME, lock_path)
        if isinstance(found, Claim):
            if found.present or parent is None:
                return replace(found, keys=(*keys, *found.keys), key_names=names)
            # Only .parentlock (a clean exit leaves it): only its kernel lock counts, so the
            # lock's path is that file's.
            return replace(
                found, path=parent_path, present=True, existence_is_lock=False, keys=keys
            )
        return replace(_claim(directory, lock_path, found, keys, pid_max), key_names=names)


def _profile_directory(path: str) -> str:
    status = lstat_or_none(path)
    if status is not None and stat.S_ISDIR(status.st_mode):
        return path
    return os.path.dirname(path) or "."


def _is_record(path: str) -> bool:
    try:
        return SEPARATOR in os.readlink(path)
    except OSError:
        return False


def _claim(
    directory: str,
    lock_path: str,
    record: LinkRecord,
    parent_keys: tuple[tuple[int, int], ...],
    pid_max: int,
) -> Claim:
    base = claim_from_link(NAME, lock_path, record)
    address, separator, pid_text = record.text.rpartition(SEPARATOR)
    try:
        if not separator or not address:
            raise RecordProblem(f"{record.text!r} is not IP:+PID")
        pid = parse_pid(pid_text, pid_max)
        local = _is_this_host(address)
    except (RecordProblem, ValueError) as error:
        return replace(base, problem=f"{lock_path}: {error}", started_at=None)
    return replace(
        base,
        # The .parentlock's kernel lock is what the browser holds; the symlink's inode second.
        keys=(*parent_keys, *base.keys),
        pid=pid,
        host=os.uname().nodename if local else address,
        pid_proof=PidProof(executables=FIREFOX_EXECUTABLES, others_prove_reuse=True),
        remove_path=lock_path,
        break_command=f"rm -f -- {shlex.quote(lock_path)}",
        extra={"address": address},
    )


def _is_this_host(address: str) -> bool:
    """A loopback address, or one of this host's own (the kernel's local routing table)."""
    parsed = ipaddress.ip_address(address)
    if parsed.is_loopback:
        return True
    return address in _local_addresses()


def _local_addresses() -> set[str]:
    """IPv4 addresses from /proc/net/fib_trie's `/32 host LOCAL` entries, IPv6 from
    /proc/net/if_inet6: every address an interface of this host has."""
    found: set[str] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as trie:
            previous = ""
            for line in trie:
                if "/32 host LOCAL" in line:
                    found.add(previous.strip().removeprefix("|-- ").strip())
                previous = line
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii", errors="replace") as inet6:
            for line in inet6:
                digits = line.split()[0] if line.split() else ""
                if len(digits) == 32:
                    found.add(str(ipaddress.IPv6Address(int(digits, 16))))
    except (OSError, ValueError):
        pass
    return found
