"""The pure parts of database locks: advisory keys as pg_locks shows them, the migration tools'
keys, /proc/net/tcp endpoints (procfs/sockets.py). (How long a session lock has been held:
tests/unit/check/test_database.py.)"""

from __future__ import annotations

import ipaddress
import tomllib
import zlib

import pytest

from conftest import run_cli, write_config
from lockwarden.databases.keys import (
    ComputedKeys,
    computed_keys,
    golang_migrate_keys,
    java_string_hash,
    key_from_pg_locks,
    mysql_lock_names,
    tool_of,
)
from lockwarden.procfs.sockets import parse_endpoint


@pytest.mark.parametrize(
    ("classid", "objid", "objsubid", "key"),
    [
        (0, 72707369, 1, 72707369),
        (0xFFFFFFFF, 0xFFFFFFFF, 1, -1),
        (18028, 2208547449, 1, 77431708279161 - 77431708279161 % (1 << 32) + 2208547449),
        (7, 0xFFFFFFFD, 2, (7, -3)),
    ],
)
def test_pg_locks_columns_become_the_key_the_client_passed(classid, objid, objsubid, key):
    assert key_from_pg_locks(classid, objid, objsubid) == key


def test_golang_migrate_keys_match_its_own_test_vectors():
    # golang-migrate's database/util_test.go: "database_name" -> 1764327054, with the additional
    # name "schema_name_1" (joined before it by NUL) -> 2453313553.
    keys = golang_migrate_keys("database_name", ["schema_name_1"])
    assert {1764327054, 2453313553} <= keys


@pytest.mark.parametrize(
    ("key", "tool"),
    [
        (72707369, "prisma"),
        (77431708279161, "flyway"),
        (77431708279161 - 123456789, "flyway"),
        (2053462845 * zlib.crc32(b"app_production"), "rails"),
        (2053462845 * zlib.crc32(b"app_productionpublic"), "rails"),  # with the schema
        (2053462845 * zlib.crc32(b"other_app"), None),  # another database's Rails
        (1764327054, "golang-migrate"),
        (75474063, "sqitch"),
        (7241865325823964, "node-pg-migrate"),
        (42, None),
        ((0, 72707369), None),  # the two-int form is no tool's
    ],
)
def test_well_known_keys_are_named(key, tool):
    computed = computed_keys("app_production", ["public"])
    both = ComputedKeys(computed.golang_migrate | {1764327054}, computed.rails)
    assert tool_of(key, both) == tool


def test_java_string_hash_is_javas():
    # java.lang.String#hashCode, as Flyway takes its discriminator
    assert (java_string_hash(""), java_string_hash("hello")) == (0, 99162322)
    assert java_string_hash("polygenelubricants") == -2147483648  # wraps to Integer.MIN_VALUE


def test_mysql_presets_that_encode_the_database_name_only_this_databases_lock():
    here, there = mysql_lock_names("shop"), mysql_lock_names("blog")
    assert here["prisma_migrate"] == "prisma" == there["prisma_migrate"]  # the server's own
    assert str(2053462845 * zlib.crc32(b"shop")) in here
    assert str(2053462845 * zlib.crc32(b"shop")) not in there
    assert here["sqitch working on shop"] == "sqitch" and "sqitch working on shop" not in there
    assert {name for name, tool in here.items() if tool == "flyway"} == {
        f"Flyway-{java_string_hash('`shop`.`flyway_schema_history`')}"
    }
    assert mysql_lock_names(None) == {"prisma_migrate": "prisma"}


def test_tcp_endpoints_read_in_the_kernels_byte_order():
    assert parse_endpoint("0100007F:1F90") == (ipaddress.ip_address("127.0.0.1"), 8080)
    v6_loopback = "00000000000000000000000001000000:0016"
    assert parse_endpoint(v6_loopback) == (ipaddress.ip_address("::1"), 22)
    mapped = "0000000000000000FFFF00000100007F:0016"
    assert parse_endpoint(mapped) == (ipaddress.ip_address("127.0.0.1"), 22)


@pytest.mark.parametrize(
    ("lock", "expected"),
    [
        (
            'database = "postgresql"\nconnection = "host=db password=hunter2"\nadvisory_key = 1',
            "lock[1].connection: holds a password (value not shown)",
        ),
        (
            'database = "postgresql"\nconnection = "postgresql://u:hunter2@db/app"\ntable = "t"',
            "lock[1].connection: holds a password (value not shown)",
        ),
        (
            'database = "postgresql"\nconnection = "app"\npath = "/x"\nadvisory_key = 1',
            "lock[1].path: a database lock has no path",
        ),
        (
            'database = "postgresql"\nconnection = "app"\nadvisory_key = 1\ntable = "t"',
            "lock[1].database: a database lock watches exactly one of",
        ),
        (
            'database = "mysql"\nconnection = "mysql://m@h/app"\ntable = "t"',
            "lock[1].table: is not watched on mysql",
        ),
        (
            'database = "postgresql"\nconnection = "app"\nlock_name = "x"',
            "lock[1].lock_name: is not watched on postgresql",
        ),
        (
            'database = "postgresql"\nconnection = "app"\nadvisory_key = "liquibase"',
            "lock[1].advisory_key: 'liquibase' is not an advisory lock key",
        ),
        ('database = "oracle"\nconnection = "x"\nadvisory_key = 1', "lock[1].database: 'oracle'"),
        ('path = "/x"\nadvisory_key = 1', "lock[1].advisory_key: needs database ="),
    ],
)
def test_database_lock_config_errors_name_the_key(tmp_path, lock, expected):
    path = write_config(tmp_path / "config.toml", f'[[lock]]\nname = "db"\n{lock}\n')
    completed = run_cli("check-config", "--config", path)
    assert completed.returncode == 78
    assert expected in completed.stderr, completed.stderr
    assert "hunter2" not in completed.stderr + completed.stdout


def test_check_config_shows_a_database_lock_without_a_path(tmp_path):
    path = write_config(
        tmp_path / "config.toml",
        '[[lock]]\nname = "db"\ndatabase = "postgres"\nconnection = "app-db"\n'
        'advisory_key = [1, 2]\npassword_file = "app-db-password"\n',
    )
    completed = run_cli("check-config", "--config", path)
    assert completed.returncode == 0, completed.stderr
    [lock] = tomllib.loads(completed.stdout)["lock"]  # the effective config is TOML
    assert (lock["database"], lock["advisory_key"]) == ("postgresql", [1, 2])
    assert "path" not in lock
