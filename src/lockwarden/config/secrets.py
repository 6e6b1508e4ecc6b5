"""Warn about a config file that holds secrets and that other users can read; refuse a
config or a urls_file that other users can change, and warn about a notify credential they
can read.

Apprise URLs and a heartbeat URL carry tokens; anyone who can read them can post as the
on-call channel, or ping the dead man's switch and hide that lockwarden stopped. lockwarden
warns (it does not refuse: refusing would stop the monitoring over a file mode, the failure
that hurts more) and names both fixes. docs/reliability.md documents the choice.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence

from lockwarden.config.schema import NOTIFY_CREDENTIAL, credential_file
from lockwarden.config.settings import Config, NotifySettings
from lockwarden.support.trusted import owner_problem, read_problem, write_problem


def holds_secrets(config: Config) -> bool:
    """Secrets written in the file itself (urls_file and urls_env keep them elsewhere)."""
    alertmanager_credentials = any("@" in url for url in config.alertmanager.urls)
    return bool(config.notify.urls or config.heartbeat.url or alertmanager_credentials)


def readable_secrets_warning(config: Config) -> str | None:
    """The warning to print, or None when the file is private or holds no secret."""
    if config.source is None or not holds_secrets(config):
        return None
    try:
        mode = stat.S_IMODE(os.stat(config.source).st_mode)
    except OSError:
        return None
    if not mode & (stat.S_IRGRP | stat.S_IROTH):
        return None
    return (
        f"{config.source} holds notification or heartbeat URLs with secrets and is readable by "
        f"other users (mode {mode:04o}): chmod 0600 {config.source}, or move the URLs to "
        "notify.urls_file (a systemd credential) or notify.urls_env"
    )


# The files lockwarden trusts as root (support/trusted.py says what is checked): a config or a
# urls_file that another user can change is refused, as its writer would decide where root
# writes and where the alerts go; a credential other users can read is warned about, like a
# config with secrets. docs/reliability.md documents each choice.


def config_file_problem(path: str) -> str | None:
    """The config error for a config file another user could change, or None."""
    problem = write_problem(path)
    if problem is None:
        return None
    return (
        f"{path}: refused: {problem} (lockwarden runs as root on what this file says, so no "
        "other user may be able to change it)"
    )


def urls_file_problem(path: str) -> str | None:
    """Why a urls_file may not be used: another user could change it, and so decide where the
    alerts go (or, through apprise's schemes, what a run reads and writes). None when safe."""
    problem = write_problem(path)
    if problem is None:
        return None
    return f"refused: another user could decide where alerts go, as {problem}"


def credential_warnings(
    notify: NotifySettings, environ: Mapping[str, str], stores: Sequence[str]
) -> list[str]:
    """Warnings for the notify credentials other users can read or own: the urls_file, and the
    unit's credential in a store LoadCredential= reads (`/etc/credstore/lockwarden-notify-urls`;
    systemd's copy in $CREDENTIALS_DIRECTORY is private, its source need not be)."""
    named = credential_file(notify.urls_file, environ) if notify.urls_file else None
    sources = [(path, "notify.urls_file") for path in (named,) if path]
    sources.extend(
        (os.path.join(store, NOTIFY_CREDENTIAL), "the source of the unit's LoadCredential=")
        for store in stores
    )
    warnings: list[str] = []
    seen: set[str] = set()
    for path, what in sources:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        warning = _credential_warning(path, what)
        if warning is not None:
            warnings.append(warning)
    return warnings


def _credential_warning(path: str, what: str) -> str | None:
    try:
        status = os.stat(path)
    except OSError:
        return None  # absent, or unreadable: reading it says so
    problems = [problem for problem in (owner_problem(status), read_problem(status)) if problem]
    if not problems:
        return None
    return (
        f"{path} ({what}) holds notification URLs with secrets and is {' and '.join(problems)}: "
        f"chown root {path} && chmod 0600 {path}"
    )
