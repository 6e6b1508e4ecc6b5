"""firefox-profile: Debian's real `firefox-esr --headless` holding its profile, then killed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import require_tool, run_json, wait_until, write_config
from lockcheck import kill_group


def parent_lock_held(profile: Path) -> bool:
    """The kernel lists a lock on .parentlock (the browser has finished taking the profile)."""
    try:
        inode = (profile / ".parentlock").stat().st_ino
    except FileNotFoundError:
        return False
    lines = Path("/proc/locks").read_text().splitlines()
    return any(line.split()[-3].endswith(f":{inode}") for line in lines if "->" not in line)


def test_a_running_firefox_holds_its_profile_and_a_killed_one_leaves_it_stale(
    tmp_path: Path,
) -> None:
    firefox = require_tool("firefox-esr")
    profile = tmp_path / "profile"
    profile.mkdir()
    browser = subprocess.Popen(
        [firefox, "--headless", "--no-remote", "--profile", str(profile), "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1"},
        start_new_session=True,
    )
    try:
        assert wait_until(
            lambda: os.path.islink(profile / "lock") and parent_lock_held(profile), timeout=90
        )
        assert os.readlink(profile / "lock").endswith(f":+{browser.pid}")

        code, document = run_json("inspect", str(profile))
        [held] = document["locks"]
        assert (code, held["format"], held["state"]) == (0, "firefox-profile", "held")
        [holder] = held["holders"]
        assert holder["pid"] == browser.pid
        assert holder["name"] == "firefox-esr" and "--headless" in holder["cmdline"]
        assert holder["lock"]["kind"] == "POSIX"
        assert held["action"] is None  # a running browser within its budget: nothing to do

        os.kill(browser.pid, signal.SIGKILL)
        browser.wait(timeout=10)
        assert wait_until(lambda: not parent_lock_held(profile))
        assert os.path.islink(profile / "lock")  # left behind: "Firefox is already running"

        code, document = run_json("inspect", str(profile))
        [stale] = document["locks"]
        assert (code, stale["state"]) == (2, "stale")
        assert f"PID {browser.pid} is not running on this host" in stale["proof"]
        assert stale["action"]["argv"] == ["rm", "-f", "--", str(profile / "lock")]

        # remove_stale takes the leftover away, as its action says, after two sightings
        config = write_config(
            tmp_path / "config.toml",
            f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
            f'[[lock]]\nname = "profile"\npath = "{profile}"\nformat = "firefox-profile"\n'
            'remove_stale = true\nstale_confirm = "1s"\n',
        )
        _code, first = run_json("--once", "--config", config)
        status = first["locks"][0]["removal_status"]
        assert status is not None and status["step"] == "seen_once", first["locks"][0]
        time.sleep(1.2)
        _code, second = run_json("--once", "--config", config)
        status = second["locks"][0]["removal_status"]
        assert status is not None and status["step"] == "removed", second["locks"][0]
        assert not os.path.lexists(profile / "lock")
        assert (profile / ".parentlock").exists()  # the browser's own file stays
    finally:
        kill_group(browser)  # type: ignore[arg-type]


def test_a_profile_locked_on_another_host_is_unknown(tmp_path: Path) -> None:
    profile = tmp_path / "shared-home-profile"
    profile.mkdir()
    (profile / ".parentlock").touch()
    (profile / "lock").symlink_to("192.0.2.7:+4242")  # TEST-NET-1: never this host
    code, document = run_json("inspect", str(profile))
    [finding] = document["locks"]
    assert (code, finding["format"], finding["state"]) == (3, "firefox-profile", "unknown")
    assert finding["unknown_cause"] == "other_host"
    assert "'192.0.2.7', not on this host" in finding["reason"]


def test_a_cleanly_closed_profile_is_free(tmp_path: Path) -> None:
    """A clean exit removes the symlink and leaves an unlocked .parentlock."""
    profile = tmp_path / "closed"
    profile.mkdir()
    (profile / ".parentlock").touch()
    code, document = run_json("inspect", str(profile))
    [finding] = document["locks"]
    assert (code, finding["format"], finding["state"]) == (0, "firefox-profile", "free")


def test_a_pid_reused_by_another_program_with_no_kernel_lock_is_stale(tmp_path: Path) -> None:
    """A killed Firefox's symlink names a PID now running `sleep`, and nothing holds
    `.parentlock`: a Firefox of any name would hold it, so the profile is stale (unlike a
    Chromium profile's, which has no kernel lock to tell)."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        profile = tmp_path / "profile"
        profile.mkdir()
        (profile / ".parentlock").touch()
        (profile / "lock").symlink_to(f"127.0.0.1:+{sleeper.pid}")
        code, document = run_json("inspect", str(profile))
    finally:
        sleeper.kill()
        sleeper.wait()
    [finding] = document["locks"]
    assert (code, finding["state"]) == (2, "stale"), finding
    assert f"PID {sleeper.pid} runs 'sleep'" in finding["proof"]
