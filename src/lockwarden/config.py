"""TOML -> frozen dataclasses, checked against one schema that also documents every key.

Every problem names the file and the key path (`lock[2].critical_after: ...`, lock tables
counted from 1 in file order), unknown keys are refused with the closest valid key suggested,
and all problems are reported at once.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockwarden.durations import DurationError, parse_duration
from lockwarden.formats import format_names

DEFAULT_PATH = "/etc/lockwarden/config.toml"
REQUIRED = object()

WELL_KNOWN_LOCKS: tuple[tuple[str, str, str], ...] = (
    ("dpkg-frontend", "/var/lib/dpkg/lock-frontend", "the dpkg/apt front-end lock"),
    ("dpkg", "/var/lib/dpkg/lock", "the dpkg database lock"),
    ("apt-archives", "/var/cache/apt/archives/lock", "apt's download cache lock"),
    ("apt-lists", "/var/lib/apt/lists/lock", "apt's package list lock"),
    ("unattended-upgrades", "/run/unattended-upgrades.lock", "unattended-upgrades' run lock"),
)


class ConfigError(Exception):
    """One or more problems in a configuration; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


Converter = Callable[[Any], Any]


@dataclass(frozen=True)
class Option:
    """One key of the config schema: how to convert it, its default, its help."""

    key: str
    convert: Converter
    default: Any
    help: str
    example: Any


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{value!r} is not a non-empty string")
    return value


def _name(value: Any) -> str:
    text = _string(value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", text):
        raise ValueError(f"{text!r} is not a lock name; use letters, digits, '.', '_', ':', '-'")
    return text


def _absolute_path(value: Any) -> str:
    text = _string(value)
    expanded = os.path.expanduser(text)
    if not os.path.isabs(expanded):
        raise ValueError(f"{text!r} is not an absolute path")
    return os.path.normpath(expanded)


def _format(value: Any) -> str:
    text = _string(value)
    if text not in format_names():
        import difflib  # only a config error needs suggestions

        close = difflib.get_close_matches(text, format_names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{text!r} is not a format (one of {', '.join(format_names())}){hint}")
    return text


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except DurationError as error:
        raise ValueError(str(error)) from error


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{value!r} is not a list of strings")
    return tuple(value)


DEFAULTS_OPTIONS = (
    Option("warn_after", _duration, "15m", "a lock held this long is a warning", "30m"),
    Option("critical_after", _duration, "1h", "a lock held this long is critical", "2h"),
)

LOCK_OPTIONS = (
    Option("name", _name, REQUIRED, "a short unique name used in alerts", "wa-store"),
    Option(
        "path",
        _absolute_path,
        REQUIRED,
        "the lock's path (or its store directory)",
        "/srv/wa/store/LOCK",
    ),
    Option("format", _format, "auto", f"one of {', '.join(format_names())}", "owner-record"),
    Option("warn_after", _duration, None, "overrides [defaults] warn_after", "10m"),
    Option("critical_after", _duration, None, "overrides [defaults] critical_after", "1h"),
    Option("role", _string, None, "what the store is, shown in alerts", "WhatsApp session store"),
    Option(
        "host_aliases",
        _strings,
        [],
        "other names of this host in lock records (a renamed host or container)",
        ["old-hostname"],
    ),
)

SECTIONS: dict[str, tuple[Option, ...]] = {"defaults": DEFAULTS_OPTIONS}


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


@dataclass(frozen=True)
class Config:
    """A validated configuration (from a file, or the built-in defaults)."""

    source: str | None
    locks: tuple[LockConfig, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    builtin: bool = False


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
    sections = {
        name: _section(document.get(name, {}), options, name, report)
        for name, options in SECTIONS.items()
    }
    locks = _locks(document.get("lock", []), sections["defaults"], report)
    if problems:
        raise ConfigError(problems)
    return Config(source=source, locks=tuple(locks), defaults=sections["defaults"])


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
    _refuse_unknown(table, {option.key for option in options}, prefix, report)
    values: dict[str, Any] = {}
    for option in options:
        if option.key not in table:
            if option.default is REQUIRED:
                report(f"{prefix}{option.key}", f"is required (e.g. {option.example!r})")
            values[option.key] = _default(option)
            continue
        try:
            values[option.key] = option.convert(table[option.key])
        except ValueError as error:
            report(f"{prefix}{option.key}", str(error))
            values[option.key] = _default(option)
    return values


def _default(option: Option) -> Any:
    """Defaults are written as a user would write them, and converted the same way."""
    if option.default is None or option.default is REQUIRED:
        return option.default
    return option.convert(option.default)


def _locks(
    tables: Any, defaults: dict[str, Any], report: Callable[[str, str], None]
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
        values = _apply(table, LOCK_OPTIONS, prefix, report)
        for key in ("warn_after", "critical_after"):
            if values[key] is None:
                values[key] = defaults[key] if isinstance(defaults[key], float) else None
        name = values["name"]
        if isinstance(name, str) and name in seen:
            report(f"{prefix}name", f"{name!r} is already the name of lock[{seen[name]}]")
        elif isinstance(name, str):
            seen[name] = number
        _check_order(values, prefix, report)
        if all(values[key] not in (None, REQUIRED) for key in ("name", "path")) and all(
            isinstance(values[key], float) for key in ("warn_after", "critical_after")
        ):
            locks.append(LockConfig(**values))
    return locks


def _check_order(values: dict[str, Any], prefix: str, report: Callable[[str, str], None]) -> None:
    warn, critical = values["warn_after"], values["critical_after"]
    if isinstance(warn, float) and isinstance(critical, float) and warn > critical:
        report(f"{prefix}warn_after", "is longer than critical_after; a warning must come first")


def builtin(exists: Callable[[str], bool] = os.path.exists) -> Config:
    """The well-known system locks that exist on this host, checked when no config exists."""
    defaults = {option.key: parse_duration(option.default) for option in DEFAULTS_OPTIONS}
    locks = tuple(
        LockConfig(
            name=name,
            path=path,
            format="kernel",
            role=role,
            warn_after=defaults["warn_after"],
            critical_after=defaults["critical_after"],
        )
        for name, path, role in WELL_KNOWN_LOCKS
        if exists(path)
    )
    return Config(source=None, locks=locks, defaults=defaults, builtin=True)


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
        }
        if lock.role:
            entry["role"] = lock.role
        if lock.host_aliases:
            entry["host_aliases"] = list(lock.host_aliases)
        locks.append(entry)
    defaults = {key: _seconds(value) for key, value in config.defaults.items()}
    return {"defaults": defaults, "lock": locks}


def _seconds(value: float) -> str:
    return f"{value:g}s"
