"""Loggers that import `logging` only when a line will be written.

`import logging` (with the `traceback`, `tokenize`, `string` and `weakref` it pulls in) costs
about 6 ms, a tenth of a quiet `--once` that logs nothing. Every lockwarden module logs through
`getLogger(__name__)` from here: a call below the level the CLI asked for returns at once; the
first call that will write imports `logging`, applies the CLI's settings (logs.configure) and
hands the record on. Until the CLI configures anything (lockwarden used as a library, or in
tests) every call goes straight to `logging`, so its own levels and handlers decide.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import IO, Any

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40

_threshold = 0  # the lowest level worth importing logging for; 0: not configured, pass all
_pending: tuple[bool, IO[str], Mapping[str, str]] | None = None
_applying = threading.Lock()  # two threads logging first at once must configure once


def configure(verbose: bool, stream: IO[str], environ: Mapping[str, str]) -> None:
    """What the CLI wants (logs.configure's arguments), applied when something is logged."""
    global _threshold, _pending
    _threshold = DEBUG if verbose else WARNING
    _pending = (verbose, stream, environ)


def reset() -> None:
    """Forget the CLI's settings: every call goes straight to `logging` again."""
    global _threshold, _pending
    _threshold, _pending = 0, None


def ready() -> None:
    """Apply the CLI's settings now: before touching the handlers (notify's redaction)."""
    global _pending
    if _pending is None:
        return
    with _applying:
        settings, _pending = _pending, None
        if settings is not None:
            from lockwarden import logs

            logs.configure(*settings)


class Logger:
    """The part of `logging.Logger` lockwarden uses: debug, info, warning, error."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _log(self, level: int, message: str, args: tuple[Any, ...], keywords: Any) -> None:
        if level < _threshold:
            return
        ready()
        import logging

        keywords.setdefault("stacklevel", 3)  # the record names the caller, not this module
        logging.getLogger(self.name).log(level, message, *args, **keywords)

    def debug(self, message: str, *args: Any, **keywords: Any) -> None:
        self._log(DEBUG, message, args, keywords)

    def info(self, message: str, *args: Any, **keywords: Any) -> None:
        self._log(INFO, message, args, keywords)

    def warning(self, message: str, *args: Any, **keywords: Any) -> None:
        self._log(WARNING, message, args, keywords)

    def error(self, message: str, *args: Any, **keywords: Any) -> None:
        self._log(ERROR, message, args, keywords)


def getLogger(name: str) -> Logger:
    return Logger(name)
