"""Which mount a path lies on, from /proc/self/mountinfo lines, by the path's name alone (the
mount itself is never touched): a table of real mountinfo lines."""

from __future__ import annotations

import pytest

from lockwarden.support.bounded import Mount, Unanswered, mount_of, parse_mount, read_mounts

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
