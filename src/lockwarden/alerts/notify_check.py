"""What the last check of the notify services found, remembered in the runtime directory.

A run with nothing to send does not load apprise; it says what the last check of the notify
services found (remembered by every run that checks them), and checks them again when the
config file, a URL file, the unit's credentials or $urls_env change, the host reboots (the
runtime directory is gone), or an hour has passed. What a quiet run pays for this instead:
a few small reads (the fingerprint) and no apprise import.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockwarden.config import Config
from lockwarden.state.runtime import (
    private_directory,
    read_private,
    runtime_directory,
    write_marker,
)

if TYPE_CHECKING:
    from lockwarden.alerts.notify import Notifier

NOTIFY_CHECK_S = 3600.0


NOTIFY_CHECKED = "notify-checked"


CLOCK_SLACK_S = 60.0  # a check dated further in the future than this is from a stepped clock


@dataclass(frozen=True, eq=False)
class NotifyCheck:
    """What one check of the notify services found (each line as a run reports it)."""

    invalid: tuple[str, ...] = ()  # `notify.urls[1]: nosuch://…: why`
    problem: str | None = None  # why no service can be set up at all (an unreadable urls_file)
    unrouted: tuple[str, ...] = ()  # `lock db: notify_tags x match no notify service (...)`


def checked(notifier: Notifier, config: Config) -> NotifyCheck:
    return NotifyCheck(
        invalid=tuple(f"{bad.origin}: {bad.shown}: {bad.problem}" for bad in notifier.invalid),
        unrouted=tuple(
            f"lock {lock.name}: {why}: its alerts reach nobody"
            for lock in config.locks
            if (why := notifier.unrouted(lock.notify_tags)) is not None
        ),
    )


def remembered_check(config: Config) -> NotifyCheck | None:
    """On a run with nothing to send: what the last check found, else a check made now (it
    loads apprise). None where no runtime directory can remember it (a user's cron without
    $XDG_RUNTIME_DIR): then only check-config and runs that send check the services, as a
    quiet run every minute must not load apprise each time."""
    marker = _check_marker(config)
    if marker is None:
        return None
    remembered = _read_check(marker, _notify_fingerprint(config))
    if remembered is not None:
        return remembered
    return remember_check(config, check_now(config))


def check_now(config: Config) -> NotifyCheck:
    """Check the notify services now (this loads apprise), remembering nothing."""
    from lockwarden.alerts.notify import Notifier, NotifyConfigError

    try:
        return checked(Notifier(config.notify), config)
    except NotifyConfigError as error:
        return NotifyCheck(problem=str(error))


def _check_marker(config: Config) -> str | None:
    directory = runtime_directory(config.state.journal_path)
    if directory is None or not private_directory(directory):
        return None
    return os.path.join(directory, NOTIFY_CHECKED)


def remember_check(config: Config, check: NotifyCheck) -> NotifyCheck:
    marker = _check_marker(config)
    if marker is not None:
        lines = [_notify_fingerprint(config), *(f"invalid\t{line}" for line in check.invalid)]
        lines += [f"problem\t{check.problem}"] if check.problem else []
        lines += [f"unrouted\t{line}" for line in check.unrouted]
        write_marker(marker, "\n".join(line.replace("\n", " ") for line in lines) + "\n")
    return check


def _notify_fingerprint(config: Config) -> str:
    """What the configured services are made of: the config file (its identity and
    modification), the URL file and apprise config file (CRCs of their contents: a systemd
    credential is a new copy on every start), and the environment they are read with (the
    URL variable as a CRC: it holds tokens). Read on every quiet run: a few small reads."""
    from binascii import crc32

    from lockwarden.config import credential_file

    try:
        status = os.stat(config.source) if config.source else None
    except OSError:
        status = None
    identity = "" if status is None else f"{status.st_ino}:{status.st_mtime_ns}:{status.st_size}"
    notify = config.notify
    value = os.environ.get(notify.urls_env, "") if notify.urls_env else ""
    files = [
        credential_file(notify.urls_file, os.environ) if notify.urls_file else None,
        notify.config if notify.config and "://" not in notify.config else None,
    ]
    contents = [_content_crc(path) for path in files]
    credentials = os.environ.get("CREDENTIALS_DIRECTORY", "")
    return (
        f"v2 {config.source}:{identity} {crc32(value.encode()):08x} {' '.join(contents)} "
        f"{credentials}"
    )


def _content_crc(path: str | None) -> str:
    from binascii import crc32

    if path is None:
        return "-"
    try:
        with open(path, "rb") as handle:
            return f"{crc32(handle.read(1 << 20)):08x}"
    except OSError as error:
        return f"error:{error.errno}"


def _read_check(marker: str, fingerprint: str) -> NotifyCheck | None:
    """What the last check found, if it was made for this fingerprint within the hour (a
    check dated in the future is from a clock stepped back since: it is made again)."""
    try:
        age = time.time() - os.lstat(marker).st_mtime
    except OSError:
        return None
    if not -CLOCK_SLACK_S <= age <= NOTIFY_CHECK_S:
        return None
    text = read_private(marker)  # _check_marker found its directory private
    if text is None or not text.startswith(fingerprint + "\n"):
        return None
    said: dict[str, list[str]] = {"invalid": [], "problem": [], "unrouted": []}
    for line in text.splitlines()[1:]:
        kind, _tab, what = line.partition("\t")
        said.setdefault(kind, []).append(what)
    problem = said["problem"][0] if said["problem"] else None
    return NotifyCheck(tuple(said["invalid"]), problem, tuple(said["unrouted"]))
