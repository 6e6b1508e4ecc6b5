"""Claim.key_names (formats.read_claim): the one name of each inode a claim carries, only
where an inode has exactly one: a directory, or a regular file with a single link. Real files
in a temporary directory."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from lockwarden.formats import read_claim

PID_MAX = 4_194_304


def key(path: Path) -> tuple[int, int]:
    status = path.stat()
    return (status.st_dev, status.st_ino)


def test_a_file_with_one_link_is_named_by_its_path(tmp_path: Path) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    claim = read_claim(str(lock), "kernel", PID_MAX)
    assert claim.key_names == ((key(lock), "store.lock"),)


def test_a_hard_linked_file_has_no_one_name(tmp_path: Path) -> None:
    lock = tmp_path / "store.lock"
    lock.touch()
    os.link(lock, tmp_path / "elsewhere.lock")
    claim = read_claim(str(lock), "kernel", PID_MAX)
    assert claim.keys == (key(lock),)
    assert claim.key_names == ()


def test_a_lock_directory_is_named_though_it_has_many_links(tmp_path: Path) -> None:
    lock = tmp_path / "store" / "LOCK"
    (lock / "sub").mkdir(parents=True)  # a directory's link count is never one
    claim = read_claim(str(lock) + "/", "owner-record", PID_MAX)
    assert claim.present
    assert dict(claim.key_names) == {key(lock): "LOCK"}


def test_a_lock_reached_through_a_symlink_is_not_named_by_the_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.lock"
    real.touch()
    link = tmp_path / "store.lock"
    link.symlink_to(real)
    claim = read_claim(str(link), "kernel", PID_MAX)
    assert claim.keys == (key(real),)
    assert claim.key_names == ()  # descriptors show "real.lock", which no path read names


def test_a_trailing_slash_does_not_name_a_symlinked_directory_by_the_symlink(
    tmp_path: Path,
) -> None:
    real = tmp_path / "REAL"
    real.mkdir()
    (tmp_path / "LOCK").symlink_to(real)
    claim = read_claim(str(tmp_path / "LOCK") + "/", "owner-record", PID_MAX)
    assert claim.present and claim.keys == (key(real),)
    assert claim.key_names == ()


def test_dot_and_dot_dot_are_no_names(tmp_path: Path) -> None:
    (tmp_path / "REAL").mkdir()
    for tail in ("/.", "/.."):
        claim = read_claim(str(tmp_path / "REAL") + tail, "kernel", PID_MAX)
        assert claim.present and claim.keys, tail
        assert claim.key_names == (), tail


def test_an_absent_lock_names_nothing(tmp_path: Path) -> None:
    claim = read_claim(str(tmp_path / "none.lock"), "kernel", PID_MAX)
    assert not claim.present and claim.key_names == ()


def test_an_sqlite_database_in_wal_mode_names_its_shm_file_too(tmp_path: Path) -> None:
    """SQLite's claim carries the database and its `-shm` file (readers and the WAL writer
    lock bytes there): the format names the `-shm` file, the path names the database."""
    database = tmp_path / "app.db"
    connection = sqlite3.connect(database)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE t(x)")
        connection.commit()
        shm = tmp_path / "app.db-shm"
        assert shm.exists()
        claim = read_claim(str(database), "sqlite", PID_MAX)
        assert set(claim.keys) == {key(database), key(shm)}
        assert dict(claim.key_names) == {key(database): "app.db", key(shm): "app.db-shm"}
    finally:
        connection.close()


def test_a_firefox_profile_names_its_parentlock(tmp_path: Path) -> None:
    """Firefox's kernel lock is on `.parentlock`, beside the `lock` symlink the path reads."""
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / ".parentlock").touch()
    (profile / "lock").symlink_to(f"127.0.0.1:+{os.getpid()}")
    claim = read_claim(str(profile), "firefox-profile", PID_MAX)
    assert claim.path == str(profile / "lock")
    assert dict(claim.key_names)[key(profile / ".parentlock")] == ".parentlock"

    (profile / "lock").unlink()  # a clean exit: only .parentlock is left, and is the path
    claim = read_claim(str(profile), "firefox-profile", PID_MAX)
    assert claim.path == str(profile / ".parentlock")
    assert claim.key_names == ((key(profile / ".parentlock"), ".parentlock"),)


def test_a_terraform_lock_info_names_the_state_file_it_locks(tmp_path: Path) -> None:
    state = tmp_path / "terraform.tfstate"
    state.write_text("{}")
    (tmp_path / ".terraform.tfstate.lock.info").write_text('{"ID": "1", "Who": "ops@here"}')
    claim = read_claim(str(tmp_path), "terraform", PID_MAX)
    assert claim.path == str(tmp_path / ".terraform.tfstate.lock.info")
    assert dict(claim.key_names) == {key(state): "terraform.tfstate"}

    os.link(state, tmp_path / "backup.tfstate")  # two names: neither proves the inode's file
    assert read_claim(str(tmp_path), "terraform", PID_MAX).key_names == ()
