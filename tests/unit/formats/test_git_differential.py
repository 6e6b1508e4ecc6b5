"""A randomized differential for git's lock files: real `git commit`s pointed at real
repositories in random ways (working directory, `-C`, `--git-dir`/`--work-tree`,
GIT_DIR/GIT_WORK_TREE), beside random bystanders (a reader in the same repository, a commit in
another repository, a plain process working there, a git pointed elsewhere), the committer
alive or killed. The test knows which processes could be writing the lock; lockwarden, judging
an hour on (past stale_after and the budgets), must

* never call the lock stale (nor offer `rm`) while a git process that could hold it runs,
* call it stale once none does,
* never name a holder nor offer `kill` (git records none), and list no bystander as a candidate.

The seed is in the test id: a failure replays with `-k SEED`.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from test_git import make_bare_dotfiles, make_repository, start_commit_waiting_for_its_editor

from conftest import Children, require_tool
from format_helpers import inspect
from lockwarden.model import State

HOUR = 3600
SEEDS = range(24)
POINTINGS = ("cwd", "dash-c", "variables-normal", "bare-options", "bare-variables")
BYSTANDERS = ("reader", "other-repository", "plain-process", "git-elsewhere")


class Pointed(NamedTuple):
    """How git is pointed at the repository: options, working directory, variables."""

    options: tuple[str, ...]
    cwd: Path
    variables: dict[str, str]


def pointed_at(tmp_path: Path, pointing: str) -> tuple[Pointed, Path, Path]:
    """A repository, how `pointing` reaches it, its lock file and its work tree."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if pointing.startswith("bare"):
        bare, home = make_bare_dotfiles(tmp_path)
        if pointing == "bare-options":
            way = Pointed((f"--git-dir={bare}", f"--work-tree={home}"), elsewhere, {})
        else:
            way = Pointed((), elsewhere, {"GIT_DIR": str(bare), "GIT_WORK_TREE": str(home)})
        return way, bare / "index.lock", home
    repository = make_repository(tmp_path / "repo")
    lock = repository / ".git/index.lock"
    if pointing == "cwd":
        return Pointed((), repository, {}), lock, repository
    if pointing == "dash-c":
        return Pointed(("-C", str(repository)), elsewhere, {}), lock, repository
    variables = {"GIT_DIR": str(repository / ".git"), "GIT_WORK_TREE": str(repository)}
    return Pointed((), elsewhere, variables), lock, repository


def start_bystander(
    children: Children, tmp_path: Path, kind: str, work_tree: Path, way: Pointed
) -> int:
    git = require_tool("git")
    if kind == "reader":  # works on this repository, takes no lock: may hold it, for all we know
        reader = children.start(
            [git, *way.options, "cat-file", "--batch"],
            cwd=way.cwd,
            env={**os.environ, **way.variables},
            stdin=subprocess.PIPE,
        )
        return reader.pid
    if kind == "other-repository":
        other = make_repository(tmp_path / "other")
        return start_commit_waiting_for_its_editor(children, other).pid
    if kind == "plain-process":
        return children.start(["sleep", "120"], cwd=work_tree).pid
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()
    return children.start([git, "-C", str(unrelated), "hash-object", "--stdin"],
                          stdin=subprocess.PIPE).pid  # fmt: skip


@pytest.mark.parametrize("seed", SEEDS)
def test_git_locks_are_never_stale_while_a_git_could_hold_them_and_never_name_a_holder(
    seed: int, tmp_path: Path, children: Children
) -> None:
    rng = random.Random(seed)
    pointing = rng.choice(POINTINGS)
    bystanders = rng.sample(BYSTANDERS, rng.randint(0, len(BYSTANDERS)))
    committer_alive = rng.random() < 0.5
    way, lock, work_tree = pointed_at(tmp_path, pointing)
    commit = start_commit_waiting_for_its_editor(
        children, work_tree, way.options, cwd=way.cwd, lock=lock, **way.variables
    )
    started = {
        kind: start_bystander(children, tmp_path, kind, work_tree, way) for kind in bystanders
    }
    if not committer_alive:
        commit.kill()
        commit.wait(timeout=5)
    could_hold = ({commit.pid} if committer_alive else set()) | (
        {started["reader"]} if "reader" in started else set()
    )
    innocent = {pid for kind, pid in started.items() if kind != "reader"}

    finding = inspect(str(lock), "git", later=HOUR)

    scenario = f"{pointing}, bystanders {bystanders}, committer alive {committer_alive}"
    assert finding.holder is None, scenario
    assert not (finding.action or "").startswith("kill"), scenario
    for pid in innocent:
        assert f"PID {pid} (" not in finding.reason, f"{scenario}: {finding.reason}"
    if could_hold:
        assert finding.state is State.HELD_TOO_LONG, f"{scenario}: {finding.reason}"
        for pid in could_hold:
            assert f"PID {pid} (" in finding.reason, f"{scenario}: {finding.reason}"
    else:
        assert finding.state is State.STALE, f"{scenario}: {finding.reason}"
        assert finding.action == f"rm -- {lock}"
