"""Any file held with flock, POSIX (fcntl/lockf) or OFD locks, with nothing recorded in it.

The file itself proves nothing: flock(1), py-filelock and portalocker leave it in place. Only
the kernel's lock table says whether it is held, so this format reads no content at all.
"""

from __future__ import annotations

import os
import stat

from lockwarden.formats.base import (
    KERNEL_ONLY,
    STOP_HOLDER,
    absent,
    key_of,
    one_name,
    unreadable,
)
from lockwarden.formats.hidden import hidden_locks
from lockwarden.model import Claim, InodeKey

NAME = "kernel"


class KernelLockFile:
    name = NAME
    flock = True
    holder_action = STOP_HOLDER
    summary = "a file held with flock, fcntl/lockf or OFD locks; its content is ignored"
    layout = False
    directory = False
    never_removed = KERNEL_ONLY

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)

    def read(self, path: str, pid_max: int) -> Claim:
        try:
            status, names = _status_and_name(path)
        except (FileNotFoundError, NotADirectoryError):
            return absent(NAME, path, existence_is_lock=False)
        except OSError as error:
            return unreadable(NAME, path, f"{path}: {error.strerror}", existence_is_lock=False)
        if not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
            return unreadable(
                NAME, path, f"{path} is not a regular file or directory", existence_is_lock=False
            )
        key = key_of(status)
        return Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=False,
            keys=(key,),
            hidden_locks=hidden_locks([(path, key)]) if stat.S_ISREG(status.st_mode) else (),
            key_names=names,
        )


def _status_and_name(path: str) -> tuple[os.stat_result, tuple[tuple[InodeKey, str], ...]]:
    """The file the lock is on (a symlink followed) and, when `path` itself is that file, its
    one name (Claim.key_names): one lstat where the claims phase would make two."""
    if path.endswith("/"):
        return os.stat(path), ()  # `LOCK/` follows a symlink: named later, as any path
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode):
        return os.stat(path), ()
    named = one_name(path, status)
    return status, (named,) if named is not None else ()
