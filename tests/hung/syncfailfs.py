"""A FUSE file system whose directories cannot be synced: a flat directory held in memory
where files are made, written, renamed and removed as on any disk, but fsync of a directory
fails with EIO, as it does on a disk or network file system that lost its write-back. Run by
Debian's python3 (python3-fusepy), as its own process:

    python3 syncfailfs.py MOUNTPOINT

It prints "ready" once mounted. Its root is owned by the user that mounted it, mode 0700.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations  # Debian's python3-fusepy
from hangfs import say_ready_once_mounted  # beside this file: run as a script, it is on the path


class SyncFailFS(Operations):  # type: ignore[misc]
    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.modes: dict[str, int] = {}
        self.lock = threading.Lock()
        self.started = time.time()

    def _times(self) -> dict[str, float]:
        return {"st_atime": self.started, "st_mtime": self.started, "st_ctime": self.started}

    def getattr(self, path: str, fh: object = None) -> dict[str, float]:
        owner = {"st_uid": os.getuid(), "st_gid": os.getgid(), **self._times()}
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o700, "st_nlink": 2, **owner}
        with self.lock:
            if path not in self.files:
                raise FuseOSError(errno.ENOENT)
            size = len(self.files[path])
            mode = self.modes[path]
        return {"st_mode": stat.S_IFREG | mode, "st_nlink": 1, "st_size": size, **owner}

    def readdir(self, path: str, fh: object) -> list[str]:
        with self.lock:
            return [".", "..", *(name[1:] for name in self.files)]

    def create(self, path: str, mode: int, fi: object = None) -> int:
        with self.lock:
            self.files[path] = bytearray()
            self.modes[path] = stat.S_IMODE(mode)
        return 0

    def open(self, path: str, flags: int) -> int:
        with self.lock:
            if path not in self.files:
                raise FuseOSError(errno.ENOENT)
            if flags & os.O_TRUNC:
                self.files[path].clear()
        return 0

    def read(self, path: str, size: int, offset: int, fh: object) -> bytes:
        with self.lock:
            return bytes(self.files[path][offset : offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: object) -> int:
        with self.lock:
            content = self.files[path]
            content[offset : offset + len(data)] = data
        return len(data)

    def truncate(self, path: str, length: int, fh: object = None) -> None:
        with self.lock:
            del self.files[path][length:]

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            if old not in self.files:
                raise FuseOSError(errno.ENOENT)
            self.files[new] = self.files.pop(old)
            self.modes[new] = self.modes.pop(old)

    def unlink(self, path: str) -> None:
        with self.lock:
            if path not in self.files:
                raise FuseOSError(errno.ENOENT)
            del self.files[path]
            del self.modes[path]

    def chmod(self, path: str, mode: int) -> None:
        with self.lock:
            self.modes[path] = stat.S_IMODE(mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        pass

    def utimens(self, path: str, times: object = None) -> None:
        pass

    def fsync(self, path: str, datasync: int, fh: object) -> None:
        pass  # a file's own data syncs

    def fsyncdir(self, path: str, datasync: int, fh: object) -> None:
        raise FuseOSError(errno.EIO)  # a directory's entries do not


def main() -> None:
    mountpoint = sys.argv[1]
    threading.Thread(target=say_ready_once_mounted, args=(mountpoint,), daemon=True).start()
    FUSE(SyncFailFS(), mountpoint, foreground=True, nothreads=False, subtype="syncfailfs")
    os._exit(0)


if __name__ == "__main__":
    main()
