"""TOML -> frozen dataclasses, checked against one schema that also documents every key.

Every problem names the file and the key path (`lock[2].critical_after: ...`, lock tables
counted from 1 in file order), unknown keys are refused with the closest valid key suggested,
and all problems are reported at once.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lockwarden.formats import format_names
from lockwarden.formats.dpkg import DPKG_LOCK_PATHS
from lockwarden.formats.dpkg import NAME as DPKG
from lockwarden.formats.removable import NEVER_REMOVED
from lockwarden.support.durations import DurationError, format_config_duration, parse_duration

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


def _deadline(value: Any) -> float:
    """A wait that must end: more than nothing, and short enough for a run to stay a run."""
    seconds = _duration(value)
    if not 0 < seconds <= 600:
        raise ValueError(f"{value!r} must be more than 0s and at most 10m")
    return seconds


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{value!r} is not a list of strings")
    return tuple(value)


def _secret_strings(value: Any) -> tuple[str, ...]:
    """Like _strings, but never echoes the value: apprise URLs carry tokens."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("is not a list of strings (value not shown: it may hold secrets)")
    return tuple(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{value!r} is not a whole number of at least 1")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return value


def _tags(value: Any) -> tuple[str, ...]:
    tags = _strings(value)
    for tag in tags:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", tag):
            raise ValueError(f"{tag!r} is not a tag; use letters, digits, '_', '.', '-'")
    return tags


def _alert_severity(value: Any) -> str:
    if value not in ("warning", "critical"):
        raise ValueError(f"{value!r} is not 'warning' or 'critical'")
    return str(value)


def _environment_name(value: Any) -> str:
    text = _string(value)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise ValueError(f"{text!r} is not an environment variable name")
    return text


def _credential_path(value: Any) -> str:
    """An absolute path, or a bare name looked up in $CREDENTIALS_DIRECTORY at run time."""
    text = _string(value)
    if "/" in text and not os.path.isabs(text):
        raise ValueError(f"{text!r} is neither an absolute path nor a bare credential name")
    return text


def _secret_http_url(value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"https?://[^/\s]+", value):
        raise ValueError("is not an http:// or https:// URL (value not shown: it may hold secrets)")
    return value


def _secret_http_urls(value: Any) -> tuple[str, ...]:
    urls = _secret_strings(value)
    for number, url in enumerate(urls, start=1):
        if not re.match(r"https?://[^/\s]+", url):
            raise ValueError(
                f"URL #{number} is not an http:// or https:// URL "
                "(value not shown: it may hold secrets)"
            )
    return urls


DEFAULTS_OPTIONS = (
    Option("warn_after", _duration, "15m", "a lock held this long is a warning", "30m"),
    Option("critical_after", _duration, "1h", "a lock held this long is critical", "2h"),
    Option(
        "fs_timeout",
        _deadline,
        "3s",
        "the longest lockwarden waits for a lock's file system to answer (each lstat, open, "
        "read, directory listing); a lock whose file system does not answer in time is unknown "
        "(a hung NFS, SSHFS, CIFS or FUSE mount) and the run goes on without touching that "
        "mount again; also bounds the state directory's file system",
        "5s",
    ),
)


def schema_default(options: tuple[Option, ...], key: str) -> Any:
    """The default of `key` as its converter makes it (a duration in seconds): settings
    classes take their defaults from the schema, so each is written once."""
    [option] = [option for option in options if option.key == key]
    return option.convert(option.default)


DEFAULT_FS_TIMEOUT: float = schema_default(DEFAULTS_OPTIONS, "fs_timeout")
DEFAULT_WARN_AFTER: float = schema_default(DEFAULTS_OPTIONS, "warn_after")
DEFAULT_CRITICAL_AFTER: float = schema_default(DEFAULTS_OPTIONS, "critical_after")

LOCK_OPTIONS = (
    Option("name", _name, REQUIRED, "a short unique name used in alerts", "wa-store"),
    Option(
        "path",
        _absolute_path,
        REQUIRED,  # unless `database` is set (a database lock has no path): see _database_watch
        "the lock's path (or its store directory)",
        "/srv/wa/store/LOCK",
    ),
    Option("format", _format, "auto", f"one of {', '.join(format_names())}", "owner-record"),
    Option("warn_after", _duration, None, "overrides [defaults] warn_after", "10m"),
    Option("critical_after", _duration, None, "overrides [defaults] critical_after", "1h"),
    Option("fs_timeout", _deadline, None, "overrides [defaults] fs_timeout", "10s"),
    Option("role", _string, None, "what the store is, shown in alerts", "WhatsApp session store"),
    Option(
        "host_aliases",
        _strings,
        [],
        "other names of this host in lock records (a renamed host or container)",
        ["old-hostname"],
    ),
    Option(
        "stale_after",
        _duration,
        "10m",
        "for locks whose holder is found by its working directory (git), and Liquibase's lock "
        "row naming this host: a lock with no such process is stale once older than this",
        "30m",
    ),
    Option(
        "remove_stale",
        _boolean,
        False,
        "move a stale lock aside and delete it once two runs at least stale_confirm apart saw "
        "the same stale lock (same inode, same record); only for locks left behind as files or "
        "directories, never kernel locks (see the README's 'Removing stale locks')",
        False,
    ),
    Option(
        "stale_confirm",
        _duration,
        "2m",
        "with remove_stale: how long apart the two sightings of the same stale lock must be",
        "5m",
    ),
)

DATABASE_ENGINES = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
}
ADVISORY_TOOLS = ("prisma", "flyway", "rails", "golang-migrate")
WATCH_KEYS = ("advisory_key", "table", "liquibase_table", "lock_name")
# What each engine can watch: MySQL's user-level locks (GET_LOCK) only, by name or by tool.
ENGINE_WATCHES = {
    "postgresql": ("advisory_key", "table", "liquibase_table"),
    "mysql": ("advisory_key", "lock_name"),
}


def _engine(value: Any) -> str:
    text = _string(value)
    if text not in DATABASE_ENGINES:
        raise ValueError(f"{text!r} is not a database engine: 'postgresql' or 'mysql'")
    return DATABASE_ENGINES[text]


def _connection(value: Any) -> str:
    """A libpq service name or a DSN without a password: a password in the config would be
    printed by check-config and read by anyone who can read the file."""
    text = _string(value)
    if re.search(r"password\s*=|://[^/@\s]*:[^/@\s]*@", text, re.IGNORECASE):
        raise ValueError(
            "holds a password (value not shown); put it in password_file (a file or a systemd "
            "credential) or in libpq's own password file (~/.pgpass)"
        )
    return text


def _advisory_key(value: Any) -> int | str | tuple[int, int]:
    """A 64-bit key, a pair of 32-bit keys, or a migration tool's name."""
    if isinstance(value, str) and value in ADVISORY_TOOLS:
        return value
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    pair = value if isinstance(value, list) and len(value) == 2 else None
    if pair and all(type(item) is int and -(2**31) <= item < 2**31 for item in pair):
        return (pair[0], pair[1])
    raise ValueError(
        f"{value!r} is not an advisory lock key: a 64-bit integer, a pair of 32-bit integers "
        f"[k1, k2], or one of {', '.join(ADVISORY_TOOLS)}"
    )


def _table(value: Any) -> str:
    text = _string(value)
    if not re.fullmatch(r"[A-Za-z_][\w$]*\.(\*|[A-Za-z_][\w$]*)|[A-Za-z_][\w$]*", text):
        raise ValueError(f"{text!r} is not a table: write SCHEMA.TABLE, TABLE or SCHEMA.*")
    return text


DATABASE_OPTIONS = (
    Option(
        "database",
        _engine,
        None,
        "watch a lock inside a database server instead of a file: 'postgresql' or 'mysql' "
        "(MariaDB too); such a lock has no path, and watches exactly one of advisory_key, table "
        "and liquibase_table (PostgreSQL), or advisory_key (a tool's name) and lock_name (MySQL)",
        "postgresql",
    ),
    Option(
        "connection",
        _connection,
        None,
        "with database: a libpq service name ('app-db' or 'service=app-db') or a DSN without a "
        "password ('host=db1 dbname=app user=monitor', 'postgresql://monitor@db1/app'); for "
        "MySQL 'mysql://monitor@127.0.0.1:3306/app' (add ?unix_socket=PATH for a socket)",
        "service=app-db",
    ),
    Option(
        "password_file",
        _credential_path,
        None,
        "with database: a file holding the password; a bare name is read from "
        "$CREDENTIALS_DIRECTORY (systemd LoadCredential=); never logged or printed",
        "app-db-password",
    ),
    Option(
        "advisory_key",
        _advisory_key,
        None,
        "with database: the advisory lock to watch: a 64-bit key, [k1, k2] for the two-int "
        f"form, or a migration tool's lock by name ({', '.join(ADVISORY_TOOLS)})",
        "prisma",
    ),
    Option(
        "table",
        _table,
        None,
        "with database: writers to this table (SCHEMA.TABLE, or SCHEMA.* for all of a schema's "
        "tables) blocked behind another session's lock",
        "public.orders",
    ),
    Option(
        "liquibase_table",
        _table,
        None,
        "with database: Liquibase's lock row, in this table ([SCHEMA.]databasechangeloglock)",
        "public.databasechangeloglock",
    ),
    Option(
        "lock_name",
        _string,
        None,
        "with database = 'mysql': the user-level lock (GET_LOCK) to watch, by its name",
        "deploy-lock",
    ),
    Option(
        "connect_timeout",
        _duration,
        "3s",
        "with database: give up connecting after this long (whole seconds, at least 2s for libpq)",
        "5s",
    ),
    Option(
        "statement_timeout",
        _duration,
        "2s",
        "with database: the longest one query of the check may run (and wait for a lock)",
        "2s",
    ),
)

PROMETHEUS_OPTIONS = (
    Option(
        "textfile",
        _absolute_path,
        None,
        "write per-lock gauges to this file after each run, atomically, for node-exporter's "
        "textfile collector",
        "/var/lib/prometheus/node-exporter/lockwarden.prom",
    ),
)

ALERT_OPTIONS = (
    Option(
        "repeat_interval",
        _duration,
        "1h",
        'remind this often while an incident lasts ("0" = never)',
        "2h",
    ),
    Option("resolve_after", _positive_int, 1, "good runs in a row before 'resolved' is sent", 2),
    Option(
        "unknown_after", _positive_int, 3, "unknown runs in a row before an unknown lock alerts", 5
    ),
    Option(
        "give_up_after",
        _duration,
        "24h",
        "stop retrying an undelivered message after this long (it is reported undeliverable)",
        "12h",
    ),
    Option(
        "min_severity",
        _alert_severity,
        "critical",
        "a lock held too long alerts from this severity on: 'warning' or 'critical'",
        "warning",
    ),
)

STATE_OPTIONS = (
    Option(
        "path",
        _absolute_path,
        None,
        "the state journal (default /var/lib/lockwarden/state.jsonl as root, else "
        "$XDG_STATE_HOME/lockwarden/state.jsonl)",
        "/var/lib/lockwarden/state.jsonl",
    ),
    Option(
        "max_bytes", _positive_int, 262144, "compact the journal when it grows past this", 1048576
    ),
)

# The credential the system unit loads (LoadCredential=, from /etc/credstore): used when the
# config names no urls_file, so a file there is all it takes to turn alerting on.
NOTIFY_CREDENTIAL = "lockwarden-notify-urls"

NOTIFY_OPTIONS = (
    Option(
        "urls",
        _secret_strings,
        [],
        "apprise URLs; 'TAG1,TAG2=URL' tags one for notify_tags routing",
        ["json://alerts.example.net/hook", "ops=mailto://user:password@mail.example.net"],
    ),
    Option("config", _absolute_path, None, "an apprise config file", "/etc/lockwarden/apprise.yml"),
    Option(
        "urls_file",
        _credential_path,
        None,
        "a file of apprise URLs, one per line; a bare name is read from $CREDENTIALS_DIRECTORY "
        f"(systemd LoadCredential=); unset: the unit's {NOTIFY_CREDENTIAL!r} credential if passed",
        NOTIFY_CREDENTIAL,
    ),
    Option(
        "urls_env",
        _environment_name,
        None,
        "an environment variable holding apprise URLs (whitespace separated)",
        "LOCKWARDEN_APPRISE_URLS",
    ),
    Option("timeout", _duration, "10s", "the longest one run spends sending", "10s"),
)

HEARTBEAT_OPTIONS = (
    Option(
        "url",
        _secret_http_url,
        None,
        "pinged after every completed run (URL/fail when the run failed)",
        "https://hc-ping.com/your-uuid",
    ),
    Option("send_start", _boolean, False, "also ping URL/start when a run begins", True),
    Option("timeout", _duration, "5s", "the longest a ping may take", "5s"),
)

ALERTMANAGER_OPTIONS = (
    Option(
        "urls",
        _secret_http_urls,
        [],
        "Alertmanager base URLs, each sent every alert (list every peer of a cluster; "
        "Alertmanager dedupes): firing alerts are re-posted every run, resolved ones get endsAt",
        ["http://alertmanager-1.example.net:9093", "http://alertmanager-2.example.net:9093"],
    ),
    Option(
        "host",
        _string,
        None,
        "the host label of this host's alerts instead of its host name",
        "db1.example.net",
    ),
    Option(
        "ends_after",
        _duration,
        "5m",
        "a firing alert not re-posted within this long ends in Alertmanager by itself (if "
        "lockwarden stops running); keep it a few times the timer's interval",
        "5m",
    ),
    Option("timeout", _duration, "5s", "the longest one post to one Alertmanager may take", "5s"),
)

LOCK_ALERT_KEYS = (
    "repeat_interval",
    "resolve_after",
    "unknown_after",
    "give_up_after",
    "min_severity",
)

LOCK_ALERT_OPTIONS = (
    *(
        Option(option.key, option.convert, None, f"overrides [alerts] {option.key}", option.example)
        for option in ALERT_OPTIONS
        if option.key in LOCK_ALERT_KEYS
    ),
    Option("notify_tags", _tags, [], "send this lock's alerts only to URLs with a tag", ["ops"]),
)
ALL_LOCK_OPTIONS = (*LOCK_OPTIONS, *LOCK_ALERT_OPTIONS, *DATABASE_OPTIONS)
# A database lock's table: the same keys, but no path (its description stands in for one).
DATABASE_LOCK_SCHEMA = tuple(
    replace(option, default=None) if option.key == "path" else option for option in ALL_LOCK_OPTIONS
)  # what a [[lock]] table may hold

SECTIONS: dict[str, tuple[Option, ...]] = {
    "defaults": DEFAULTS_OPTIONS,
    "prometheus": PROMETHEUS_OPTIONS,
    "alerts": ALERT_OPTIONS,
    "state": STATE_OPTIONS,
    "notify": NOTIFY_OPTIONS,
    "heartbeat": HEARTBEAT_OPTIONS,
    "alertmanager": ALERTMANAGER_OPTIONS,
}


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

    @property
    def fs_timeout(self) -> float:
        """[defaults] fs_timeout: how long the state directory's file system may take."""
        value = self.defaults.get("fs_timeout")
        return value if isinstance(value, float) else DEFAULT_FS_TIMEOUT


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
    alerts = AlertSettings(**sections["alerts"])
    locks = _locks(document.get("lock", []), sections["defaults"], alerts, report)
    if problems:
        raise ConfigError(problems)
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
    if not table.keys() <= _keys(options):
        _refuse_unknown(table, set(_keys(options)), prefix, report)
    shared, fresh = _defaults(options)
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


# Caches keyed by id(), each entry holding its key object so that the id cannot be reused.
_KEYS: dict[int, tuple[tuple[Option, ...], frozenset[str]]] = {}
_CONVERTED: dict[int, tuple[Option, Any]] = {}
_IMMUTABLE = (str, int, float, bool, tuple, frozenset, type(None))


def _keys(options: tuple[Option, ...]) -> frozenset[str]:
    """The keys of a schema's options (a config of 1,000 locks asks 1,000 times)."""
    cached = _KEYS.get(id(options))
    if cached is None:
        cached = _KEYS[id(options)] = (options, frozenset(option.key for option in options))
    return cached[1]


_DEFAULTS: dict[int, tuple[tuple[Option, ...], dict[str, Any], tuple[Option, ...]]] = {}


def _defaults(options: tuple[Option, ...]) -> tuple[dict[str, Any], tuple[Option, ...]]:
    """A schema's defaults as converted once (a config of 1,000 locks takes them 1,000 times),
    and the options whose converted default can be changed by whoever gets it: those are
    converted afresh for each table."""
    cached = _DEFAULTS.get(id(options))
    if cached is None:
        shared = {option.key: _default(option) for option in options}
        fresh = tuple(
            option
            for option in options
            if option.default not in (None, REQUIRED)
            and not isinstance(shared[option.key], _IMMUTABLE)
        )
        cached = _DEFAULTS[id(options)] = (options, shared, fresh)
    return cached[1], cached[2]


def _default(option: Option) -> Any:
    """Defaults are written as a user would write them, and converted the same way (once per
    option when the result cannot be changed by whoever gets it)."""
    if option.default is None or option.default is REQUIRED:
        return option.default
    cached = _CONVERTED.get(id(option))
    if cached is not None:
        return cached[1]
    value = option.convert(option.default)
    if isinstance(value, _IMMUTABLE):
        _CONVERTED[id(option)] = (option, value)
    return value


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
        _check_order(values, prefix, report)
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
        report(f"{prefix}connection", "on mysql is a URI: mysql://USER@HOST:PORT/DATABASE")


def _watches(engine: str) -> str:
    return "watch " + " or ".join(ENGINE_WATCHES[engine])


def _lock_alerts(values: dict[str, Any], alerts: AlertSettings) -> None:
    """Fold a lock's alert overrides into its own AlertSettings; unset keys inherit [alerts]."""
    overrides = {key: values.pop(key) for key in LOCK_ALERT_KEYS}
    changed = {key: value for key, value in overrides.items() if value is not None}
    values["alerts"] = replace(alerts, **changed) if changed else alerts
    values["notify_tags"] = tuple(values["notify_tags"] or ())


def _check_order(values: dict[str, Any], prefix: str, report: Callable[[str, str], None]) -> None:
    warn, critical = values["warn_after"], values["critical_after"]
    if isinstance(warn, float) and isinstance(critical, float) and warn > critical:
        report(f"{prefix}warn_after", "is longer than critical_after; a warning must come first")


def _check_removal(values: dict[str, Any], prefix: str, report: Callable[[str, str], None]) -> None:
    if values["remove_stale"] and values["format"] in NEVER_REMOVED:
        why = NEVER_REMOVED[values["format"]]
        report(f"{prefix}remove_stale", f"format {values['format']!r} is never removed: {why}")


def builtin(exists: Callable[[str], bool] = os.path.exists) -> Config:
    """The well-known system locks that exist on this host, checked when no config exists."""
    defaults = {option.key: parse_duration(option.default) for option in DEFAULTS_OPTIONS}
    locks = tuple(
        LockConfig(
            name=name,
            path=path,
            format=DPKG if path in DPKG_LOCK_PATHS else "kernel",
            role=role,
            warn_after=defaults["warn_after"],
            critical_after=defaults["critical_after"],
            fs_timeout=defaults["fs_timeout"],
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
    from lockwarden.state.journal import default_state_path

    return {"path": state.path or default_state_path(), "max_bytes": state.max_bytes}


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
