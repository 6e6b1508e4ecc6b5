"""A FUSE file system that stops answering, the way a hard-mounted NFS, SSHFS or CIFS share
does when its server goes away. Run by Debian's python3 (python3-fusepy), as its own process:

    python3 hangfs.py MOUNTPOINT MODE [PID [FLAG]]

It holds one directory, `store/`, with a lock record `store/LOCK` in it naming PID (default 1).
MODE says how it answers for anything below its root (the root itself always answers, so it
mounts):
`hang` never answers, `slow` answers after SLOW_S seconds, `hang-reads` answers lookups
but never a read of a file's contents, `hang-from-trap` answers until something below `trap/`
is asked for and then nothing below the root (a server that went away in the middle of a
run), `hang-when-flagged` answers until the file FLAG (outside the mount) exists and then
nothing below the root (its record names this host too, so a dead PID in it is provably stale:
a test flags it at the step of a run it wants to hang). It prints "ready" once mounted.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations  # Debian's python3-fusepy

SLOW_S = 0.2


class HangingFS(Operations):  # type: ignore[misc]
    def __init__(self, mode: str, record: bytes, flag: str | None = None) -> None:
        self.mode = mode
        self.flag = flag
        self.record = record
        self.forever = threading.Event()
        self.started = time.time()
        self.trapped = False

    def _answer_or_hang(self, path: str) -> None:
        if path == "/":
            return
        if self.mode == "hang-from-trap" and (path == "/trap" or path.startswith("/trap/")):
            self.trapped = True
        if self.mode == "hang-when-flagged" and self.flag and os.path.exists(self.flag):
            self.trapped = True
        if self.mode == "hang" or self.trapped:  # nothing below the root answers
            self.forever.wait()  # never set: the request stays unanswered
        elif self.mode == "slow":
            time.sleep(SLOW_S)

    def getattr(self, path: str, fh: object = None) -> dict[str, float]:
        self._answer_or_hang(path)
        times = {"st_atime": self.started, "st_mtime": self.started, "st_ctime": self.started}
        if path in ("/", "/store"):
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, **times}
        if path == "/store/LOCK":
            return {
                "st_mode": stat.S_IFREG | 0o644,
                "st_nlink": 1,
                "st_size": len(self.record),
                **times,
            }
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path: str, fh: object) -> list[str]:
        self._answer_or_hang(path)
        return [".", "..", "store"] if path == "/" else [".", "..", "LOCK"]

    def read(self, path: str, size: int, offset: int, fh: object) -> bytes:
        if self.mode == "hang-reads":  # names and attributes answer; contents never come
            self.forever.wait()
        self._answer_or_hang(path)
        return self.record[offset : offset + size]


def main() -> None:
    mountpoint, mode = sys.argv[1], sys.argv[2]
    pid = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    flag = sys.argv[4] if len(sys.argv) > 4 else None
    fields: dict[str, object] = {"pid": pid, "role": "mounted-writer"}
    if mode == "hang-when-flagged":
        fields["host"] = socket.gethostname()
    record = json.dumps(fields).encode()
    # The kernel must ask every time (no attribute or entry cache), as it does for a share
    # whose server just went away after the cached answers expired.
    options = {"attr_timeout": 0, "entry_timeout": 0, "negative_timeout": 0, "subtype": "hangfs"}
    threading.Thread(target=say_ready_once_mounted, args=(mountpoint,), daemon=True).start()
    FUSE(HangingFS(mode, record, flag), mountpoint, foreground=True, nothreads=False, **options)
    # The connection was aborted or unmounted: end now, whatever request threads still wait.
    os._exit(0)


def say_ready_once_mounted(mountpoint: str) -> None:
    """Print "ready" once the mount shows in mountinfo (read there, never by touching it).
    syncfailfs.py says it the same way."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open("/proc/self/mountinfo") as mounts:
            if any(line.split()[4] == mountpoint for line in mounts):
                print("ready", flush=True)
                return
        time.sleep(0.02)
    print("not mounted", flush=True)


if __name__ == "__main__":
    main()
