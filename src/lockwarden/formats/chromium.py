"""A Chromium profile (user-data-dir) of Chrome, Chromium, puppeteer or whatsapp-web.js.

The browser's main process makes `SingletonLock -> HOST-PID` (split at the last `-`: host names
may contain dashes), next to `SingletonCookie -> RANDOM` and `SingletonSocket -> /tmp/.../socket`.
A killed browser leaves all three behind. Chromium itself breaks the lock only for this host and
a PID that is not running, or one whose executable's name differs from its own. lockwarden
cannot tell which program made the lock: every Electron app makes it under its own name (VS
Code as `code`), so a live PID running none of the Chromium executables it knows is `unknown`
(probably a reused PID), never stale.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import replace

from lockwarden.formats.base import STOP_HOLDER, lstat_or_none
from lockwarden.formats.symlink_lock import (
    LinkRecord,
    RecordProblem,
    claim_from_link,
    parse_pid,
    read_or_problem,
)
from lockwarden.model import Claim, PidProof
from lockwarden.support.safe_read import read_link

NAME = "chromium-profile"
LOCK_NAME = "SingletonLock"
COMPANIONS = ("SingletonCookie", "SingletonSocket")
PROFILE_MARKERS = ("Local State", *COMPANIONS)
# The executables that take a profile's SingletonLock (argv[0] basenames).
CHROMIUM_EXECUTABLES = (
    "chromium",
    "chromium-browser",
    "chrome",
    "google-chrome",
    "google-chrome-stable",
    "chrome-headless-shell",
    "headless_shell",
)


class ChromiumProfile:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a Chromium/Chrome user-data-dir: SingletonLock -> HOST-PID"
    layout = True
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISLNK(status.st_mode):
            return os.path.basename(path) == LOCK_NAME
        if not stat.S_ISDIR(status.st_mode):
            return False
        return any(
            lstat_or_none(os.path.join(path, name)) for name in (LOCK_NAME, *PROFILE_MARKERS)
        )

    def read(self, path: str, pid_max: int) -> Claim:
        status = lstat_or_none(path)
        is_dir = status is not None and stat.S_ISDIR(status.st_mode)
        lock_path = os.path.join(path, LOCK_NAME) if is_dir else path
        found = read_or_problem(NAME, lock_path)
        if isinstance(found, Claim):
            return found
        return _claim(lock_path, found, pid_max)


def _claim(lock_path: str, record: LinkRecord, pid_max: int) -> Claim:
    base = claim_from_link(NAME, lock_path, record)
    host, dash, pid_text = record.text.rpartition("-")
    try:
        if not dash or not host:
            raise RecordProblem(f"{record.text!r} is not HOST-PID")
        pid = parse_pid(pid_text, pid_max)
    except RecordProblem as error:
        return replace(base, problem=f"{lock_path}: {error}", started_at=None)
    directory = os.path.dirname(lock_path)
    return replace(
        base,
        pid=pid,
        host=host,
        pid_proof=PidProof(executables=CHROMIUM_EXECUTABLES),
        extra=_companions(directory),
        break_command=_break_command(directory),
    )


def _companions(directory: str) -> dict[str, object]:
    """The other two links, for the report (the socket's path says which /tmp dir was used)."""
    found: dict[str, object] = {}
    for name in COMPANIONS:
        try:
            found[name] = read_link(os.path.join(directory, name))
        except OSError:
            continue
    return found


def _break_command(directory: str) -> str:
    paths = [os.path.join(directory, name) for name in (LOCK_NAME, *COMPANIONS)]
    return "rm -f -- " + " ".join(shlex.quote(path) for path in paths)
