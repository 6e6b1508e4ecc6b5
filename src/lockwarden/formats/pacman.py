"""pacman's database lock: `DBPath/db.lck`, created O_EXCL, empty, and kept open by pacman
(libalpm's `_alpm_handle_lock`) until it unlocks. A killed pacman leaves the file behind, and
pacman refuses to run until someone removes it; a process with it open is the holder, and no
process with it open proves it stale, unless a `pacman-db-upgrade` runs: that script takes the
lock with `touch` and drops it with `rm`, holding it without keeping it open.
"""

from __future__ import annotations

import os
import stat

from lockwarden.formats.base import (
    HolderAction,
    SafeAction,
    absent,
    key_of,
    lstat_or_none,
    mtime_of,
    unreadable,
)
from lockwarden.model import Claim, Staleness, StaleProof, Workers

NAME = "pacman"
LOCK_NAME = "db.lck"
# pacman-db-upgrade (shipped with pacman) takes the lock with `touch`, upgrades the database and
# `rm`s it, never keeping it open: while one runs anywhere (the kernel cuts its name to 15
# characters), the lock is held.
UPGRADERS = Workers(("/",), ("pacman-db-upgr*",))


class PacmanLock:
    name = NAME
    flock = False
    holder_action = SafeAction(
        HolderAction.WAIT,
        "never kill a package manager mid-transaction (it leaves the package database "
        "broken). If it is truly hung, stop it, check the database with `pacman -Dk`, and "
        "only then remove db.lck",
    )
    summary = "pacman's db.lck (held while a process has it open)"
    layout = False
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) and os.path.basename(path) == LOCK_NAME

    def read(self, path: str, pid_max: int) -> Claim:
        status = lstat_or_none(path)
        if status is None:
            return absent(NAME, path, existence_is_lock=True)
        if not stat.S_ISREG(status.st_mode):
            return unreadable(
                NAME,
                path,
                f"{path} is not a regular file; pacman's lock is one",
                existence_is_lock=True,
            )
        return Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=True,
            keys=(key_of(status),),
            created_at=mtime_of(status),
            stale=Staleness(
                StaleProof.NO_OPENER,
                "pacman keeps db.lck open for as long as it holds the lock, and no "
                "pacman-db-upgrade runs",
            ),
            workers=UPGRADERS,
            record_path=path,
            remove_path=path,
        )
