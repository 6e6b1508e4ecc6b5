"""Every class of configuration error, through the real CLI: exit 78, one line per problem."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import run_cli, write_config
from lockwarden import config
from lockwarden.cli.commands import EXIT_CONFIG


def problems_of(tmp_path: Path, text: str) -> list[str]:
    path = write_config(tmp_path / "config.toml", text)
    completed = run_cli("check-config", "--config", path)
    assert completed.returncode == EXIT_CONFIG, completed.stdout + completed.stderr
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert all(line.startswith(f"lockwarden: config error: {path}: ") for line in lines)
    return [line.split(f"{path}: ", 1)[1] for line in lines]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[[lock]]\nname = "a"\npath = "/x"\ncritical_after = "15 minutes"\n',
            'lock[1].critical_after: "15 minutes" is not a duration; use e.g. "15m"',
        ),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nwarn_afer = "1m"\n',
            "lock[1].warn_afer: unknown key; did you mean 'warn_after'?",
        ),
        ('[[lock]]\nname = "a"\n', "lock[1].path: is required (e.g. '/srv/wa/store/LOCK')"),
        ('[[lock]]\npath = "/x"\n', "lock[1].name: is required (e.g. 'wa-store')"),
        (
            '[[lock]]\nname = "a"\npath = "relative/LOCK"\n',
            "lock[1].path: 'relative/LOCK' is not an absolute path",
        ),
        ('[[lock]]\nname = "a"\npath = 7\n', "lock[1].path: 7 is not a non-empty string"),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nformat = "ownerrecord"\n',
            "lock[1].format: 'ownerrecord' is not a format",
        ),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nwarn_after = 5\n',
            "lock[1].warn_after: 5 is not a duration",
        ),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nwarn_after = "2h"\ncritical_after = "1h"\n',
            "lock[1].warn_after: warn_after 2h is longer than critical_after 1h; a warning must "
            "come first",
        ),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nwarn_after = "2h"\n',
            "lock[1].warn_after: warn_after 2h is longer than critical_after 1h (not set in this "
            "lock: the default); a warning must come first",
        ),
        ('[[lock]]\nname = "a b"\npath = "/x"\n', "lock[1].name: 'a b' is not a lock name"),
        ('[defaults]\nwarn = "1m"\n', "defaults.warn: unknown key; did you mean 'warn_after'?"),
        ('[defaults]\nwarn_after = "soon"\n', 'defaults.warn_after: "soon" is not a duration'),
        ("defaults = 3\n", "defaults: must be a table"),
        ('[lock]\nname = "a"\n', "lock: must be an array of tables: write each lock as [[lock]]"),
        ('[[locks]]\nname = "a"\n', "locks: unknown key; did you mean 'lock'?"),
        (
            '[[lock]]\nname = "a"\npath = "/x"\nhost_aliases = "old"\n',
            "lock[1].host_aliases: 'old' is not a list of strings",
        ),
    ],
)
def test_each_error_class_names_the_key_path(tmp_path: Path, text: str, expected: str) -> None:
    problems = problems_of(tmp_path, text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        """
        [defaults]
        warn_after = "later"

        [[lock]]
        name = "a"
        path = "/x"

        [[lock]]
        name = "a"
        path = "/y"
        critical_after = "15 minutes"
        colour = "red"
        """,
    )
    assert [problem.split(":")[0] for problem in problems] == [
        "defaults.warn_after",
        "lock[2].colour",
        "lock[2].critical_after",
        "lock[2].name",
    ]


def test_toml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, '[[lock]]\nname = "a\n')
    assert problem.startswith("not valid TOML")


def test_missing_config_given_with_config_is_an_error(tmp_path: Path) -> None:
    completed = run_cli("--once", "--config", str(tmp_path / "absent.toml"))
    assert completed.returncode == EXIT_CONFIG
    assert "absent.toml: no such file" in completed.stderr


def test_check_config_prints_the_effective_config(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "c.toml",
        """
        [defaults]
        critical_after = "2h"

        [[lock]]
        name = "wa-store"
        path = "/srv/wa/store/LOCK"
        warn_after = "90s"
        """,
    )
    completed = run_cli("check-config", "--config", path)
    assert completed.returncode == 0, completed.stderr
    [lock] = tomllib.loads(completed.stdout)["lock"]  # the effective config is TOML
    assert (lock["warn_after"], lock["critical_after"], lock["format"]) == ("1m30s", "2h", "auto")


def test_builtin_default_lists_only_locks_that_exist(tmp_path: Path) -> None:
    existing = {config.WELL_KNOWN_LOCKS[1][1]}
    built = config.builtin(exists=lambda path: path in existing)
    assert [lock.path for lock in built.locks] == sorted(existing)
    assert built.builtin and built.source is None
