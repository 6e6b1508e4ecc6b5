"""formats/trust.py on real directories, files and links: a record's PID is believed only when
nobody but its writer could have put it there. Checked with the modes and owners a hostile
user could arrange (the tests run as root here; as another user the same files are theirs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockwarden.formats.trust import MAX_LINKS, distrust_reason

NOBODY = 65534


def record_in(directory: Path, mode: int = 0o644) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / "owner.json"
    record.write_text('{"pid": 4242}')
    record.chmod(mode)
    return record


def reason(record: Path) -> str | None:
    return distrust_reason(str(record), os.stat(record))


def test_a_private_record_in_a_private_directory_is_believed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    record = record_in(store)
    store.chmod(0o755)
    assert reason(record) is None


def test_group_write_is_trusted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    record = record_in(store, 0o664)
    store.chmod(0o2775)
    assert reason(record) is None


def test_a_record_every_user_may_write_is_not(tmp_path: Path) -> None:
    record = record_in(tmp_path / "store", 0o666)
    text = reason(record)
    assert text is not None
    assert text.startswith(f"{record} is writable by every user (mode 0666)")


def test_a_world_writable_directory_without_the_sticky_bit_is_not(tmp_path: Path) -> None:
    store = tmp_path / "store"
    record = record_in(store)
    store.chmod(0o777)
    text = reason(record)
    assert text is not None and text.startswith(f"{store} is writable by every user and not sticky")


def test_a_sticky_world_writable_directory_like_tmp_is(tmp_path: Path) -> None:
    store = tmp_path / "store"
    record = record_in(store)
    store.chmod(0o1777)
    assert reason(record) is None


def test_a_link_another_user_owns_in_a_world_writable_directory_is_not(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky does not help: the link's owner may re-point it
    record_in(tmp_path / "real")
    link = shared / "store"
    link.symlink_to(tmp_path / "real")
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)
    text = reason(link / "owner.json")
    owner = os.lstat(link).st_uid
    assert owner != 0
    assert text is not None
    assert f"passes through the symbolic link {link}, which uid {owner} owns" in text


def test_a_root_owned_link_in_a_world_writable_directory_is_believed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can own a link here; as another user the link is that user's")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    record_in(tmp_path / "real")
    (shared / "store").symlink_to(tmp_path / "real")
    assert reason(shared / "store" / "owner.json") is None


def test_a_link_in_a_private_directory_is_believed_whoever_owns_it(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    record_in(tmp_path / "real")
    link = private / "store"
    link.symlink_to("../real")  # relative, with `..`: resolved as the kernel does
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)
    assert reason(link / "owner.json") is None


def test_a_path_through_more_links_than_the_kernel_follows_is_not(tmp_path: Path) -> None:
    """The kernel gives up after 40 links (ELOOP) before trust.py's own count of MAX_LINKS
    hops is reached: either way the record decides nothing."""
    record = record_in(tmp_path / "real")
    previous = tmp_path / "real"
    for number in range(MAX_LINKS + 1):
        link = tmp_path / f"hop{number}"
        link.symlink_to(previous)
        previous = link
    text = distrust_reason(str(previous / "owner.json"), os.stat(record))
    assert text == (
        f"{previous}: Too many levels of symbolic links; the record's directory cannot be checked"
    )
