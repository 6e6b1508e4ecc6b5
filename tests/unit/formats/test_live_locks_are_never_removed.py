"""`remove_stale = true` with the shortest `stale_confirm` and `stale_after`: a live lock of every
format removal may touch, held by its real program, is never called stale and never removed.

Each case starts the format's own program (or, where the format is a library's, that library)
holding its lock, runs the real `lockwarden --once` several times past both thresholds, and
checks the lock is where its holder left it and the holder still runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_chromium import CHROMIUM_FLAGS, app_named
from test_emacs import edit_in_emacs
from test_filelock_soft import hold_soft_lock
from test_git import make_bare_dotfiles, start_commit_waiting_for_its_editor
from test_mercurial import HG_ENV, hold_locks
from test_pacman import private_pacman
from test_terraform import hold_state

from conftest import MKDIR_HOLDER, Children, require_tool, run_json, wait_until, write_config
from lockwarden.formats import FORMATS

PIDFILE_HOLDER = """
import os, sys, time
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()}\\n")
print("ready", flush=True)
time.sleep(120)
"""

Started = tuple[Path, subprocess.Popen[str]]


def owner_record(children: Children, tmp_path: Path) -> Started:
    lock = tmp_path / "store" / "LOCK"
    lock.parent.mkdir()
    now = datetime.now(UTC).isoformat()
    return lock, children.python(MKDIR_HOLDER, str(lock), "maintenance-job", now)


def pidfile(children: Children, tmp_path: Path) -> Started:
    lock = tmp_path / "job.pid"
    return lock, children.python(PIDFILE_HOLDER, str(lock))


def filelock_soft(children: Children, tmp_path: Path) -> Started:
    lock = tmp_path / "data.lock"
    return lock, hold_soft_lock(children, lock, None)


def chromium_profile(children: Children, tmp_path: Path) -> Started:
    profile = tmp_path / "profile"
    browser = children.start(
        [require_tool("chromium"), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert wait_until(lambda: (profile / "SingletonLock").is_symlink(), timeout=60)
    return profile, browser


def electron_app(children: Children, tmp_path: Path) -> Started:
    """A Chromium profile's lock made by a program of another name, as every Electron app's is."""
    profile = tmp_path / "profile"
    app = children.start(
        [str(app_named("code", tmp_path / "app")), *CHROMIUM_FLAGS,
         f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    assert wait_until(lambda: (profile / "SingletonLock").is_symlink(), timeout=60)
    return profile, app


def firefox_profile(children: Children, tmp_path: Path) -> Started:
    profile = tmp_path / "profile"
    profile.mkdir()
    browser = children.start(
        [require_tool("firefox-esr"), "--headless", "--no-remote", "--profile", str(profile)],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1"},
        start_new_session=True,
    )
    assert wait_until(lambda: (profile / "lock").is_symlink(), timeout=90)
    return profile, browser


def mercurial(children: Children, tmp_path: Path) -> Started:
    repository = tmp_path / "repo"
    subprocess.run([require_tool("hg"), "init", str(repository)], check=True, env=HG_ENV)
    return repository / ".hg" / "wlock", hold_locks(children, repository)


def emacs(children: Children, tmp_path: Path) -> Started:
    edited = tmp_path / "notes.txt"
    edited.write_text("notes\n")
    return tmp_path / ".#notes.txt", edit_in_emacs(children, edited)


def git(children: Children, tmp_path: Path) -> Started:
    """The case that once lost data: a bare repository committed to through --git-dir."""
    bare, home = make_bare_dotfiles(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock = bare / "index.lock"
    options = (f"--git-dir={bare}", f"--work-tree={home}")
    return lock, start_commit_waiting_for_its_editor(
        children, home, options, cwd=elsewhere, lock=lock
    )


def pacman(children: Children, tmp_path: Path) -> Started:
    argv, lock = private_pacman(tmp_path)
    holder = children.start(argv, stdin=subprocess.PIPE)
    assert wait_until(lock.exists, timeout=10)
    return lock, holder


def terraform(children: Children, tmp_path: Path) -> Started:
    holder, state, _info = hold_state(children, tmp_path, "someone@localhost")
    return state, holder


HOLDERS: dict[str, Callable[[Children, Path], Started]] = {
    "owner-record": owner_record,
    "pidfile": pidfile,
    "filelock-soft": filelock_soft,
    "chromium-profile": chromium_profile,
    "firefox-profile": firefox_profile,
    "mercurial": mercurial,
    "emacs": emacs,
    "git": git,
    "pacman": pacman,
    "terraform": terraform,
}


# More programs that make a format's lock: case name -> (format, how to start it).
VARIANTS: dict[str, tuple[str, Callable[[Children, Path], Started]]] = {
    "chromium-profile:electron-app": ("chromium-profile", electron_app),
}
CASES = {**{name: (name, start) for name, start in HOLDERS.items()}, **VARIANTS}


def test_every_format_removal_may_touch_has_a_live_holder_here() -> None:
    assert set(HOLDERS) == {name for name in FORMATS if FORMATS[name].never_removed is None}
    assert {lock_format for lock_format, _ in VARIANTS.values()} <= set(HOLDERS)


def artefacts(lock: Path, lock_format: str) -> set[str]:
    """What the lock consists of on disk now: a symlink's target, a lock directory's entries,
    a file (a Chromium profile's lock is its SingletonLock, a Firefox one's its `lock`; the
    rest of a profile is the browser's)."""
    if lock_format == "chromium-profile":
        lock = lock / "SingletonLock"
    if lock_format == "firefox-profile":
        lock = lock / "lock"
    if lock.is_symlink():
        return {os.readlink(lock)}
    if lock.is_dir():
        return {str(path.relative_to(lock)) for path in lock.rglob("*")} | {"."}
    return {"."} if lock.exists() else set()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_live_lock_is_never_removed(case: str, children: Children, tmp_path: Path) -> None:
    lock_format, start = CASES[case]
    lock, holder = start(children, tmp_path)
    before = artefacts(lock, lock_format)
    assert before, f"{lock_format}: nothing at {lock}"
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        f'[[lock]]\nname = "live"\npath = "{lock}"\nformat = "{lock_format}"\n'
        'stale_after = "1s"\nremove_stale = true\nstale_confirm = "1s"\n',
    )
    for _run in range(3):  # each past stale_after, each pair past stale_confirm
        time.sleep(1.2)
        _code, document = run_json("--once", "--config", config)
        [finding] = document["locks"]
        assert finding["state"] not in ("stale", "free"), json.dumps(finding, indent=1)
        assert finding.get("removal") is None, finding
    assert holder.poll() is None, f"{lock_format}: the holder died"
    assert artefacts(lock, lock_format) == before, f"{lock_format}: the live lock was changed"
