"""Log lines shaped for where stderr goes.

Under systemd (stderr is the stream named by `JOURNAL_STREAM`) each line starts with its syslog
priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug) so journald files it at the
right level, and carries no timestamp (the journal adds one). On a terminal a line reads
`lockwarden: warning: ...`, coloured only when stderr is a TTY and `NO_COLOR` is unset.
Logs go to stderr; the report goes to stdout.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import IO

JOURNAL_PRIORITIES = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}

_COLOURS = {
    logging.CRITICAL: "\033[1;31m",
    logging.ERROR: "\033[31m",
    logging.WARNING: "\033[33m",
    logging.DEBUG: "\033[2m",
}
_RESET = "\033[0m"


def syslog_priority(level: int) -> int:
    """The syslog priority of a logging level; levels in between round to the more severe."""
    for threshold, priority in sorted(JOURNAL_PRIORITIES.items()):
        if level <= threshold:
            return priority
    return JOURNAL_PRIORITIES[logging.CRITICAL]


class JournalFormatter(logging.Formatter):
    """`<PRIORITY>message`, on every line of a multi-line record (journald splits lines)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        text = super().format(record)
        return "\n".join(prefix + line for line in text.splitlines() or [""])


class TerminalFormatter(logging.Formatter):
    """`lockwarden: warning: message`; an error's message names its own kind
    (`config error: ...`), so errors read `lockwarden: config error: ...`."""

    def __init__(self, colour: bool) -> None:
        super().__init__()
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        label = "" if record.levelno >= logging.ERROR else f"{record.levelname.lower()}: "
        line = f"lockwarden: {label}{text}"
        colour = _COLOURS.get(record.levelno) if self.colour else None
        return f"{colour}{line}{_RESET}" if colour else line


def writes_to_journal(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """True when `stream` is the journal stream systemd connected: JOURNAL_STREAM names its
    `device:inode`. Comparing them (as systemd.exec(5) advises) keeps a redirected stderr,
    e.g. `lockwarden --once 2>log` inside a unit, free of priority prefixes."""
    expected = environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return expected == f"{status.st_dev}:{status.st_ino}"


def wants_colour(stream: IO[str], environ: Mapping[str, str]) -> bool:
    if "NO_COLOR" in environ:
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def formatter_for(stream: IO[str], environ: Mapping[str, str]) -> logging.Formatter:
    if writes_to_journal(stream, environ):
        return JournalFormatter()
    return TerminalFormatter(colour=wants_colour(stream, environ))


def configure(verbose: bool, stream: IO[str], environ: Mapping[str, str]) -> logging.Handler:
    """Send the `lockwarden` loggers to `stream`, replacing any handler set before."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_for(stream, environ))
    logger = logging.getLogger("lockwarden")
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False
    return handler


def release(handler: logging.Handler) -> None:
    """Undo `configure`: the `lockwarden` loggers go back to logging's defaults."""
    logger = logging.getLogger("lockwarden")
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
