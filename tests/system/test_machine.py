"""The live test's root file system cache: which mirror it builds from and when it is rebuilt
(no container is booted here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from system import machine


def test_mirror_is_read_from_one_line_and_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.sources").write_text(
        "Types: deb\nURIs: https://packages.example.net/apt\nSuites: stable\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.net/debian\nSuites: bookworm\nComponents: main\n"
    )
    assert machine.debian_mirror(tmp_path) == "http://mirror.example.net/debian"
    (tmp_path / "sources.list").write_text(
        "# a comment\ndeb [arch=amd64] http://deb.example.org/debian/ bookworm main\n"
    )
    assert machine.debian_mirror(tmp_path) == "http://deb.example.org/debian/"


def test_a_changed_package_list_changes_the_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKWARDEN_TEST_MIRROR", "http://mirror.example.net/debian")
    listed = tmp_path / "rootfs-packages.txt"
    listed.write_text("# comment\nsystemd\npython3\n")
    monkeypatch.setattr(machine, "PACKAGES", listed)
    first = machine.rootfs_key("bookworm")
    assert machine.rootfs_key("bookworm") == first
    assert machine.rootfs_key("trixie") != first
    listed.write_text("# comment\nsystemd\npython3\npython3-psutil\n")
    assert machine.rootfs_key("bookworm") != first
    listed.write_text("# another comment only\nsystemd\npython3\n")
    assert machine.rootfs_key("bookworm") == first  # comments are not part of the recipe
