"""config/schema.py: the one table of every key. Each key has help, an example its own
converter accepts (the example config and `init` print them) and a default it accepts; the
converters that guard secrets never echo what they refuse."""

from __future__ import annotations

import pytest

from lockwarden.config import (
    ALERT_OPTIONS,
    ALL_LOCK_OPTIONS,
    DATABASE_LOCK_SCHEMA,
    LOCK_ALERT_KEYS,
    LOCK_ALERT_OPTIONS,
    REQUIRED,
    SECTIONS,
    Option,
    credential_file,
    schema_default,
)
from lockwarden.config.schema import ADVISORY_TOOLS

EVERY_SCHEMA = {**SECTIONS, "lock": ALL_LOCK_OPTIONS}
EVERY_OPTION = [
    pytest.param(option, id=f"{table}.{option.key}")
    for table, options in EVERY_SCHEMA.items()
    for option in options
]


def option(key: str) -> Option:
    [found] = [each for each in ALL_LOCK_OPTIONS if each.key == key]
    return found


@pytest.mark.parametrize("table", sorted(EVERY_SCHEMA))
def test_each_tables_keys_are_distinct(table: str) -> None:
    keys = [each.key for each in EVERY_SCHEMA[table]]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("each", EVERY_OPTION)
def test_every_key_has_help_and_an_example_its_converter_accepts(each: Option) -> None:
    assert each.help.strip()
    assert each.example is not None
    each.convert(each.example)


@pytest.mark.parametrize("each", EVERY_OPTION)
def test_every_default_is_written_as_a_user_would_write_it(each: Option) -> None:
    if each.default not in (None, REQUIRED):
        each.convert(each.default)


def test_a_locks_alert_keys_override_the_alerts_tables_with_no_default() -> None:
    overriding = {each.key: each for each in LOCK_ALERT_OPTIONS if each.key in LOCK_ALERT_KEYS}
    assert set(overriding) == set(LOCK_ALERT_KEYS)
    for alerts_option in ALERT_OPTIONS:
        if alerts_option.key in LOCK_ALERT_KEYS:
            mine = overriding[alerts_option.key]
            assert (mine.convert, mine.default) == (alerts_option.convert, None)


def test_a_database_lock_has_the_same_keys_but_needs_no_path() -> None:
    assert [each.key for each in DATABASE_LOCK_SCHEMA] == [each.key for each in ALL_LOCK_OPTIONS]
    assert option("path").default is REQUIRED
    [path] = [each for each in DATABASE_LOCK_SCHEMA if each.key == "path"]
    assert path.default is None


def test_a_default_is_given_as_its_converter_makes_it() -> None:
    assert schema_default(SECTIONS["defaults"], "warn_after") == 900.0
    assert schema_default(SECTIONS["alerts"], "min_severity") == "critical"


@pytest.mark.parametrize(
    ("value", "key"),
    [
        (72707369, 72707369),
        (-(2**63), -(2**63)),
        ([1, -2], (1, -2)),
        *((tool, tool) for tool in ADVISORY_TOOLS),
    ],
)
def test_an_advisory_key_as_postgresql_takes_it(value: object, key: object) -> None:
    assert option("advisory_key").convert(value) == key


@pytest.mark.parametrize("value", [2**63, [2**31, 0], [1, 2, 3], True, "liquibase", 1.5])
def test_anything_else_is_no_advisory_key(value: object) -> None:
    with pytest.raises(ValueError, match="is not an advisory lock key"):
        option("advisory_key").convert(value)


@pytest.mark.parametrize(
    "connection",
    [
        "host=db1 dbname=app password=hunter2",
        "host=db1 PASSWORD = hunter2",
        "postgresql://monitor:hunter2@db1/app",
        "mysql://monitor:hunter2@127.0.0.1:3306",
    ],
)
def test_a_connection_with_a_password_is_refused_without_showing_it(connection: str) -> None:
    with pytest.raises(ValueError) as refused:
        option("connection").convert(connection)
    assert "hunter2" not in str(refused.value)
    assert "password_file" in str(refused.value)


@pytest.mark.parametrize(
    "connection", ["app-db", "service=app-db", "postgresql://monitor@db1/app", "mysql://m@h:3306"]
)
def test_a_connection_without_one_is_kept(connection: str) -> None:
    assert option("connection").convert(connection) == connection


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("notify", "urls", ["slack://hunter2", 7]),
        ("heartbeat", "url", "ftp://hunter2@example.org"),
        ("alertmanager", "urls", ["https://ok.example.org", "am:hunter2"]),
    ],
)
def test_a_refused_secret_is_never_echoed(section: str, key: str, value: object) -> None:
    [each] = [o for o in SECTIONS[section] if o.key == key]
    with pytest.raises(ValueError) as refused:
        each.convert(value)
    assert "hunter2" not in str(refused.value)
    assert "value not shown" in str(refused.value)


@pytest.mark.parametrize(
    ("value", "accepted"), [("1s", True), ("10m", True), ("0", False), ("11m", False)]
)
def test_a_file_system_deadline_is_more_than_nothing_and_at_most_ten_minutes(
    value: str, accepted: bool
) -> None:
    if accepted:
        assert option("fs_timeout").convert(value) > 0
    else:
        with pytest.raises(ValueError, match="more than 0s and at most 10m"):
            option("fs_timeout").convert(value)


def test_a_credential_is_a_path_or_a_name_in_the_units_credentials_directory() -> None:
    assert credential_file("/etc/lockwarden/pw", {}) == "/etc/lockwarden/pw"
    assert credential_file("db-pw", {"CREDENTIALS_DIRECTORY": "/run/credentials/x"}) == (
        "/run/credentials/x/db-pw"
    )
    assert credential_file("db-pw", {}) is None
    assert credential_file("db-pw", {"CREDENTIALS_DIRECTORY": ""}) is None
    with pytest.raises(ValueError, match="neither an absolute path nor a bare credential name"):
        option("password_file").convert("relative/pw")
