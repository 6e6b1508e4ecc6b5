"""support/atomic.py on real files: a replaced file is whole or absent to any reader, carries
the mode asked for whatever the umask, and a failed write leaves nothing behind; write_new
never replaces a file unless asked to."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lockwarden.support.atomic import write_atomically, write_new


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_gets_the_text_and_the_mode_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "lockwarden.prom"
    previous = os.umask(0o077)  # as a unit with UMask=0077 runs it
    try:
        write_atomically(str(target), "lockwarden_up 1\n", 0o644)
    finally:
        os.umask(previous)
    assert target.read_text(encoding="utf-8") == "lockwarden_up 1\n"
    assert mode_of(target) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lockwarden.prom"]


def test_a_replaced_file_is_a_new_inode_and_an_open_reader_keeps_the_old_text(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state.txt"
    target.write_text("old\n")
    before = target.stat().st_ino
    with target.open() as reader:
        write_atomically(str(target), "new\n", 0o600)
        assert reader.read() == "old\n"  # renamed over, never rewritten in place
    assert target.read_text() == "new\n"
    assert target.stat().st_ino != before
    assert mode_of(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.txt"]


def test_a_failed_rename_leaves_no_temporary_file_and_raises(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "keep").write_text("x")  # a non-empty directory cannot be renamed over
    with pytest.raises(OSError):
        write_atomically(str(target), "text", 0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]
    assert (target / "keep").read_text() == "x"


def test_a_relative_path_is_written_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomically("plain.txt", "here\n", 0o640)
    assert (tmp_path / "plain.txt").read_text() == "here\n"
    assert mode_of(tmp_path / "plain.txt") == 0o640


def test_write_new_creates_a_file_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "lockwarden.toml"
    previous = os.umask(0o077)
    try:
        write_new(str(target), "[defaults]\n", 0o644)
    finally:
        os.umask(previous)
    assert target.read_text() == "[defaults]\n"
    assert mode_of(target) == 0o644


def test_write_new_keeps_an_existing_file_unless_told_to_replace_it(tmp_path: Path) -> None:
    target = tmp_path / "lockwarden.toml"
    target.write_text("mine\n")
    with pytest.raises(FileExistsError):
        write_new(str(target), "theirs\n", 0o644)
    assert target.read_text() == "mine\n"

    write_new(str(target), "theirs\n", 0o600, replace=True)
    assert target.read_text() == "theirs\n"
    assert mode_of(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lockwarden.toml"]


def test_write_new_never_follows_a_symlink_planted_at_its_path(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (tmp_path / "config.toml").symlink_to(victim)
    with pytest.raises(FileExistsError):  # O_EXCL: a dangling or live link is "exists"
        write_new(str(tmp_path / "config.toml"), "evil\n", 0o644)
    assert victim.read_text() == "untouched\n"
