"""support/safe_read.py on real files of every kind: a FIFO, a socket, a symlink, a directory,
an oversized file where a record should be are refused at once with the reason, never read
through or waited on; a regular record is read with its stat."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockwarden.support.safe_read import (
    NotAnArtefact,
    UnsafeRecord,
    artefact_kind,
    describe_mode,
    list_directory,
    read_artefact,
    read_head,
    read_link,
    read_record,
    scan_directory,
)


@pytest.fixture
def bound_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "record.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


def test_a_regular_record_is_read_with_its_stat(tmp_path: Path) -> None:
    record = tmp_path / "owner.json"
    record.write_bytes(b'{"pid": 4242}')
    data, status = read_record(str(record))
    assert data == b'{"pid": 4242}'
    assert (status.st_ino, status.st_size) == (record.stat().st_ino, 13)


def test_an_absent_record_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_record(str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError):  # a path through a regular file: absent too
        (tmp_path / "file").write_text("x")
        read_record(str(tmp_path / "file" / "owner.json"))


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "owner.json"
    os.mkfifo(fifo)  # opening it to read would block until a writer came
    with pytest.raises(UnsafeRecord, match="is a FIFO, not a lock record"):
        read_record(str(fifo))


def test_a_socket_is_refused(bound_socket: Path) -> None:
    with pytest.raises(UnsafeRecord, match="is a socket"):
        read_record(str(bound_socket))


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    (tmp_path / "owner.json").symlink_to(secret)
    with pytest.raises(UnsafeRecord, match="is a symbolic link"):
        read_record(str(tmp_path / "owner.json"))


def test_a_directory_is_no_record(tmp_path: Path) -> None:
    with pytest.raises(UnsafeRecord, match="is a directory"):
        read_record(str(tmp_path))


def test_a_record_over_the_limit_is_refused_and_one_at_it_is_read(tmp_path: Path) -> None:
    record = tmp_path / "owner"
    record.write_bytes(b"x" * 101)
    with pytest.raises(UnsafeRecord, match="101 bytes, over the 100-byte record limit"):
        read_record(str(record), limit=100)
    record.write_bytes(b"x" * 100)
    assert read_record(str(record), limit=100)[0] == b"x" * 100


def test_an_unsearchable_path_is_a_reason_not_an_error(tmp_path: Path) -> None:
    with pytest.raises(UnsafeRecord, match="not a usable path"):
        read_record(str(tmp_path / "nul\0byte"))


def test_read_head_reads_only_the_start_of_a_file_of_any_length(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    database.write_bytes(b"SQLite format 3\0" + b"\0" * 200_000)
    head, status = read_head(str(database), 16)
    assert head == b"SQLite format 3\0"
    assert status.st_size == 200_016


def test_read_link_gives_the_target_and_refuses_a_long_one(tmp_path: Path) -> None:
    link = tmp_path / "SingletonLock"
    link.symlink_to("host-4242")
    assert read_link(str(link)) == "host-4242"
    with pytest.raises(UnsafeRecord, match="over the limit"):
        read_link(str(link), limit=4)


def test_a_directory_listing_is_sorted_and_bounded(tmp_path: Path) -> None:
    for name in ("c", "a", "b"):
        (tmp_path / name).write_text(name)
    assert [entry.name for entry in list_directory(str(tmp_path))] == ["a", "b", "c"]
    assert len(list(scan_directory(str(tmp_path), 2))) == 2
    with pytest.raises(UnsafeRecord, match="more than 2 entries"):
        list_directory(str(tmp_path), limit=2)


@pytest.mark.parametrize(
    ("mode", "kind", "description"),
    [
        (stat.S_IFREG | 0o644, "file", "not a regular file"),
        (stat.S_IFDIR | 0o755, "directory", "a directory"),
        (stat.S_IFLNK | 0o777, "symlink", "a symbolic link"),
        (stat.S_IFIFO | 0o600, None, "a FIFO"),
        (stat.S_IFSOCK | 0o600, None, "a socket"),
        (stat.S_IFCHR | 0o600, None, "a character device"),
        (stat.S_IFBLK | 0o600, None, "a block device"),
    ],
)
def test_kinds_of_file(mode: int, kind: str | None, description: str) -> None:
    status = os.stat_result((mode, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    assert artefact_kind(status) == kind
    assert describe_mode(mode) == description


def test_an_artefact_is_told_by_its_kind_and_content(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"4242\n")
    (tmp_path / "link").symlink_to("host-4242")
    store = tmp_path / "lockdir"
    store.mkdir()
    (store / "owner.json").write_text('{"pid": 4242}')

    assert read_artefact(str(tmp_path / "file"))[:2] == ("file", b"4242\n")
    assert read_artefact(str(tmp_path / "link"))[:2] == ("symlink", b"host-4242")
    kind, content, _ = read_artefact(str(store), str(store / "owner.json"))
    assert kind == "directory"
    assert content.startswith(b"owner.json\0")
    assert content.endswith(b'\n{"pid": 4242}')


def test_a_fifo_is_no_artefact(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "LOCK")
    with pytest.raises(NotAnArtefact, match="a FIFO: not a lock's artefact"):
        read_artefact(str(tmp_path / "LOCK"))
