"""Warn about a config file that holds secrets and that other users can read.

Apprise URLs and a heartbeat URL carry tokens; anyone who can read them can post as the
on-call channel, or ping the dead man's switch and hide that lockwarden stopped. lockwarden
warns (it does not refuse: refusing would stop the monitoring over a file mode, the failure
that hurts more) and names both fixes. docs/reliability.md documents the choice.
"""

from __future__ import annotations

import os
import stat

from lockwarden.config.settings import Config


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
