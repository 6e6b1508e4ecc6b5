"""What every database check shares: the password's source and the check's time limits."""

from __future__ import annotations

import math
from collections.abc import Mapping

from lockwarden.config import DatabaseWatch, credential_file

APPLICATION_NAME = "lockwarden"
PASSWORD_LIMIT = 4096
# libpq counts connect_timeout in whole seconds and treats 1 as 2.
MIN_CONNECT_TIMEOUT_S = 2


class CheckProblem(Exception):
    """The check could not look: the finding is `unknown`, with this as the reason."""


def read_password(watch: DatabaseWatch, environ: Mapping[str, str]) -> str | None:
    """The password from `password_file` (a bare name is a systemd credential). Errors name the
    file, never its content."""
    if watch.password_file is None:
        return None
    path = credential_file(watch.password_file, environ)
    if path is None:
        raise CheckProblem(
            f"password_file {watch.password_file!r} is a credential name but "
            "$CREDENTIALS_DIRECTORY is not set (use LoadCredential= in the service, or an "
            "absolute path)"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(PASSWORD_LIMIT)
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8"
        raise CheckProblem(f"cannot read password_file {path}: {reason}") from None
    return text.rstrip("\r\n")


def connect_timeout_s(watch: DatabaseWatch) -> int:
    return max(MIN_CONNECT_TIMEOUT_S, math.ceil(watch.connect_timeout))


def statement_timeout_ms(watch: DatabaseWatch) -> int:
    return max(1, round(watch.statement_timeout * 1000))


CONNECT_ATTEMPTS = 3  # libpq gives each address of a name (IPv6, IPv4) and host its own


def answer_deadline_s(watch: DatabaseWatch, queries: int) -> float:
    """How long a session of `queries` queries waits for its server in all: connect_timeout for
    each of CONNECT_ATTEMPTS addresses, statement_timeout for each query, and a second of
    round trips. The server's own timeouts cannot act when it (or a proxy in front of it) took
    the connection and stopped answering, nor on a slow name lookup: then this deadline does
    (abandon.within)."""
    attempts = CONNECT_ATTEMPTS * connect_timeout_s(watch)
    return attempts + queries * max(watch.statement_timeout, 1.0) + 1.0


def unanswered(deadline_s: float, queries: int) -> str:
    """The reason given when answer_deadline_s passed."""
    return (
        f"the server did not answer within {deadline_s:g}s (connect_timeout "
        f"{CONNECT_ATTEMPTS} times, statement_timeout for each of {queries} queries, and a "
        "second): it, or the network or name lookup before it, stopped answering; the check "
        "was abandoned"
    )


def one_line(error: BaseException, limit: int = 300) -> str:
    """A driver's error on one line, cut: it goes into a report and an alert."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
