"""git's index.lock held by a real `git commit` waiting for its editor."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from format_helpers import inspect

from conftest import require_tool, run_json, wait_until
from lockwarden import config
from lockwarden.model import State, UnknownCause

HOUR = 3600


def make_repository(path: Path) -> Path:
    git = require_tool("git")
    path.mkdir()
    environment = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    for argv in (
        ["init", "-q"],
        ["config", "user.email", "test@example.org"],
        ["config", "user.name", "Test"],
    ):
        subprocess.run([git, *argv], cwd=path, check=True, env=environment)
    (path / "file").write_text("one\n")
    subprocess.run([git, "add", "file"], cwd=path, check=True, env=environment)
    subprocess.run([git, "commit", "-qm", "one"], cwd=path, check=True, env=environment)
    (path / "file").write_text("two\n")
    return path


def start_commit_waiting_for_its_editor(children, repository: Path) -> subprocess.Popen[str]:
    """`git commit -a --edit` with an editor that sleeps: git holds index.lock meanwhile."""
    environment = {
        **os.environ,
        "GIT_EDITOR": "sleep 120; :",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_SYSTEM": "/dev/null",
    }
    commit = children.start(
        [require_tool("git"), "commit", "-a", "--edit", "-q"], cwd=repository, env=environment
    )
    assert wait_until(lambda: (repository / ".git/index.lock").exists(), timeout=10)
    assert wait_until(lambda: _editor_started(commit.pid), timeout=10)
    for helper in psutil.Process(commit.pid).children(recursive=True):
        children.track(helper.pid)  # the editor's shell and sleep, killed at teardown too
    return commit


def _editor_started(pid: int) -> bool:
    return any(child.name() == "sleep" for child in psutil.Process(pid).children(recursive=True))


def backdate(path: Path, seconds: float) -> None:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))


def test_git_commit_holds_index_lock_then_leaves_it_stale_when_killed(children, tmp_path):
    repository = make_repository(tmp_path / "repo")
    commit = start_commit_waiting_for_its_editor(children, repository)
    lock = repository / ".git/index.lock"

    finding = inspect(str(lock), "git")
    assert finding.state is State.HELD, finding.reason
    assert finding.holder is not None and finding.holder.pid == commit.pid
    assert finding.action is None  # held within its budget: nothing to do yet

    commit.kill()
    commit.wait(timeout=5)
    assert lock.exists(), "a killed git leaves index.lock behind"
    young = inspect(str(lock), "git")
    assert young.state is State.UNKNOWN, young.reason
    assert young.unknown_cause is UnknownCause.UNPROVEN  # younger than stale_after

    backdate(lock, HOUR)
    finding = inspect(str(lock), "git")
    assert finding.state is State.STALE, finding.reason
    assert "no git process has its working directory in" in (finding.proof or "")
    assert finding.action == f"rm -- {lock}"


def test_stale_after_is_the_lock_s_own_threshold(tmp_path):
    repository = make_repository(tmp_path / "repo")
    lock = repository / ".git/index.lock"
    lock.write_text("")
    backdate(lock, 5 * 60)
    assert inspect(str(lock), "git", stale_after=HOUR).state is State.UNKNOWN
    assert inspect(str(lock), "git", stale_after=60).state is State.STALE


def test_a_process_in_the_repository_that_is_not_git_does_not_hold_it(children, tmp_path):
    repository = make_repository(tmp_path / "repo")
    lock = repository / ".git/index.lock"
    lock.write_text("")
    backdate(lock, HOUR)
    bystander = children.start(["sleep", "120"], cwd=repository)

    finding = inspect(str(lock), "git")

    assert finding.holder is None or finding.holder.pid != bystander.pid
    assert finding.state is State.STALE


def test_git_in_another_repository_does_not_hold_this_one(children, tmp_path):
    repository = make_repository(tmp_path / "repo")
    other = make_repository(tmp_path / "other")
    start_commit_waiting_for_its_editor(children, other)
    lock = repository / ".git/index.lock"
    lock.write_text("")
    backdate(lock, HOUR)
    assert inspect(str(lock), "git").state is State.STALE


def test_auto_picks_git_for_the_work_tree_and_for_other_lock_files(children, tmp_path):
    repository = make_repository(tmp_path / "repo")
    commit = start_commit_waiting_for_its_editor(children, repository)

    code, document = run_json("inspect", str(repository))
    finding = document["locks"][0]
    assert finding["format"] == "git"
    assert finding["path"] == str(repository / ".git/index.lock")
    assert finding["holders"][0]["pid"] == commit.pid
    assert code == 0

    ref_lock = repository / ".git/refs/heads/main.lock"
    ref_lock.write_text("")
    assert inspect(str(ref_lock)).format == "git"


def test_stale_after_is_a_per_lock_config_key_with_a_default():
    document = {
        "lock": [
            {"name": "repo", "path": "/srv/repo", "format": "git", "stale_after": "30m"},
            {"name": "other", "path": "/srv/other", "format": "git"},
        ]
    }
    locks = config.parse(document, "test.toml").locks
    assert [lock.stale_after for lock in locks] == [1800.0, 600.0]
    with pytest.raises(config.ConfigError, match=r"lock\[1\]\.stale_after"):
        config.parse({"lock": [{**document["lock"][0], "stale_after": "soon"}]}, "test.toml")


def test_a_store_directory_that_is_also_a_work_tree_is_read_as_a_store(tmp_path):
    store = make_repository(tmp_path / "store")
    (store / "LOCK").write_text('{"pid": 1}')
    finding = inspect(str(store))
    assert finding.path == str(store / "LOCK")
    assert finding.format == "owner-record"  # not git
