"""config/load.py in-process, on real files: what a valid config becomes ([defaults] and
[alerts] inherited by each lock, a database lock named by its watch, the unit's credential
picked up), and what an invalid one still hands on (every problem, the valid [notify] and
locks, so check-config says everything at once). The error wording of each key is
test_config.py's, through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_config
from lockwarden import config
from lockwarden.config import NOTIFY_CREDENTIAL, WELL_KNOWN_LOCKS, well_known_format
from lockwarden.formats.dpkg import DPKG_LOCK_PATHS


def load_text(tmp_path: Path, text: str) -> config.Config:
    return config.load(write_config(tmp_path / "lockwarden.toml", text))


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as refused:
        load_text(tmp_path, text)
    return refused.value.problems


def test_a_file_that_is_no_config_is_one_problem_naming_it(tmp_path: Path) -> None:
    for path, expected in (
        (tmp_path / "absent.toml", "no such file"),
        (tmp_path, "is a directory, not a config file"),
    ):
        with pytest.raises(config.ConfigError) as refused:
            config.load(str(path))
        assert refused.value.problems == [f"{path}: {expected}"]
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'[defaults]\nwarn_after = "\xff"\n')
    with pytest.raises(config.ConfigError) as garbled:
        config.load(str(binary))
    [problem] = garbled.value.problems
    assert problem.startswith(f"{binary}: not valid")


def test_defaults_reach_each_lock_that_does_not_set_its_own(tmp_path: Path) -> None:
    loaded = load_text(
        tmp_path,
        """
        [defaults]
        warn_after = "20m"
        critical_after = "2h"
        fs_timeout = "7s"

        [[lock]]
        name = "a"
        path = "/srv/a/LOCK"

        [[lock]]
        name = "b"
        path = "/srv/b/LOCK"
        warn_after = "5m"
        """,
    )
    assert [(lock.warn_after, lock.critical_after, lock.fs_timeout) for lock in loaded.locks] == [
        (1200.0, 7200.0, 7.0),
        (300.0, 7200.0, 7.0),
    ]
    assert loaded.source == str(tmp_path / "lockwarden.toml")
    assert loaded.fs_timeout == 7.0


def test_a_lock_overrides_only_the_alert_keys_it_sets(tmp_path: Path) -> None:
    loaded = load_text(
        tmp_path,
        """
        [alerts]
        repeat_interval = "4h"
        min_severity = "warning"

        [[lock]]
        name = "a"
        path = "/srv/a/LOCK"
        repeat_interval = "30m"
        notify_tags = ["ops"]

        [[lock]]
        name = "b"
        path = "/srv/b/LOCK"
        """,
    )
    first, second = loaded.locks
    assert (first.alerts.repeat_interval, first.alerts.min_severity) == (1800.0, "warning")
    assert first.notify_tags == ("ops",)
    assert second.alerts == loaded.alerts
    assert (second.alerts.repeat_interval, second.notify_tags) == (14400.0, ())


def test_an_invalid_config_still_hands_on_its_valid_notify_and_locks(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError) as refused:
        load_text(
            tmp_path,
            """
            [notify]
            urls = ["json://127.0.0.1:9/hook"]

            [[lock]]
            name = "broken"
            path = "/srv/broken/LOCK"
            warn_after = "later"

            [[lock]]
            name = "fine"
            path = "/srv/fine/LOCK"
            """,
        )
    error = refused.value
    assert [problem.split(": ")[1] for problem in error.problems] == ["lock[1].warn_after"]
    assert error.notify is not None and error.notify.urls == ("json://127.0.0.1:9/hook",)
    assert [(number, lock.name) for number, lock in error.locks] == [(1, "broken"), (2, "fine")]


def test_an_invalid_notify_section_is_not_handed_on(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError) as refused:
        load_text(tmp_path, '[notify]\nurls = "json://x"\n')
    assert refused.value.notify is None


def test_a_second_lock_of_the_same_name_names_the_first(tmp_path: Path) -> None:
    text = '[[lock]]\nname = "a"\npath = "/x"\n[[lock]]\nname = "z"\npath = "/z"\n'
    text += '[[lock]]\nname = "a"\npath = "/y"\n'
    assert problems(tmp_path, text) == [
        f"{tmp_path / 'lockwarden.toml'}: lock[3].name: 'a' is already the name of lock[1]"
    ]


def test_a_database_lock_is_named_by_what_it_watches(tmp_path: Path) -> None:
    loaded = load_text(
        tmp_path,
        """
        [[lock]]
        name = "migrations"
        database = "postgresql"
        connection = "service=app-db"
        advisory_key = "prisma"
        connect_timeout = "5s"
        """,
    )
    [lock] = loaded.locks
    assert lock.database is not None
    assert (lock.format, lock.path) == (
        "postgresql",
        "postgresql service=app-db: advisory_key prisma",
    )
    assert (lock.database.watch, lock.database.target, lock.database.connect_timeout) == (
        "advisory_key",
        "prisma",
        5.0,
    )


@pytest.mark.parametrize(
    ("lock", "key", "words"),
    [
        ('path = "/srv/x"\nconnection = "service=a"\n', "connection", "needs database ="),
        (
            'database = "postgresql"\nconnection = "service=a"\nadvisory_key = 1\ntable = "t"\n',
            "database",
            "exactly one of advisory_key, table, liquibase_table (2 given)",
        ),
        ('database = "postgresql"\nadvisory_key = 1\n', "connection", "is required with database"),
        (
            'database = "mysql"\nconnection = "mysql://app@db:3306"\nadvisory_key = 72707369\n',
            "advisory_key",
            "on mysql names a tool",
        ),
        (
            'database = "mysql"\nconnection = "service=a"\nlock_name = "x"\n',
            "connection",
            "on mysql, a URI",
        ),
        (
            'database = "postgresql"\nconnection = "service=a"\nlock_name = "x"\n',
            "lock_name",
            "is not watched on postgresql",
        ),
        (
            'database = "postgresql"\nconnection = "service=a"\nadvisory_key = 1\npath = "/x"\n',
            "path",
            "a database lock has no path",
        ),
    ],
)
def test_what_a_database_lock_must_and_must_not_hold(
    tmp_path: Path, lock: str, key: str, words: str
) -> None:
    found = problems(tmp_path, f'[[lock]]\nname = "db"\n{lock}')
    assert any(f": lock[1].{key}: " in problem and words in problem for problem in found), found


def test_the_units_notify_credential_is_used_when_systemd_passed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    text = '[[lock]]\nname = "a"\npath = "/x"\n'
    assert load_text(tmp_path, text).notify.urls_file is None  # passed none: not looked for
    (credentials / NOTIFY_CREDENTIAL).write_text("json://127.0.0.1:9/hook\n")
    assert load_text(tmp_path, text).notify.urls_file == NOTIFY_CREDENTIAL
    mine = f'[notify]\nurls_file = "{tmp_path / "urls"}"\n{text}'
    assert load_text(tmp_path, mine).notify.urls_file == str(tmp_path / "urls")


def test_dpkgs_locks_are_checked_by_dpkgs_rules_and_the_others_as_kernel_locks() -> None:
    assert {well_known_format(path) for path in DPKG_LOCK_PATHS} == {"dpkg"}
    assert well_known_format("/run/xtables.lock") == "kernel"


def test_the_built_in_config_checks_the_well_known_locks_that_exist() -> None:
    everything = config.builtin(exists=lambda path: True)
    assert [(lock.name, lock.path, lock.role) for lock in everything.locks] == list(
        WELL_KNOWN_LOCKS
    )
    assert all(lock.format == well_known_format(lock.path) for lock in everything.locks)
    assert all(
        (lock.warn_after, lock.critical_after) == (900.0, 3600.0) for lock in everything.locks
    )
    assert config.builtin(exists=lambda path: False).locks == ()
