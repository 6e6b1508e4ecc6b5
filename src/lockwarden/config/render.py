"""Settings -> documents: the effective config `check-config` prints, with every default filled
in and secrets hidden.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from lockwarden.config.schema import LOCK_ALERT_KEYS
from lockwarden.config.settings import (
    AlertmanagerSettings,
    AlertSettings,
    Config,
    DatabaseWatch,
    HeartbeatSettings,
    NotifySettings,
    StateSettings,
)
from lockwarden.support.durations import format_config_duration


def effective(config: Config) -> dict[str, Any]:
    """The config with every default filled in, as a TOML-ready document."""
    locks = []
    for lock in config.locks:
        entry: dict[str, Any] = {
            "name": lock.name,
            "path": lock.path,
            "format": lock.format,
            "warn_after": _seconds(lock.warn_after),
            "critical_after": _seconds(lock.critical_after),
            "fs_timeout": _seconds(lock.fs_timeout),
        }
        if lock.role:
            entry["role"] = lock.role
        if lock.host_aliases:
            entry["host_aliases"] = list(lock.host_aliases)
        entry.update(_alerts_document(lock.alerts, LOCK_ALERT_KEYS))
        if lock.notify_tags:
            entry["notify_tags"] = list(lock.notify_tags)
        if lock.database is not None:
            del entry["path"], entry["format"]  # its description, not a key one may write
            entry.update(database_document(lock.database))
        entry["stale_after"] = _seconds(lock.stale_after)
        entry["remove_stale"] = lock.remove_stale
        entry["stale_confirm"] = _seconds(lock.stale_confirm)
        locks.append(entry)
    defaults = {key: _seconds(value) for key, value in config.defaults.items()}
    document: dict[str, Any] = {
        "defaults": defaults,
        "alerts": _alerts_document(config.alerts, tuple(asdict(config.alerts))),
        "state": _state_document(config.state),
        "notify": _notify_document(config.notify),
        "heartbeat": _heartbeat_document(config.heartbeat),
        "host": {
            "blocked_writers": config.host.blocked_writers,
            "blocked_after": _seconds(config.host.blocked_after),
            "blocked_critical_after": _seconds(config.host.blocked_critical_after),
        },
    }
    if config.alertmanager.configured:
        document["alertmanager"] = _alertmanager_document(config.alertmanager)
    if config.prometheus_textfile:
        document["prometheus"] = {"textfile": config.prometheus_textfile}
    document["lock"] = locks
    return document


def database_document(watch: DatabaseWatch) -> dict[str, Any]:
    target = list(watch.target) if isinstance(watch.target, tuple) else watch.target
    document: dict[str, Any] = {
        "database": watch.engine,
        "connection": watch.connection,
        watch.watch: target,
        "connect_timeout": _seconds(watch.connect_timeout),
        "statement_timeout": _seconds(watch.statement_timeout),
    }
    if watch.password_file:
        document["password_file"] = watch.password_file
    return document


def _alerts_document(alerts: AlertSettings, keys: tuple[str, ...]) -> dict[str, Any]:
    values = asdict(alerts)
    return {
        key: _seconds(values[key]) if isinstance(values[key], float) else values[key]
        for key in keys
    }


def _state_document(state: StateSettings) -> dict[str, Any]:
    return {"path": state.journal_path, "max_bytes": state.max_bytes}


def _notify_document(notify: NotifySettings) -> dict[str, Any]:
    """URLs carry tokens: show only each one's scheme (and tags), never the rest."""
    document: dict[str, Any] = {
        "urls": [hide_url(url) for url in notify.urls],
        "timeout": _seconds(notify.timeout),
    }
    for key in ("config", "urls_file", "urls_env"):
        if getattr(notify, key):
            document[key] = getattr(notify, key)
    return document


def _heartbeat_document(heartbeat: HeartbeatSettings) -> dict[str, Any]:
    document: dict[str, Any] = {
        "send_start": heartbeat.send_start,
        "timeout": _seconds(heartbeat.timeout),
    }
    if heartbeat.url:
        document["url"] = hide_url(heartbeat.url)
    return document


def _alertmanager_document(settings: AlertmanagerSettings) -> dict[str, Any]:
    document: dict[str, Any] = {
        "urls": [hide_url(url) for url in settings.urls],
        "ends_after": _seconds(settings.ends_after),
        "watchdog": settings.watchdog,
        "runbook_url": settings.runbook_url,
        "timeout": _seconds(settings.timeout),
    }
    if settings.host:
        document["host"] = settings.host
    return document


def hide_url(url: str) -> str:
    """`slack://(hidden)`, `ops=mailto://(hidden)`, `https://hc-ping.com/(hidden)`."""
    match = re.match(r"\s*(?:([\w,\s-]+)=)?([A-Za-z][\w+.-]*)://([^/?#]*)", url)
    if not match:
        return "(hidden)"
    tags, scheme, authority = match.groups()
    prefix = f"{tags}=" if tags else ""
    shown_host = authority if scheme in ("http", "https") and "@" not in authority else ""
    return f"{prefix}{scheme}://{shown_host}{'/' if shown_host else ''}(hidden)"


def _seconds(value: float) -> str:
    return format_config_duration(value)
