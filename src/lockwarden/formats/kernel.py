"""Any file held with flock, POSIX (fcntl/lockf) or OFD locks, with nothing recorded in it.

The file itself proves nothing: flock(1), py-filelock and portalocker leave it in place. Only
the kernel's lock table says whether it is held, so this format reads no content at all.
"""

from __future__ import annotations

import os
import stat

from lockwarden.formats.base import KERNEL_ONLY, STOP_HOLDER, absent, key_of, unreadable
from lockwarden.formats.hidden import hidden_locks
from lockwarden.model import Claim

NAME = "kernel"


class KernelLockFile:
    name = NAME
    holder_action = STOP_HOLDER
    summary = "a file held with flock, fcntl/lockf or OFD locks; its content is ignored"
    layout = False
    directory = False
    never_removed = KERNEL_ONLY

    def detect(self, path: str, status: os.stat_result) -> bool:
        return stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)

    def read(self, path: str, pid_max: int) -> Claim:
        try:
            status = os.stat(path)
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
        )
