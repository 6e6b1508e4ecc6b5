"""A pidfile (`/run/NAME.pid`, python-daemon, lockfile's PIDLockFile): `"<pid>\\n"`."""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import (
    STOP_HOLDER,
    absent,
    claim_from_record_file,
    key_of,
    lstat_or_none,
)
from lockwarden.model import Claim

NAME = "pidfile"


class Pidfile:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a file holding the holder's PID, removed by the holder when it exits"
    layout = False
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) and path.endswith(".pid")

    def read(self, path: str, pid_max: int) -> Claim:
        status = lstat_or_none(path)
        if status is None:
            return absent(NAME, path, existence_is_lock=True)
        claim = claim_from_record_file(
            NAME, path, pid_max, existence_is_lock=True, keys=(key_of(status),)
        )
        return replace(claim, remove_path=path)
