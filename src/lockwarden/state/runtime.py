"""The runtime directory: what a run must remember while its state directory is broken (which
"state degraded" notice it sent, the records its journal could not take) and what the last
check of the notify services found. Private (0700, this user's, never through a symlink), one
subdirectory per state file, gone at reboot; a healthy quiet run creates nothing here."""

from __future__ import annotations

import logging
import os

from lockwarden.state.journal import StateError, check_state_dir

log = logging.getLogger(__name__)


def runtime_directory(state_file: str) -> str | None:
    """A private directory for what a run must remember while its state directory is broken
    (and what the last check of the notify URLs found): the unit's own $RUNTIME_DIRECTORY
    (RuntimeDirectory=lockwarden), else /run/lockwarden for root, $XDG_RUNTIME_DIR/lockwarden
    for a user (None without one); one subdirectory per state file so two configurations
    never share it."""
    given = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]  # systemd lists several so
    ours = os.path.isabs(given) and os.path.basename(given.rstrip("/")) == "lockwarden"
    base = (  # another unit's RuntimeDirectory= (a monitoring agent running us) is not ours
        given
        if ours
        else "/run/lockwarden"
        if os.geteuid() == 0
        else os.path.join(os.environ.get("XDG_RUNTIME_DIR", ""), "lockwarden")
    )
    if not os.path.isabs(base):
        return None
    # The path itself, escaped one-to-one (no hash: a quiet run checks this and must stay
    # cheap); a path too long for one file name is hashed.
    name = state_file.replace("%", "%25").replace("/", "%2F")
    if len(name) > 200:
        import hashlib

        name = hashlib.sha256(state_file.encode()).hexdigest()
    return os.path.join(base, name)


def degraded_marker(state_file: str) -> str | None:
    directory = runtime_directory(state_file)
    return None if directory is None else os.path.join(directory, "degraded-notice")


def private_directory(directory: str) -> bool:

    try:
        os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
        check_state_dir(os.path.dirname(directory))
        check_state_dir(directory)
    except (OSError, StateError) as error:
        log.debug("no runtime directory %s: %s", directory, error)
        return False
    return True


def read_marker(marker: str | None) -> str | None:
    """What the last notice said; None when none is remembered (a healthy run creates
    nothing here: only a degraded one makes the directory)."""
    if marker is None or not os.path.lexists(marker):
        return None
    if not private_directory(os.path.dirname(marker)):
        return None
    return read_private(marker)


def read_private(marker: str) -> str | None:
    """A marker in a directory already found private; never through a symlink."""
    try:
        with open(marker, encoding="utf-8", opener=_nofollow) as handle:
            return handle.read(65536)
    except OSError:
        return None


def write_marker(marker: str, cause: str | None) -> None:
    from lockwarden.support.atomic import write_atomically

    try:
        if cause is None:
            os.unlink(marker)
        else:
            write_atomically(marker, cause, mode=0o600)
    except OSError as error:  # then the notice may come again next run: never lost
        log.debug("cannot update %s: %s", marker, error.strerror)


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
