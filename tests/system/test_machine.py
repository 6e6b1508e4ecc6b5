"""The live test's root file systems: which mirror they are built from, when the cache is
rebuilt, and that the recipe builds from nothing in the test session's own environment (no
container is booted here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildenv import build_environment
from conftest import require_tool
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


def test_a_build_gets_the_hosts_settings_and_none_of_the_test_sessions_variables() -> None:
    session = {
        "CREDENTIALS_DIRECTORY": "",  # set by conftest: systemd's postinst fails on it
        "RUNTIME_DIRECTORY": "/tmp/pytest-of-root/runtime/lockwarden",
        "CI": "true",
        "PATH": "/work/.venv/bin:/usr/bin",
        "PYTHONPATH": "/work/src",
        "HOME": "/root",
        "https_proxy": "http://127.0.0.1:3128",
        "PIP_FIND_LINKS": "/opt/wheels",
    }
    built = build_environment(host=session, DEBIAN_FRONTEND="noninteractive")
    assert built == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/root",
        "https_proxy": "http://127.0.0.1:3128",
        "DEBIAN_FRONTEND": "noninteractive",
    }
    assert build_environment(pip=True, host=session)["PIP_FIND_LINKS"] == "/opt/wheels"


def require_mmdebstrap_as_root() -> None:
    """mmdebstrap in its root mode: a failure under CI=true, a skip elsewhere."""
    require_tool("mmdebstrap")
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mmdebstrap's root mode needs root")
        pytest.skip("mmdebstrap's root mode needs root")


def installed_packages(root: Path) -> set[str]:
    """The packages dpkg inside a root file system says are installed."""
    installed, name = set(), ""
    for line in (root / "var/lib/dpkg/status").read_text().splitlines():
        if line.startswith("Package: "):
            name = line.removeprefix("Package: ")
        elif line == "Status: install ok installed":
            installed.add(name)
    return installed


@pytest.mark.slow
def test_the_root_file_system_builds_from_nothing_in_the_test_sessions_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live tests' exact recipe, built without any cache into a temporary directory from
    inside the test session, with the session's own variables set (the empty
    $CREDENTIALS_DIRECTORY that once broke systemd's postinst, named here so the test keeps its
    teeth if conftest changes): a build that lets them through fails here on every machine,
    cached or not."""
    require_mmdebstrap_as_root()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "")
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "runtime"))
    wanted = tmp_path / "bookworm"
    machine.build("bookworm", wanted)
    assert (wanted / "etc/debian_version").read_text().startswith("12.")
    assert set(machine.packages()) <= installed_packages(wanted)
    assert (wanted / "sbin/init").resolve().name == "systemd"
    assert "Setting up systemd " in (tmp_path / "bookworm.build.log").read_text()


def test_a_failed_build_says_why_from_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails quotes the tail of mmdebstrap's verbose log, kept beside the tree: here
    a mirror on 127.0.0.1 that refuses every connection, so apt's own error is named."""
    require_mmdebstrap_as_root()
    monkeypatch.setenv("LOCKWARDEN_TEST_MIRROR", "http://127.0.0.1:9/debian")
    with pytest.raises(RuntimeError) as failed:
        machine.build("bookworm", tmp_path / "bookworm")
    message = str(failed.value)
    assert message.startswith("mmdebstrap bookworm exited ")
    assert str(tmp_path / "bookworm.build.log") in message
    assert "127.0.0.1:9" in message  # apt's line about the mirror it could not reach
    assert not (tmp_path / "bookworm").exists()
    assert not (tmp_path / "bookworm.partial").exists()
