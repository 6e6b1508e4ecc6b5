"""dpkg's and apt's locks: empty files held with POSIX (fcntl) write locks.

apt takes `/var/lib/dpkg/lock-frontend` and then `/var/lib/dpkg/lock` for a whole install;
`/var/cache/apt/archives/lock` and `/var/lib/apt/lists/lock` while downloading. The kernel frees
them when the holder exits, so they are never stale. The file itself must never be deleted:
the next apt or dpkg would lock a new file while the old holder still writes, and two package
managers at once corrupt the dpkg database.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import KERNEL_ONLY, HolderAction, SafeAction
from lockwarden.formats.kernel import KernelLockFile
from lockwarden.model import Claim, Staleness, StaleProof

NAME = "dpkg"
DPKG_LOCK_PATHS = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/cache/apt/archives/lock",
    "/var/lib/apt/lists/lock",
)
# A copy of the layout under another root (a chroot, a container's /var) is the same lock.
DPKG_LOCK_SUFFIXES = tuple(path.replace("/var", "", 1) for path in DPKG_LOCK_PATHS)
NEVER_REMOVE = (
    "dpkg and apt lock this file itself; deleting it lets a second package manager run "
    "beside the holder and corrupt the dpkg database — wait for the holder or stop it (then "
    "run `dpkg --configure -a` if it was interrupted mid-install)"
)


class DpkgLock:
    name = NAME
    flock = False
    holder_action = SafeAction(
        HolderAction.WAIT,
        "never kill a package manager mid-transaction (it leaves the package database "
        "broken). If it is truly hung, stop it only between packages and run "
        "`dpkg --configure -a` afterwards",
    )
    summary = "a dpkg/apt lock file (POSIX lock; never stale, never to be deleted)"
    layout = False
    directory = False
    never_removed = KERNEL_ONLY

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) and path.endswith(DPKG_LOCK_SUFFIXES)

    def read(self, path: str, pid_max: int) -> Claim:
        claim = KernelLockFile().read(path, pid_max)
        return replace(
            claim, format=NAME, stale=Staleness(StaleProof.NEVER), never_remove=NEVER_REMOVE
        )
