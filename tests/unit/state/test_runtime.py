"""state/runtime.py on real directories: the runtime directory is the unit's own (never
another unit's), one per state file, and private; a marker is read only there, never through
a symlink, and written atomically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockwarden.state.runtime import (
    degraded_marker,
    private_directory,
    read_marker,
    runtime_directory,
    write_marker,
)


def test_the_units_runtime_directory_holds_one_directory_per_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = tmp_path / "run" / "lockwarden"
    monkeypatch.setenv("RUNTIME_DIRECTORY", f"{ours}:{tmp_path / 'second'}")  # systemd lists
    assert runtime_directory("/var/lib/lockwarden/state.jsonl") == str(
        ours / "%2Fvar%2Flib%2Flockwarden%2Fstate.jsonl"
    )
    assert runtime_directory("/srv/a%2Fb/state.jsonl") == str(
        ours / "%2Fsrv%2Fa%252Fb%2Fstate.jsonl"
    )
    long = "/" + "x" * 250 + "/state.jsonl"
    hashed = os.path.basename(str(runtime_directory(long)))
    assert len(hashed) == 64 and set(hashed) <= set("0123456789abcdef")
    assert degraded_marker("/s.jsonl") == str(ours / "%2Fs.jsonl" / "degraded-notice")


def test_another_units_runtime_directory_is_not_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A monitoring agent that runs lockwarden from its own unit passes its own directory."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "agent"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "user"))
    expected = "/run/lockwarden" if os.geteuid() == 0 else str(tmp_path / "user" / "lockwarden")
    assert os.path.dirname(str(runtime_directory("/s.jsonl"))) == expected


def test_a_marker_is_kept_only_in_a_private_directory_and_never_read_through_a_link(
    tmp_path: Path,
) -> None:
    base = tmp_path / "lockwarden"
    directory = base / "%2Fs.jsonl"
    marker = directory / "degraded-notice"
    assert read_marker(str(marker)) is None  # nothing remembered, nothing made
    assert not base.exists()
    assert private_directory(str(directory))
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    write_marker(str(marker), "disk full")
    assert read_marker(str(marker)) == "disk full"
    assert oct(marker.stat().st_mode & 0o777) == "0o600"

    marker.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("planted")
    marker.symlink_to(elsewhere)
    assert read_marker(str(marker)) is None  # a link is never followed

    marker.unlink()
    write_marker(str(marker), "disk full")
    directory.chmod(0o777)  # anyone may write there now: nothing in it is believed
    assert not private_directory(str(directory))
    assert read_marker(str(marker)) is None
    directory.chmod(0o700)
    write_marker(str(marker), None)  # the notice said healthy: the marker goes
    assert not marker.exists()
