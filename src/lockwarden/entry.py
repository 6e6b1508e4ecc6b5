"""The `lockwarden` command's entry point: start reading /proc/locks before importing the rest.

Reading /proc/locks takes the kernel's file-lock rwsem for writing (fs/locks.c, locks_start:
`percpu_down_write(&file_rwsem)`), which sleeps through an RCU grace period unless another
reader passed just before: ~10 ms on an idle 2-core machine, a sixth of a quiet run. Started
in a thread before Python imports lockwarden (~25 ms), that sleep overlaps the imports instead
of adding to them. This module imports nothing heavy so that the thread starts first.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence


class LocksPrefetch:
    """/proc/locks read in a background thread; `text()` waits for it (or raises its error)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._text: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._read, name="proc-locks", daemon=True)

    @classmethod
    def start(cls, path: str = "/proc/locks") -> LocksPrefetch:
        prefetch = cls(path)
        prefetch._thread.start()
        return prefetch

    def _read(self) -> None:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                self._text = handle.read()
        except OSError as error:  # raised where the run needs the text, as a direct read would
            self._error = error

    def text(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._text is not None
        return self._text


def wants_snapshot(arguments: Sequence[str]) -> bool:
    """Only `--once` runs use it; anything else (help, check-config, demo) never waits on it."""
    return "--once" in arguments


def main() -> int:
    prefetch = LocksPrefetch.start() if wants_snapshot(sys.argv[1:]) else None
    from lockwarden.cli import main as cli_main

    code = cli_main(locks=prefetch)
    notify = sys.modules.get("lockwarden.notify")
    if notify is not None and notify.abandoned_sends():
        # A send past the budget still waits in a socket: leave without interpreter
        # finalisation, which can crash under a daemon thread still inside C code.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
