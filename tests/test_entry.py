"""entry.py reads /proc/locks in a thread while the rest of lockwarden is imported; what it
hands over must be what a direct read gives, errors included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, run_json, write_config
from lockwarden.entry import LocksPrefetch, wants_snapshot


def test_prefetch_sees_a_real_flock(tmp_path: Path, children: Children) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    text = LocksPrefetch.start().text()
    ours = [line for line in text.splitlines() if line.endswith(f":{lock.stat().st_ino} 0 EOF")]
    assert len(ours) == 1 and f" {holder.pid} " in ours[0]


def test_prefetch_raises_the_read_error_where_the_text_is_needed(tmp_path: Path) -> None:
    prefetch = LocksPrefetch.start(str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError):
        prefetch.text()


@pytest.mark.parametrize(
    ("arguments", "wanted"),
    [
        (["--once"], True),
        (["--once", "--json", "--config", "x.toml"], True),
        (["inspect", "/srv/store"], False),
        (["check-config"], False),
        (["--help"], False),
    ],
)
def test_only_once_runs_prefetch(arguments: list[str], wanted: bool) -> None:
    assert wants_snapshot(arguments) is wanted


def test_once_through_the_entry_point_names_the_holder(tmp_path: Path, children: Children) -> None:
    """`python -m lockwarden` goes through entry.main, so this is the prefetched path."""
    lock = tmp_path / "store.lock"
    lock.touch()
    holder = children.python(FLOCK_HOLDER, str(lock))
    config = write_config(
        tmp_path / "config.toml",
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n',
    )
    code, document = run_json("--once", "--config", config)
    assert code == 0
    (finding,) = document["locks"]
    assert finding["state"] == "held"
    assert finding["holders"][0]["pid"] == holder.pid
    assert os.path.exists(lock)
