"""chromium-profile: a real headless Chromium holding its user-data-dir's SingletonLock."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Children, require_tool, wait_until
from lockcheck import inspect_lock, kill_group
from lockwarden.check.advice import shell_argv
from lockwarden.model import State, UnknownCause

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@dataclass
class Browser:
    process: subprocess.Popen[str]
    profile: Path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One Chromium for the module (it takes seconds to start); its whole group is killed."""
    chromium = require_tool("chromium")
    profile = tmp_path_factory.mktemp("profile")
    process = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: os.path.islink(profile / "SingletonLock"), timeout=60)
        yield Browser(process, profile)
    finally:
        kill_group(process)


def test_auto_picks_the_profile_and_names_the_browser_main_process(browser: Browser) -> None:
    finding = inspect_lock(browser.profile)

    assert finding.format == "chromium-profile"
    assert finding.state is State.HELD
    assert finding.holder is not None and finding.holder.pid == browser.process.pid
    assert os.readlink(browser.profile / "SingletonLock").endswith(f"-{browser.process.pid}")


def test_lock_from_a_renamed_host_is_judged_here_only_when_configured(
    browser: Browser, tmp_path: Path
) -> None:
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "SingletonLock").symlink_to(f"old-container-name-{browser.process.pid}")

    unconfigured = inspect_lock(profile)
    renamed = inspect_lock(profile, host_aliases=("old-container-name",))

    assert unconfigured.state is State.UNKNOWN
    assert unconfigured.unknown_cause is UnknownCause.OTHER_HOST
    assert renamed.state is State.HELD
    assert renamed.holder is not None and renamed.holder.pid == browser.process.pid


def test_killed_browser_leaves_a_stale_lock_with_proof(browser: Browser) -> None:
    pid = browser.process.pid
    kill_group(browser.process)

    finding = inspect_lock(browser.profile)

    assert os.path.islink(browser.profile / "SingletonLock")  # Chromium left it behind
    assert finding.state is State.STALE
    assert finding.proof is not None and str(pid) in finding.proof
    argv = shell_argv(finding.action or "")
    assert argv is not None and argv[:3] == ["rm", "-f", "--"]
    assert str(browser.profile / "SingletonLock") in argv


def test_pid_reused_by_a_process_that_is_not_chromium_is_never_the_holder(
    children: Children, tmp_path: Path
) -> None:
    sleeper = children.start(["sleep", "60"])
    (tmp_path / "SingletonLock").symlink_to(f"{socket.gethostname()}-{sleeper.pid}")

    finding = inspect_lock(tmp_path)

    assert finding.state is State.UNKNOWN  # probably reused; an Electron app has its own name
    assert finding.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED
    assert finding.holder is None
    assert "'sleep'" in finding.reason


CHROMIUM_BINARY = Path("/usr/lib/chromium/chromium")  # Debian's; /usr/bin/chromium runs it


def app_named(name: str, directory: Path) -> Path:
    """Debian's Chromium as a program of another name, as an Electron app is one (VS Code's
    `code`): a link to the binary (a copy across file systems) under `name`, beside links to
    the files it loads from its own directory; the kernel names the process `name`."""
    require_tool("chromium")
    directory.mkdir()
    for entry in CHROMIUM_BINARY.parent.iterdir():
        if entry != CHROMIUM_BINARY:
            (directory / entry.name).symlink_to(entry)
    program = directory / name
    try:
        os.link(CHROMIUM_BINARY, program)
    except OSError:
        shutil.copy2(CHROMIUM_BINARY, program)
    return program


def test_a_live_app_built_on_chromium_is_never_called_stale(
    children: Children, tmp_path: Path
) -> None:
    """Its lock is `unknown` while it runs (its name is none lockwarden knows: probably a
    reused PID, but no proof), and stale once it is gone."""
    program = app_named("code", tmp_path / "app")
    profile = tmp_path / "profile"
    app = children.start(
        [str(program), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: (profile / "SingletonLock").is_symlink(), timeout=60)
        running = inspect_lock(profile)
        with open(f"/proc/{app.pid}/comm") as comm:
            assert comm.read().strip() == "code"
    finally:
        kill_group(app)
    gone = inspect_lock(profile)

    assert os.readlink(profile / "SingletonLock").endswith(f"-{app.pid}")
    assert running.state is State.UNKNOWN, running.reason
    assert running.unknown_cause is UnknownCause.PID_REUSE_SUSPECTED
    assert "'code'" in running.reason
    assert gone.state is State.STALE
    assert gone.proof is not None and str(app.pid) in gone.proof


def test_another_host_is_unknown_never_stale(children: Children, tmp_path: Path) -> None:
    (tmp_path / "SingletonLock").symlink_to("some-other-machine-4242")

    finding = inspect_lock(tmp_path / "SingletonLock")

    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.OTHER_HOST


def test_a_target_that_is_not_host_pid_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "SingletonLock").symlink_to("nonsense")

    finding = inspect_lock(tmp_path, "chromium-profile")

    assert finding.state is State.UNKNOWN
    assert finding.unknown_cause is UnknownCause.UNREADABLE_RECORD


def test_profile_without_a_lock_is_free(tmp_path: Path) -> None:
    (tmp_path / "Local State").write_text("{}")

    finding = inspect_lock(tmp_path)

    assert finding.format == "chromium-profile"
    assert finding.state is State.FREE
