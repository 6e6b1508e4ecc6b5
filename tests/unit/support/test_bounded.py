"""support/bounded.py: which mount a path lies on, from /proc/self/mountinfo lines, by the
path's name alone (the mount itself is never touched): a table of real mountinfo lines. And
BoundedRun with its real child processes: outcomes in order, an item that does not answer
given up at its deadline with its mount named, the rest of that mount never touched again, a
child that dies replaced. (Real hung FUSE mounts are tests/hung's.)"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from lockwarden.support.bounded import (
    _HEADER,
    BoundedRun,
    Mount,
    Unanswered,
    Unreadable,
    WorkerEnded,
    _Channel,
    _Sender,
    mount_of,
    parse_mount,
    read_mounts,
)

LINES = [
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
    "45 22 0:40 / /srv/share rw,nosuid,nodev,relatime shared:2 - fuse.sshfs host:/x rw",
    "46 22 0:41 / /mnt/my\\040disk rw,relatime - nfs4 server:/export rw,vers=4.2",
    "47 22 0:42 / /srv/share rw,relatime shared:3 master:2 - cifs //nas/share rw",
    "48 22 0:43 / /srv/share-old rw - tmpfs tmpfs rw",
]
MOUNTS = tuple(mount for mount in map(parse_mount, LINES) if mount is not None)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/etc/passwd", Mount("/", "ext4")),
        ("/srv/share/store/LOCK", Mount("/srv/share", "cifs")),  # stacked: the last one listed
        ("/srv/share", Mount("/srv/share", "cifs")),
        ("/srv/share-old/LOCK", Mount("/srv/share-old", "tmpfs")),  # not a prefix of a name
        ("/mnt/my disk/repo/lock.exclusive", Mount("/mnt/my disk", "nfs4")),  # \040 is a space
        ("/srv/share/../other/LOCK", Mount("/", "ext4")),  # by the normalised name
    ],
)
def test_a_path_lies_on_the_longest_mount_point_above_it(path: str, expected: Mount) -> None:
    assert mount_of(path, MOUNTS) == expected


def test_lines_that_are_not_mounts_are_skipped() -> None:
    assert parse_mount("") is None
    assert parse_mount("22 1 254:0 / / rw,relatime shared:1 ext4 /dev/vda rw") is None
    assert len(MOUNTS) == len(LINES)


def test_this_process_sees_its_root_mount() -> None:
    mounts = read_mounts()
    assert mount_of("/", mounts) is not None


def test_the_reason_names_the_mount_and_the_deadline() -> None:
    assert str(Unanswered(Mount("/srv/share", "fuse.sshfs"), 3.0)) == (
        "its file system did not answer within 3s (a hung mount?): /srv/share (fuse.sshfs)"
    )
    assert str(Unanswered(None, 0.5)).endswith(
        "within 0.5s (a hung mount?): its mount could not be named"
    )


HUNG = Mount("/srv/hung", "fuse.test")
ROOT = Mount("/", "ext4")


def bounded(work, deadline: float = 5.0) -> BoundedRun[str, object]:  # type: ignore[no-untyped-def]
    return BoundedRun(
        work, path_of=lambda item: item, timeout=lambda item: deadline, mounts=(ROOT, HUNG)
    )


def test_outcomes_come_in_order_with_the_items_each_adds(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_text("")

    def walk(path: str) -> tuple[object, Sequence[str]]:
        if os.path.isdir(path):
            return "directory", [os.path.join(path, name) for name in sorted(os.listdir(path))]
        return os.lstat(path).st_ino, ()

    items = [str(tmp_path / "a"), str(tmp_path / "d"), str(tmp_path / "gone")]
    outcomes = list(bounded(walk).run(items))
    assert [item for item, _ in outcomes] == [*items, str(tmp_path / "d" / "b")]
    assert outcomes[0][1] == (tmp_path / "a").stat().st_ino
    assert outcomes[1][1] == "directory"
    assert isinstance(outcomes[2][1], FileNotFoundError)  # the work's own error, carried back
    assert outcomes[3][1] == (tmp_path / "d" / "b").stat().st_ino


def test_an_item_past_its_deadline_is_unanswered_and_its_mount_never_touched_again(
    tmp_path: Path,
) -> None:
    touched = tmp_path / "touched"

    def work(path: str) -> tuple[object, Sequence[str]]:
        with touched.open("a") as log:  # the child's own record of what it worked on
            log.write(path + "\n")
        if path.endswith("/hang"):
            time.sleep(60)
        return path.upper(), ()

    run = bounded(work, deadline=0.3)
    started = time.monotonic()
    outcomes = list(run.run(["/a", "/srv/hung/hang", "/srv/hung/next", "/b"]))
    assert time.monotonic() - started < 10
    assert [item for item, _ in outcomes] == ["/a", "/srv/hung/hang", "/srv/hung/next", "/b"]
    assert (outcomes[0][1], outcomes[3][1]) == ("/A", "/B")
    hung, skipped = outcomes[1][1], outcomes[2][1]
    assert isinstance(hung, Unanswered) and (hung.mount, hung.seconds) == (HUNG, 0.3)
    assert skipped is hung
    assert touched.read_text().split() == ["/a", "/srv/hung/hang", "/b"]
    assert set(run.hung) == {"/srv/hung"}


def test_a_child_that_dies_is_that_items_error_and_another_goes_on() -> None:
    def work(path: str) -> tuple[object, Sequence[str]]:
        if path == "/crash":
            os._exit(3)
        return os.getpid(), ()

    outcomes = list(bounded(work).run(["/a", "/crash", "/b"]))
    assert isinstance(outcomes[1][1], WorkerEnded)
    first, second = outcomes[0][1], outcomes[2][1]
    assert isinstance(first, int) and isinstance(second, int)
    assert len({first, second, os.getpid()}) == 3  # two children, neither this process


SHARED = ("a record", "many results carry")
LATER = ("a record", "first sent after a failed one")


def test_what_an_earlier_message_sent_is_carried_by_reference_and_arrives_whole() -> None:
    """One pickler for all of a child's messages: a value every result carries goes once,
    and later messages refer to it. Each result still arrives whole and in order."""

    def work(path: str) -> tuple[object, Sequence[str]]:
        return {"path": path, "shared": SHARED, "format": "kernel"}, ()

    items = [f"/lock{number}" for number in range(300)]
    outcomes = list(bounded(work).run(items))
    assert [item for item, _ in outcomes] == items
    for item, outcome in outcomes:
        assert outcome == {"path": item, "shared": SHARED, "format": "kernel"}


def test_a_result_that_cannot_be_sent_is_its_items_error_and_the_rest_arrive_whole() -> None:
    """A result that cannot be pickled fails after parts of it (SHARED) were memoized by the
    child: the child then starts a new pickler and the parent a new unpickler with it. A
    value first sent after the failure (LATER) and referred to by the next message is read
    against the same memo on both sides (without the new pair it came back as another)."""

    def work(path: str) -> tuple[object, Sequence[str]]:
        if path == "/unpicklable":
            return (SHARED, "new text", lambda: None), ()
        return ((SHARED, path) if path == "/a" else (SHARED, LATER, path)), ()

    outcomes = list(bounded(work).run(["/a", "/unpicklable", "/b", "/c"]))
    assert [item for item, _ in outcomes] == ["/a", "/unpicklable", "/b", "/c"]
    failed = outcomes[1][1]
    assert isinstance(failed, RuntimeError) and "Can't pickle" in str(failed), failed
    assert [outcomes[index][1] for index in (0, 2, 3)] == [
        (SHARED, "/a"),
        (SHARED, LATER, "/b"),
        (SHARED, LATER, "/c"),
    ]


def test_a_later_message_refers_to_what_an_earlier_one_sent_instead_of_sending_it_again() -> None:
    """The sizes on the real pipe: a second message carrying the same record is a fraction
    of the first (one pickle per message would send the record whole each time)."""
    record = {"fields": tuple(f"field_{number}" for number in range(40)), "format": "kernel"}
    reader, writer = os.pipe()
    try:
        sender, channel = _Sender(writer), _Channel(reader)
        sender.send((record, ()))
        sender.send((record, ("/next",)))
        raw = os.read(reader, 1 << 16)
        first, _fresh = _HEADER.unpack_from(raw)
        second, _fresh = _HEADER.unpack_from(raw, _HEADER.size + first)
        assert second * 10 < first, (first, second)
        channel.buffer += raw
        assert channel.receive(1.0) == (record, ())
        assert channel.receive(1.0) == (record, ("/next",))
    finally:
        os.close(reader)
        os.close(writer)


def test_items_a_result_that_could_not_be_sent_would_have_added_are_done_by_neither_side(
    tmp_path: Path,
) -> None:
    """The unpicklable result of a walk goes as an error with no further items: the child
    must not go on to the items it named (the parent never reads their answers)."""
    touched = tmp_path / "touched"

    def work(path: str) -> tuple[object, Sequence[str]]:
        with touched.open("a") as log:
            log.write(f"{os.getpid()} {path}\n")
        if path == "/walk":
            return lambda: None, ["/walk/below"]
        return path, ()

    outcomes = list(bounded(work).run(["/a", "/walk", "/b"]))
    assert [item for item, _ in outcomes] == ["/a", "/walk", "/b"]
    assert isinstance(outcomes[1][1], RuntimeError)
    lines = touched.read_text().split("\n")
    child = int(lines[0].split()[0])
    with contextlib.suppress(ChildProcessError):
        os.waitpid(child, 0)  # the child has done all it was going to do
    assert [line.split()[1] for line in touched.read_text().splitlines()] == ["/a", "/walk", "/b"]


class TwoPartError(Exception):
    """Pickles (as its message alone) but cannot be made again from it: unpickling calls
    TwoPartError(message), which lacks `reason`."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")


def test_an_answer_that_cannot_be_read_back_is_its_items_error_and_a_new_child_goes_on() -> None:
    def work(path: str) -> tuple[object, Sequence[str]]:
        if path == "/odd":
            raise TwoPartError(path, "odd")
        return (SHARED, path, os.getpid()), ()

    outcomes = list(bounded(work).run(["/a", "/odd", "/b", "/c"]))
    assert [item for item, _ in outcomes] == ["/a", "/odd", "/b", "/c"]
    odd = outcomes[1][1]
    assert isinstance(odd, Unreadable) and "TypeError" in str(odd), odd
    results = [outcomes[index][1] for index in (0, 2, 3)]
    assert [result[:2] for result in results] == [(SHARED, "/a"), (SHARED, "/b"), (SHARED, "/c")]
    first, second, third = (result[2] for result in results)
    assert first != second == third  # the child whose answer was garbled was replaced
