"""config/settings.py: what the program reads. A settings class built with no arguments is
what the schema's defaults say (each default is written once, in the schema), and the
`configured` switches turn on exactly when something to send to is given."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockwarden.config import (
    ALERT_OPTIONS,
    ALERTMANAGER_OPTIONS,
    DEFAULT_FS_TIMEOUT,
    HEARTBEAT_OPTIONS,
    LOCK_OPTIONS,
    NOTIFY_OPTIONS,
    REQUIRED,
    STATE_OPTIONS,
    AlertmanagerSettings,
    AlertSettings,
    Config,
    DatabaseWatch,
    HeartbeatSettings,
    HostSettings,
    LockConfig,
    NotifySettings,
    Option,
    StateSettings,
)
from lockwarden.config.schema import HOST_OPTIONS


def converted_defaults(options: tuple[Option, ...]) -> dict[str, Any]:
    return {
        option.key: option.convert(option.default)
        for option in options
        if option.default not in (None, REQUIRED) and not isinstance(option.default, list)
    }


@pytest.mark.parametrize(
    ("settings", "options"),
    [
        (AlertSettings(), ALERT_OPTIONS),
        (NotifySettings(), NOTIFY_OPTIONS),
        (StateSettings(), STATE_OPTIONS),
        (HeartbeatSettings(), HEARTBEAT_OPTIONS),
        (AlertmanagerSettings(), ALERTMANAGER_OPTIONS),
        (HostSettings(), HOST_OPTIONS),
    ],
    ids=lambda value: type(value).__name__ if dataclasses.is_dataclass(value) else "",
)
def test_a_sections_settings_default_to_the_schemas(
    settings: object, options: tuple[Option, ...]
) -> None:
    fields = dataclasses.asdict(settings)  # type: ignore[call-overload]
    assert set(fields) == {option.key for option in options}
    expected = converted_defaults(options)
    assert {key: fields[key] for key in expected} == expected


def test_a_locks_settings_default_to_the_schemas() -> None:
    lock = LockConfig(name="x", path="/x", format="auto", warn_after=1.0, critical_after=2.0)
    expected = converted_defaults(LOCK_OPTIONS)
    for key in ("stale_after", "remove_stale", "stale_confirm"):
        assert getattr(lock, key) == expected[key]
    assert (lock.fs_timeout, lock.alerts, lock.database) == (
        DEFAULT_FS_TIMEOUT,
        AlertSettings(),
        None,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"urls": ("json://127.0.0.1/hook",)},
        {"config": "/etc/lockwarden/apprise.yml"},
        {"urls_file": "lockwarden-notify-urls"},
        {"urls_env": "LOCKWARDEN_NOTIFY"},
    ],
)
def test_notify_is_configured_by_any_source_of_urls(fields: dict[str, Any]) -> None:
    assert NotifySettings(**fields).configured


def test_nothing_to_send_to_is_not_configured() -> None:
    assert not NotifySettings().configured
    assert not NotifySettings(timeout=1.0).configured
    assert not AlertmanagerSettings().configured
    assert AlertmanagerSettings(urls=("http://am:9093",)).configured


@pytest.mark.parametrize(
    ("target", "text"),
    [
        ("prisma", "postgresql service=app-db: advisory_key prisma"),
        ((1, 2), "postgresql service=app-db: advisory_key [1, 2]"),
        (72707369, "postgresql service=app-db: advisory_key 72707369"),
    ],
)
def test_a_database_watch_describes_itself_as_a_reader_would_write_it(
    target: object, text: str
) -> None:
    watch = DatabaseWatch("postgresql", "service=app-db", "advisory_key", target)  # type: ignore[arg-type]
    assert watch.describe() == text


def test_the_state_directorys_deadline_is_the_defaults_fs_timeout() -> None:
    assert Config(source=None, locks=()).fs_timeout == DEFAULT_FS_TIMEOUT
    assert Config(source=None, locks=(), defaults={"fs_timeout": 9.0}).fs_timeout == 9.0


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        AlertSettings().repeat_interval = 1.0  # type: ignore[misc]
