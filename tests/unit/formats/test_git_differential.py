"""A randomized differential for git's lock files: real `git commit`s on repositories laid
out git's ways (a plain `.git`, a separate git directory, a submodule, a linked work tree, a
git directory whose core.worktree names its work tree, a bare "dotfiles" repository), started
from a random place (the work tree's top or a subdirectory, the git directory, elsewhere),
pointed at the repository in a random way (working directory, `-C`, `--git-dir`/`--work-tree`,
GIT_DIR/GIT_WORK_TREE, GIT_DIR alone) through a random path to it (its own, a symlink, a bind
mount, a bind mount only git's own mount namespace has), beside random bystanders (a reader in
the same repository, a commit in another repository, a plain process working there, a git
pointed elsewhere), the committer alive or killed. lockwarden is given the lock by its own path
or, where one is there, another. The test knows which processes could be writing the lock;
lockwarden, judging an hour on (past stale_after and the budgets), must

* never call the lock stale (nor offer `rm`) while a git process that could hold it runs,
* call it stale once none does,
* never name a holder nor offer `kill` (git records none), and list no bystander as a candidate.

The seed is in the test id: a failure replays with `-k SEED`.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
from test_git import (
    Layout,
    make_bare_dotfiles,
    make_core_worktree,
    make_linked_work_tree,
    make_repository,
    make_separate_git_dir,
    make_submodule,
    start_commit_waiting_for_its_editor,
)

from conftest import Children, require_tool, wait_until
from format_helpers import inspect
from lockwarden.model import State

HOUR = 3600
SEEDS = range(48)
BYSTANDERS = ("reader", "other-repository", "plain-process", "git-elsewhere")
# Where git may start from, in each layout: its work tree (a `.git` there finds the
# repository), the git directory itself (core.worktree sends it on to the work tree), or only
# pointed at it from elsewhere (the bare repository).
FOUND_FROM_WORK_TREE = ("plain", "separate", "submodule", "linked")


def _plain(site: Path) -> Layout:
    repository = make_repository(site / "repo")
    return Layout(repository / ".git", repository)


def _dotfiles(site: Path) -> Layout:
    bare, home = make_bare_dotfiles(site)
    return Layout(bare, home)


LAYOUTS: dict[str, Callable[[Path], Layout]] = {
    "plain": _plain,
    "separate": make_separate_git_dir,
    "submodule": make_submodule,
    "linked": make_linked_work_tree,
    "core-worktree": make_core_worktree,
    "dotfiles": _dotfiles,
}
THROUGH = ("own path", "symlink", "bind mount", "git's own mount namespace")


class Placed(NamedTuple):
    """A layout's repository, and the directory it was made in."""

    layout: Layout
    site: Path

    @property
    def git_directory(self) -> Path:
        return self.layout.git_directory

    @property
    def work_tree(self) -> Path:
        return self.layout.work_tree

    @property
    def lock(self) -> Path:
        return self.layout.lock


class Pointed(NamedTuple):
    """How git is pointed at the repository: options, working directory, variables."""

    options: tuple[str, ...]
    cwd: Path
    variables: dict[str, str]


def pointings(layout: str) -> list[str]:
    """The ways git can reach a repository of this layout."""
    ways = ["variables", "options"]
    if layout in FOUND_FROM_WORK_TREE:
        ways += ["cwd", "subdirectory", "dash-c"]
    if layout == "core-worktree":
        ways += ["git-directory"]
    if layout != "dotfiles":  # GIT_DIR alone: the working directory is the work tree
        ways += ["git-dir-only"]
    return ways


def pointed_at(
    rng: random.Random, pointing: str, repository: Placed, seen: Callable[[Path], Path]
) -> Pointed:
    """How `pointing` reaches the repository (from ../elsewhere when it is pointed at it), with
    every path written as `seen` turns it."""
    git_directory, work_tree = seen(repository.git_directory), seen(repository.work_tree)
    elsewhere = seen(repository.site / "elsewhere")
    start = work_tree / "dir" if rng.random() < 0.5 else work_tree
    if pointing == "cwd":
        return Pointed((), work_tree, {})
    if pointing == "subdirectory":
        return Pointed((), work_tree / "dir", {})
    if pointing == "dash-c":
        return Pointed(("-C", str(start)), elsewhere, {})
    if pointing == "git-directory":
        return Pointed((), git_directory, {})
    if pointing == "git-dir-only":
        return Pointed((), work_tree, {"GIT_DIR": str(git_directory)})
    if pointing == "options":
        return Pointed((f"--git-dir={git_directory}", f"--work-tree={work_tree}"), elsewhere, {})
    variables = {"GIT_DIR": str(git_directory), "GIT_WORK_TREE": str(work_tree)}
    return Pointed((), elsewhere, variables)


@contextmanager
def reached_through(through: str, site: Path, alias: Path) -> Iterator[tuple[str, ...]]:
    """`alias` made another path to `site` (none for its own path, nor for git's own mount
    namespace, where only the wrapper yielded, which git runs under, mounts it)."""
    if through == "symlink":
        alias.symlink_to(site)
    elif through != "own path":
        alias.mkdir()
    if through != "bind mount":
        yield _own_namespace(site, alias) if through == "git's own mount namespace" else ()
        return
    subprocess.run([require_tool("mount"), "--bind", str(site), str(alias)], check=True)
    try:
        yield ()
    finally:
        # A killed git's helpers may take a moment to exit and let go of the mount.
        unmount = [require_tool("umount"), str(alias)]
        if not wait_until(lambda: subprocess.run(unmount, capture_output=True).returncode == 0):
            subprocess.run(unmount, check=True)


def _own_namespace(site: Path, alias: Path) -> tuple[str, ...]:
    """A wrapper that runs its command in a mount namespace of its own (a container's view)
    where `alias` is a bind mount of `site`, from the directory its third argument names."""
    script = 'mount --bind "$1" "$2" && cd "$3" && shift 3 && exec "$@"'
    return (require_tool("unshare"), "--mount", "sh", "-c", script, "sh", str(site), str(alias))


def start_bystander(
    children: Children,
    tmp_path: Path,
    kind: str,
    work_tree: Path,
    way: Pointed,
    wrapper: tuple[str, ...],
) -> int:
    git = require_tool("git")
    if kind == "reader":  # works on this repository, takes no lock: may hold it, for all we know
        reader = children.start(
            [*_placed(wrapper, way.cwd), git, *way.options, "cat-file", "--batch"],
            cwd=tmp_path if wrapper else way.cwd,
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


def _placed(wrapper: tuple[str, ...], cwd: Path) -> tuple[str, ...]:
    return (*wrapper, str(cwd)) if wrapper else ()


@pytest.mark.parametrize("seed", SEEDS)
def test_git_locks_are_never_stale_while_a_git_could_hold_them_and_never_name_a_holder(
    seed: int, tmp_path: Path, children: Children
) -> None:
    rng = random.Random(seed)
    layout = rng.choice(sorted(LAYOUTS))
    pointing = rng.choice(pointings(layout))
    through = rng.choice(THROUGH)
    bystanders = rng.sample(BYSTANDERS, rng.randint(0, len(BYSTANDERS)))
    committer_alive = rng.random() < 0.5
    lock_by_alias = through in ("symlink", "bind mount") and rng.random() < 0.5
    site, alias = tmp_path / "site", tmp_path / "alias"
    site.mkdir()
    (site / "elsewhere").mkdir()
    repository = Placed(LAYOUTS[layout](site), site)
    (repository.work_tree / "dir").mkdir()
    scenario = (
        f"seed {seed}: {layout}, {pointing} through {through}, lock by alias {lock_by_alias}, "
        f"bystanders {bystanders}, committer alive {committer_alive}"
    )

    def seen(path: Path) -> Path:
        return path if through == "own path" else alias / path.relative_to(site)

    with reached_through(through, site, alias) as wrapper:
        try:
            way = pointed_at(rng, pointing, repository, seen)
            commit = start_commit_waiting_for_its_editor(
                children,
                repository.work_tree,
                way.options,
                cwd=tmp_path if wrapper else way.cwd,
                lock=repository.lock,
                wrapper=_placed(wrapper, way.cwd),
                **way.variables,
            )
            started = {
                kind: start_bystander(children, tmp_path, kind, repository.work_tree, way, wrapper)
                for kind in bystanders
            }
            if not committer_alive:
                commit.kill()
                commit.wait(timeout=5)
            could_hold = ({commit.pid} if committer_alive else set()) | (
                {started["reader"]} if "reader" in started else set()
            )
            innocent = {pid for kind, pid in started.items() if kind != "reader"}
            lock = seen(repository.lock) if lock_by_alias else repository.lock

            finding = inspect(str(lock), "git", later=HOUR)
        finally:
            children.cleanup()  # nothing may work in the bind mount when it is unmounted

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
