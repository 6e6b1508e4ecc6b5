"""The one place every option and default lives: each key's type, default, check and
documentation (the example config and `init` are rendered from it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lockwarden.formats import format_names
from lockwarden.support.durations import DurationError, parse_duration

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

    def __init__(self, problems: list[str], notify: Any = None, locks: Any = ()) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.notify = notify
        """The [notify] settings when that section itself is valid (NotifySettings), and the
        locks that are ((N of lock[N], LockConfig)): what check-config still checks, so every
        problem is reported at once."""
        self.locks = tuple(locks)


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


def credential_file(name: str, environ: Mapping[str, str]) -> str | None:
    """Where a `*_file` setting is: an absolute path as is, a bare name inside
    $CREDENTIALS_DIRECTORY (systemd's LoadCredential=); None for a bare name without one."""
    if os.path.isabs(name):
        return name
    directory = environ.get("CREDENTIALS_DIRECTORY")
    return os.path.join(directory, name) if directory else None


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
ADVISORY_TOOLS = ("prisma", "flyway", "rails", "golang-migrate", "sqitch", "node-pg-migrate")
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


def check_connection(value: Any) -> str:
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
        check_connection,
        None,
        "with database: a libpq service name ('app-db' or 'service=app-db') or a DSN without a "
        "password ('host=db1 dbname=app user=monitor', 'postgresql://monitor@db1/app'); for "
        "MySQL 'mysql://monitor@127.0.0.1:3306' (GET_LOCK names are server-wide, so no database "
        "is needed; one given must be one the user may use; ?unix_socket=PATH for a socket)",
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
        "7d",
        "a lock's firing alert that no run renews (lockwarden stopped running) stays firing "
        "this long, then ends by itself; a run that sees the lock free resolves it at once",
        "7d",
    ),
    Option(
        "watchdog",
        _boolean,
        False,
        "also post LockwardenWatchdog every run, ending 5 minutes after the last one: route it "
        "to a dead man's switch to learn that the agent stopped",
        True,
    ),
    Option("timeout", _duration, "5s", "the longest one post to one Alertmanager may take", "5s"),
    Option(
        "runbook_url",
        _string,
        "file:///usr/share/doc/lockwarden/docs/runbook.md",
        "where docs/runbook.md is published (a wiki, the repository's web view): each alert's "
        "runbook_url annotation is this and the alert's section",
        "https://wiki.example.net/lockwarden/runbook",
    ),
)

HOST_OPTIONS = (
    Option(
        "blocked_writers",
        _boolean,
        True,
        "report a process that has waited on a kernel lock nobody configured for longer than "
        "blocked_after, naming the lock, its holder and the action (waiters on configured "
        "locks are in those locks' findings)",
        True,
    ),
    Option(
        "blocked_after",
        _duration,
        "10m",
        "a process waiting on a lock this long is a warning (known from the runs that saw it "
        "wait: the first run that sees a wait only starts counting)",
        "10m",
    ),
    Option(
        "blocked_critical_after",
        _duration,
        "1h",
        "a process waiting on a lock this long is critical",
        "1h",
    ),
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
    "host": HOST_OPTIONS,
}
