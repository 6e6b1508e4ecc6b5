"""The frozen settings a config becomes: what the rest of the program reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockwarden.config.schema import (
    ALERT_OPTIONS,
    ALERTMANAGER_OPTIONS,
    DEFAULT_FS_TIMEOUT,
    HEARTBEAT_OPTIONS,
    HOST_OPTIONS,
    LOCK_OPTIONS,
    NOTIFY_OPTIONS,
    STATE_OPTIONS,
    schema_default,
)
from lockwarden.state.journal import default_state_path, state_directory_of


@dataclass(frozen=True)
class AlertSettings:
    """The [alerts] table: when to alert, remind, resolve and give up."""

    repeat_interval: float = schema_default(ALERT_OPTIONS, "repeat_interval")
    resolve_after: int = schema_default(ALERT_OPTIONS, "resolve_after")
    unknown_after: int = schema_default(ALERT_OPTIONS, "unknown_after")
    give_up_after: float = schema_default(ALERT_OPTIONS, "give_up_after")
    min_severity: str = schema_default(ALERT_OPTIONS, "min_severity")


@dataclass(frozen=True)
class NotifySettings:
    """The [notify] table: where alerts go (URLs never shown in full)."""

    urls: tuple[str, ...] = ()
    config: str | None = None
    urls_file: str | None = None
    urls_env: str | None = None
    timeout: float = schema_default(NOTIFY_OPTIONS, "timeout")

    @property
    def configured(self) -> bool:
        return bool(self.urls or self.config or self.urls_file or self.urls_env)


@dataclass(frozen=True)
class StateSettings:
    """The [state] table: the journal's path and size bound."""

    path: str | None = None
    max_bytes: int = schema_default(STATE_OPTIONS, "max_bytes")

    @property
    def journal_path(self) -> str:
        """The journal's file: `path`, else this user's default."""
        return self.path or default_state_path()

    @property
    def directory(self) -> str:
        """The state directory: the journal's, the run lock's, alertmanager.json's."""
        return state_directory_of(self.path)


@dataclass(frozen=True)
class HostSettings:
    """The [host] table: processes blocked on kernel locks nobody configured."""

    blocked_writers: bool = schema_default(HOST_OPTIONS, "blocked_writers")
    blocked_after: float = schema_default(HOST_OPTIONS, "blocked_after")
    blocked_critical_after: float = schema_default(HOST_OPTIONS, "blocked_critical_after")


@dataclass(frozen=True)
class HeartbeatSettings:
    """The [heartbeat] table: the dead man's switch pinged after each run."""

    url: str | None = None
    send_start: bool = schema_default(HEARTBEAT_OPTIONS, "send_start")
    timeout: float = schema_default(HEARTBEAT_OPTIONS, "timeout")


@dataclass(frozen=True)
class DatabaseWatch:
    """What a database lock watches, and how lockwarden connects (read-only) to find out."""

    engine: str
    connection: str
    watch: str  # one of WATCH_KEYS
    target: int | str | tuple[int, int]
    password_file: str | None = None
    connect_timeout: float = 3.0
    statement_timeout: float = 2.0

    @property
    def server(self) -> tuple[str, str]:
        """The server it asks: one per engine and connection string. A run asks each server
        once at a time, and not again once it did not answer."""
        return (self.engine, self.connection)

    def describe(self) -> str:
        """`postgresql service=app-db: advisory_key prisma` (the connection holds no secret)."""
        target = list(self.target) if isinstance(self.target, tuple) else self.target
        return f"{self.engine} {self.connection}: {self.watch} {target}"


@dataclass(frozen=True)
class AlertmanagerSettings:
    """The [alertmanager] table: Alertmanagers that get this host's alerts directly."""

    urls: tuple[str, ...] = ()
    host: str | None = None
    ends_after: float = schema_default(ALERTMANAGER_OPTIONS, "ends_after")
    watchdog: bool = schema_default(ALERTMANAGER_OPTIONS, "watchdog")
    runbook_url: str = schema_default(ALERTMANAGER_OPTIONS, "runbook_url")
    timeout: float = schema_default(ALERTMANAGER_OPTIONS, "timeout")

    @property
    def configured(self) -> bool:
        return bool(self.urls)


@dataclass(frozen=True)
class LockConfig:
    """One `[[lock]]` table with every default filled in."""

    name: str
    path: str
    format: str
    warn_after: float
    critical_after: float
    role: str | None = None
    host_aliases: tuple[str, ...] = ()
    alerts: AlertSettings = AlertSettings()
    notify_tags: tuple[str, ...] = ()
    stale_after: float = schema_default(LOCK_OPTIONS, "stale_after")
    remove_stale: bool = schema_default(LOCK_OPTIONS, "remove_stale")
    stale_confirm: float = schema_default(LOCK_OPTIONS, "stale_confirm")
    fs_timeout: float = DEFAULT_FS_TIMEOUT
    database: DatabaseWatch | None = None


@dataclass(frozen=True)
class Config:
    """A validated configuration (from a file, or the built-in defaults)."""

    source: str | None
    locks: tuple[LockConfig, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    builtin: bool = False
    prometheus_textfile: str | None = None
    alerts: AlertSettings = AlertSettings()
    notify: NotifySettings = NotifySettings()
    state: StateSettings = StateSettings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()
    host: HostSettings = HostSettings()

    @property
    def fs_timeout(self) -> float:
        """[defaults] fs_timeout: how long the state directory's file system may take."""
        value = self.defaults.get("fs_timeout")
        return value if isinstance(value, float) else DEFAULT_FS_TIMEOUT
