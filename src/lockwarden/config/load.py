"""TOML -> frozen settings, checked against the schema.

Every problem names the file and the key path (`lock[2].critical_after: ...`, lock tables
counted from 1 in file order), unknown keys are refused with the closest valid key suggested,
and all problems are reported at once.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from lockwarden.config.schema import (
    ALL_LOCK_OPTIONS,
    DATABASE_LOCK_SCHEMA,
    DATABASE_OPTIONS,
    DEFAULTS_OPTIONS,
    ENGINE_WATCHES,
    LOCK_ALERT_KEYS,
    NOTIFY_CREDENTIAL,
    REQUIRED,
    SECTIONS,
    WATCH_KEYS,
    WELL_KNOWN_LOCKS,
    ConfigError,
    Option,
)
from lockwarden.config.settings import (
    AlertmanagerSettings,
    AlertSettings,
    Config,
    DatabaseWatch,
    HeartbeatSettings,
    HostSettings,
    LockConfig,
    NotifySettings,
    StateSettings,
)
from lockwarden.formats import never_removed
from lockwarden.formats.dpkg import DPKG_LOCK_PATHS
from lockwarden.formats.dpkg import NAME as DPKG
from lockwarden.support.durations import format_config_duration, parse_duration


def load(path: str) -> Config:
    """Read and validate a config file; raise ConfigError with every problem found."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except PermissionError:
        raise ConfigError([f"{path}: permission denied"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a config file"]) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([f"{path}: not valid TOML: {error}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not valid UTF-8"]) from None
    return parse(document, path)


def parse(document: dict[str, Any], source: str | None) -> Config:
    problems: list[str] = []
    where = source or "<built-in>"

    def report(key_path: str, message: str) -> None:
        problems.append(f"{where}: {key_path}: {message}")

    _refuse_unknown(document, {*SECTIONS, "lock"}, "", report)
    sections: dict[str, dict[str, Any]] = {}
    valid: set[str] = set()
    for name, options in SECTIONS.items():
        before = len(problems)
        sections[name] = _section(document.get(name, {}), options, name, report)
        if len(problems) == before:
            valid.add(name)
    alerts = AlertSettings(**sections["alerts"])
    locks = _locks(document.get("lock", []), sections["defaults"], alerts, report)
    if problems:
        notify = sections["notify"] if "notify" in valid else None
        tables = document.get("lock", [])
        names = [table.get("name") if isinstance(table, dict) else None for table in tables]
        raise ConfigError(
            problems,
            None if notify is None else NotifySettings(**_with_unit_credential(notify, os.environ)),
            [(names.index(lock.name) + 1, lock) for lock in locks],
        )
    return Config(
        source=source,
        locks=tuple(locks),
        defaults=sections["defaults"],
        prometheus_textfile=sections["prometheus"]["textfile"],
        alerts=alerts,
        notify=NotifySettings(**_with_unit_credential(sections["notify"], os.environ)),
        state=StateSettings(**sections["state"]),
        heartbeat=HeartbeatSettings(**sections["heartbeat"]),
        alertmanager=AlertmanagerSettings(**sections["alertmanager"]),
        host=HostSettings(**sections["host"]),
    )


def _with_unit_credential(notify: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """`urls_file` defaults to the unit's credential when systemd passed one."""
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if notify["urls_file"] is not None or not directory:
        return notify
    if not os.path.isfile(os.path.join(directory, NOTIFY_CREDENTIAL)):
        return notify
    return {**notify, "urls_file": NOTIFY_CREDENTIAL}


def _refuse_unknown(
    table: dict[str, Any], valid: set[str], prefix: str, report: Callable[[str, str], None]
) -> None:
    for key in table:
        if key not in valid:
            import difflib  # only a config error needs suggestions

            close = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6) or sorted(
                option for option in valid if option.startswith(key) or key.startswith(option)
            )
            choices = ", ".join(sorted(valid))
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {choices}"
            report(f"{prefix}{key}", f"unknown key{hint}")


def _section(
    table: Any, options: tuple[Option, ...], name: str, report: Callable[[str, str], None]
) -> dict[str, Any]:
    if not isinstance(table, dict):
        report(name, "must be a table, e.g. [" + name + "]")
        return {option.key: option.default for option in options}
    return _apply(table, options, f"{name}.", report)


def _apply(
    table: dict[str, Any],
    options: tuple[Option, ...],
    prefix: str,
    report: Callable[[str, str], None],
) -> dict[str, Any]:
    keys, shared, fresh = _prepared(options)
    if not table.keys() <= keys:
        _refuse_unknown(table, set(keys), prefix, report)
    values = dict(shared)  # every key, in schema order
    for option in fresh:
        values[option.key] = _default(option)
    for option in options:
        if option.key not in table:
            if option.default is REQUIRED:
                report(f"{prefix}{option.key}", f"is required (e.g. {option.example!r})")
            continue
        try:
            values[option.key] = option.convert(table[option.key])
        except ValueError as error:
            report(f"{prefix}{option.key}", str(error))
            values[option.key] = _default(option)
    return values


# What every table of one schema starts from: its keys, the defaults converted once (a config
# of 1,000 locks takes them 1,000 times), and the options whose converted default can be changed
# by whoever gets it (converted afresh for each table). Keyed by id(), as an Option holds lists
# and has no hash; each entry holds its schema so that the id cannot be reused.
_Prepared = tuple[tuple[Option, ...], frozenset[str], dict[str, Any], tuple[Option, ...]]
_PREPARED: dict[int, _Prepared] = {}
_IMMUTABLE = (str, int, float, bool, tuple, frozenset, type(None))


def _prepared(
    options: tuple[Option, ...],
) -> tuple[frozenset[str], dict[str, Any], tuple[Option, ...]]:
    """A schema's keys, its shared converted defaults, and its options converted afresh."""
    prepared = _PREPARED.get(id(options))
    if prepared is None:
        shared = {option.key: _default(option) for option in options}
        fresh = tuple(
            option
            for option in options
            if option.default not in (None, REQUIRED)
            and not isinstance(shared[option.key], _IMMUTABLE)
        )
        keys = frozenset(option.key for option in options)
        prepared = _PREPARED[id(options)] = (options, keys, shared, fresh)
    return prepared[1], prepared[2], prepared[3]


def _default(option: Option) -> Any:
    """Defaults are written as a user would write them, and converted the same way."""
    if option.default is None or option.default is REQUIRED:
        return option.default
    return option.convert(option.default)


def _locks(
    tables: Any,
    defaults: dict[str, Any],
    alerts: AlertSettings,
    report: Callable[[str, str], None],
) -> list[LockConfig]:
    if not isinstance(tables, list):
        report("lock", "must be an array of tables: write each lock as [[lock]]")
        return []
    locks: list[LockConfig] = []
    seen: dict[str, int] = {}
    for number, table in enumerate(tables, start=1):
        prefix = f"lock[{number}]."
        if not isinstance(table, dict):
            report(f"lock[{number}]", "must be a table")
            continue
        schema = DATABASE_LOCK_SCHEMA if "database" in table else ALL_LOCK_OPTIONS
        values = _apply(table, schema, prefix, report)
        _database_watch(table, values, prefix, report)
        _lock_alerts(values, alerts)
        for key in ("warn_after", "critical_after", "fs_timeout"):
            if values[key] is None:
                values[key] = defaults[key] if isinstance(defaults[key], float) else None
        name = values["name"]
        if isinstance(name, str) and name in seen:
            report(f"{prefix}name", f"{name!r} is already the name of lock[{seen[name]}]")
        elif isinstance(name, str):
            seen[name] = number
        _check_order(values, table, prefix, report)
        _check_removal(values, prefix, report)
        named = values["name"] not in (None, REQUIRED) and values["path"] not in (None, REQUIRED)
        if (
            named
            and isinstance(values["warn_after"], float)
            and isinstance(values["critical_after"], float)
        ):
            locks.append(LockConfig(**values))
    return locks


def _database_watch(
    table: dict[str, Any],
    values: dict[str, Any],
    prefix: str,
    report: Callable[[str, str], None],
) -> None:
    """Fold the database keys into one DatabaseWatch (None for a file lock); a database lock's
    path is its description, since reports, metrics and incidents name every lock by one."""
    settings = {option.key: values.pop(option.key) for option in DATABASE_OPTIONS}
    given = [key for key in ("connection", "password_file", *WATCH_KEYS) if key in table]
    if settings["database"] is None:
        for key in given:
            report(f"{prefix}{key}", "needs database = 'postgresql' or 'mysql' in the same lock")
        return
    watched = [key for key in WATCH_KEYS if key in table]
    _check_database_keys(table, values, settings, watched, prefix, report)
    if not watched or settings["connection"] is None or settings[watched[0]] is None:
        return
    watch = DatabaseWatch(
        engine=settings["database"],
        connection=settings["connection"],
        watch=watched[0],
        target=settings[watched[0]],
        password_file=settings["password_file"],
        connect_timeout=settings["connect_timeout"],
        statement_timeout=settings["statement_timeout"],
    )
    values["database"] = watch
    values["path"] = watch.describe()
    values["format"] = watch.engine


def _check_database_keys(
    table: dict[str, Any],
    values: dict[str, Any],
    settings: dict[str, Any],
    watched: list[str],
    prefix: str,
    report: Callable[[str, str], None],
) -> None:
    """What a database lock must and must not hold, each problem at its own key."""
    engine = settings["database"]
    if "path" in table:
        report(f"{prefix}path", "a database lock has no path; remove it (or remove database)")
    if values["remove_stale"]:
        report(f"{prefix}remove_stale", "a database lock is never removed by lockwarden")
    if settings["connection"] is None and "connection" not in table:
        report(f"{prefix}connection", "is required with database (e.g. 'service=app-db')")
    if len(watched) != 1:
        report(
            f"{prefix}database",
            f"a database lock watches exactly one of {', '.join(ENGINE_WATCHES[engine])} "
            f"({len(watched)} given); write one [[lock]] per thing to watch",
        )
    for key in watched:
        if key not in ENGINE_WATCHES[engine]:
            report(f"{prefix}{key}", f"is not watched on {engine}: {_watches(engine)}")
    tool_only = engine == "mysql" and "advisory_key" in watched
    if tool_only and not isinstance(settings["advisory_key"], str):
        report(f"{prefix}advisory_key", "on mysql names a tool; a GET_LOCK name is lock_name")
    connection = str(settings["connection"] or "mysql://")
    if engine == "mysql" and not connection.startswith("mysql://"):
        report(
            f"{prefix}connection",
            "on mysql, a URI: mysql://USER@HOST:PORT (a /DATABASE is optional)",
        )


def _watches(engine: str) -> str:
    return "watch " + " or ".join(ENGINE_WATCHES[engine])


def _lock_alerts(values: dict[str, Any], alerts: AlertSettings) -> None:
    """Fold a lock's alert overrides into its own AlertSettings; unset keys inherit [alerts]."""
    overrides = {key: values.pop(key) for key in LOCK_ALERT_KEYS}
    changed = {key: value for key, value in overrides.items() if value is not None}
    values["alerts"] = replace(alerts, **changed) if changed else alerts
    values["notify_tags"] = tuple(values["notify_tags"] or ())


def _check_order(
    values: dict[str, Any],
    table: dict[str, Any],
    prefix: str,
    report: Callable[[str, str], None],
) -> None:
    warn, critical = values["warn_after"], values["critical_after"]
    if isinstance(warn, float) and isinstance(critical, float) and warn > critical:
        said = [
            f"{key} {format_config_duration(values[key])}"
            + ("" if key in table else " (not set in this lock: the default)")
            for key in ("warn_after", "critical_after")
        ]
        report(
            f"{prefix}warn_after",
            f"{said[0]} is longer than {said[1]}; a warning must come first",
        )


def _check_removal(values: dict[str, Any], prefix: str, report: Callable[[str, str], None]) -> None:
    why = never_removed(values["format"]) if values["remove_stale"] else None
    if why is not None:
        report(f"{prefix}remove_stale", f"format {values['format']!r} is never removed: {why}")


def well_known_format(path: str) -> str:
    """The format a well-known lock is checked as: dpkg's locks by their program's own rules
    (never delete the lock file), the others as plain kernel locks."""
    return DPKG if path in DPKG_LOCK_PATHS else "kernel"


def builtin(exists: Callable[[str], bool] = os.path.exists) -> Config:
    """The well-known system locks that exist on this host, checked when no config exists."""
    defaults = {option.key: parse_duration(option.default) for option in DEFAULTS_OPTIONS}
    locks = tuple(
        LockConfig(
            name=name,
            path=path,
            format=well_known_format(path),
            role=role,
            warn_after=defaults["warn_after"],
            critical_after=defaults["critical_after"],
            fs_timeout=defaults["fs_timeout"],
        )
        for name, path, role in WELL_KNOWN_LOCKS
        if exists(path)
    )
    return Config(source=None, locks=locks, defaults=defaults, builtin=True)
