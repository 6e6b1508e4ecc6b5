"""Whether a file lockwarden trusts as root is safe from the other users of the host.

lockwarden runs as root and acts on what its config says: it writes the Prometheus textfile
where `[prometheus] textfile` points, posts to the URLs of `notify.urls_file`, runs with the
settings the file gives. A user who can change one of those files, or replace it through a
directory above it, can point root's writes at any file or send the alerts elsewhere; a user
who can read a credential can post as the on-call channel. So every such file is checked
here, the way OpenSSH checks `authorized_keys`: the file and every directory above it must be
owned by root or by the user lockwarden runs as, and writable by no one else. A world-writable
directory with the sticky bit (/tmp) is safe to pass through: no one but its owner can rename or
remove an entry in it, so what matters is that entry's own owner. A directory above the file
may also belong to a system account (a uid below login.defs' UID_MIN): the distribution gave it
that directory, as Debian gives `/var/lib/prometheus` to prometheus above node-exporter's
root-owned textfile directory, and no local person logs in as it.
"""

from __future__ import annotations

import functools
import os
import stat


class Untrusted(OSError):
    """A path lockwarden refuses to use: `str()` is the whole sentence, with the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def trusted_owners() -> frozenset[int]:
    """Root, and the user this process runs as (a user unit's lockwarden trusts its user)."""
    return frozenset({0, os.geteuid()})


def write_problem(path: str, owners: frozenset[int] | None = None) -> str | None:
    """Why `path` (a file or directory) could be changed, or replaced, by a user other than
    `owners` (default: trusted_owners()): the first of it and the directories above it that
    is owned by another user or writable by group or others, with the fix; None when safe.
    A path that does not exist is checked from the first directory that does."""
    trusted = trusted_owners() if owners is None else owners
    real = os.path.realpath(path)
    chain = [real, *_ancestors(real)]
    for number, place in enumerate(chain):
        try:
            status = os.stat(place)
        except OSError:
            continue  # not there (yet): only what exists can be swapped
        above = number > 0
        owners_here = (
            trusted | {status.st_uid} if above and _system_account(status.st_uid) else trusted
        )
        problem = _status_problem(place, status, owners_here, sticky_ok=above)
        if problem is not None:
            return problem if number == 0 else f"{path} is under {problem}"
    return None


def read_problem(status: os.stat_result) -> str | None:
    """Why a file of secrets (its status, from the descriptor that reads it) is readable by
    other users: `mode 0644`; None when it is not."""
    mode = stat.S_IMODE(status.st_mode)
    if not mode & (stat.S_IRGRP | stat.S_IROTH):
        return None
    return f"readable by other users (mode {mode:04o})"


def owner_problem(status: os.stat_result, owners: frozenset[int] | None = None) -> str | None:
    """Why a file is not its trusted owners' (`owned by uid 1001`): None when it is."""
    trusted = trusted_owners() if owners is None else owners
    if status.st_uid in trusted:
        return None
    return f"owned by uid {status.st_uid}{_user_name(status.st_uid)}, not by {_owners(trusted)}"


def _status_problem(
    place: str, status: os.stat_result, owners: frozenset[int], sticky_ok: bool
) -> str | None:
    owner = owner_problem(status, owners)
    if owner is not None:
        return f"{place}, {owner}: chown root {place}"
    mode = stat.S_IMODE(status.st_mode)
    writable = mode & (stat.S_IWGRP | stat.S_IWOTH)
    if not writable:
        return None
    if sticky_ok and stat.S_ISDIR(status.st_mode) and mode & stat.S_ISVTX:
        return None  # like /tmp: only an entry's owner may replace it
    who = "everyone" if mode & stat.S_IWOTH else f"group {_group_name(status.st_gid)}"
    return f"{place}, writable by {who} (mode {mode:04o}): chmod go-w {place}"


def _system_account(uid: int) -> bool:
    """A uid below the first one `useradd` gives a person (login.defs' UID_MIN, 1000 unless
    it says otherwise)."""
    return uid < _uid_min()


@functools.cache
def _uid_min() -> int:
    try:
        with open("/etc/login.defs", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                words = line.split()
                if len(words) >= 2 and words[0] == "UID_MIN" and words[1].isdigit():
                    return int(words[1])
    except OSError:
        pass  # no login.defs: useradd's own default
    return 1000


def _ancestors(path: str) -> list[str]:
    found: list[str] = []
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return found
        found.append(parent)
        path = parent


def _owners(owners: frozenset[int]) -> str:
    return " or ".join("root" if uid == 0 else f"uid {uid}" for uid in sorted(owners))


def _user_name(uid: int) -> str:
    import pwd  # only a refusal names the user

    try:
        return f" ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return ""


def _group_name(gid: int) -> str:
    import grp  # only a refusal names the group

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
