"""The dead man's switch: ping a healthchecks.io-style URL after each completed run.

`URL` when the run did its job, `URL/fail` when it could not (its state was degraded or a
delivery failed), and optionally `URL/start` when it begins. requests is imported only here,
only when a heartbeat is configured. A failed ping is logged (without the URL: it is a
secret) and never fails the run.
"""

from __future__ import annotations

import logging

from lockwarden.config import HeartbeatSettings, hide_url

log = logging.getLogger(__name__)

START = "start"
FAIL = "fail"


def ping_url(url: str, signal: str | None) -> str:
    return url if signal is None else f"{url.rstrip('/')}/{signal}"


def _path_pieces(url: str) -> set[str]:
    """Everything after the host of a ping URL is its secret (a check UUID or key)."""
    path = url.split("://", 1)[-1].partition("/")[2]
    return {piece for piece in path.replace("?", "/").split("/") if len(piece) >= 8} | {path}


def ping(settings: HeartbeatSettings, signal: str | None = None) -> bool:
    """True when the ping was answered with a 2xx; never raises."""
    if not settings.url:
        return False
    import requests

    from lockwarden.alerts.notify import redact_in_logs

    target = ping_url(settings.url, signal)
    shown = hide_url(target)
    redact_in_logs(_path_pieces(settings.url))  # urllib3 logs the path at debug level
    try:
        response = requests.get(target, timeout=settings.timeout)
    except requests.RequestException as error:
        log.warning("heartbeat ping to %s failed: %s", shown, type(error).__name__)
        return False
    if not response.ok:
        log.warning("heartbeat ping to %s was answered HTTP %s", shown, response.status_code)
        return False
    return True
