"""git's index.lock held by a real `git commit` waiting for its editor.

git records no holder and does not keep the lock open, so a git process working on the
repository is a candidate, never the named holder; the lock is stale only when no git process
can be working on the repository: by its working directory, `-C`, `--git-dir`/`--work-tree`,
or GIT_DIR/GIT_WORK_TREE in its environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest

from conftest import require_tool, run_json, wait_until
from format_helpers import inspect
from lockwarden import config
from lockwarden.formats import git as git_format
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


GIT_ENVIRONMENT = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}


def git_in(directory: Path, *argv: str) -> None:
    """Run git in `directory` (set-up steps: no user's or system's config)."""
    environment = {**os.environ, **GIT_ENVIRONMENT}
    subprocess.run([require_tool("git"), *argv], cwd=directory, check=True, env=environment)


def _ready_to_commit(work_tree: Path, run_in: Path | None = None) -> None:
    """A committer's name in the repository's config (git run in `run_in`, by default the
    work tree), and a change to commit."""
    git_in(run_in or work_tree, "config", "user.email", "test@example.org")
    git_in(run_in or work_tree, "config", "user.name", "Test")
    (work_tree / "file").write_text("two\n")


class Layout(NamedTuple):
    """A repository laid out one of git's ways, with a change to commit: the git directory
    that holds the commit's index.lock, and the work tree."""

    git_directory: Path
    work_tree: Path

    @property
    def lock(self) -> Path:
        return self.git_directory / "index.lock"


def make_separate_git_dir(site: Path) -> Layout:
    """`git init --separate-git-dir`: the work tree's `.git` is a file naming the git
    directory, which names no work tree back."""
    git_directory, work_tree = site / "separate.git", site / "work"
    git_in(site, "init", "-q", f"--separate-git-dir={git_directory}", str(work_tree))
    (work_tree / "file").write_text("one\n")
    git_in(work_tree, "add", "file")
    git_in(work_tree, "-c", "user.email=t@example.org", "-c", "user.name=T", "commit", "-qm", "one")
    _ready_to_commit(work_tree)
    return Layout(git_directory, work_tree)


def make_submodule(site: Path) -> Layout:
    """A submodule: its git directory is `super/.git/modules/sub` (core.worktree names the
    work tree), and `super/sub/.git` is a file naming it by a relative path."""
    upstream = make_repository(site / "upstream")
    superproject = make_repository(site / "super")
    git_in(superproject, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
           str(upstream), "sub")  # fmt: skip
    work_tree = superproject / "sub"
    _ready_to_commit(work_tree)
    return Layout(superproject / ".git/modules/sub", work_tree)


def make_linked_work_tree(site: Path) -> Layout:
    """`git worktree add`: the linked work tree's index.lock is in the main repository's
    `.git/worktrees/NAME`, which its `.git` file names."""
    main = make_repository(site / "main")
    git_in(main, "worktree", "add", "-q", "../linked")
    work_tree = site / "linked"
    _ready_to_commit(work_tree)
    return Layout(main / ".git/worktrees/linked", work_tree)


def make_core_worktree(site: Path) -> Layout:
    """A git directory whose config's core.worktree (relative to it) names the work tree: git
    started in the git directory works in the work tree, and the work tree names nothing."""
    git_directory, work_tree = site / "repo.git", site / "tree"
    git_in(site, "init", "-q", "--bare", str(git_directory))
    git_in(git_directory, "config", "core.bare", "false")
    git_in(git_directory, "config", "core.worktree", "../tree")
    work_tree.mkdir()
    (work_tree / "file").write_text("one\n")
    git_in(git_directory, "add", "file")
    git_in(git_directory, "-c", "user.email=t@example.org", "-c", "user.name=T", "commit", "-qm",
           "one")  # fmt: skip
    _ready_to_commit(work_tree, run_in=git_directory)
    return Layout(git_directory, work_tree)


def start_commit_waiting_for_its_editor(
    children,
    repository: Path,
    options: tuple[str, ...] = (),
    cwd: Path | None = None,
    lock: Path | None = None,
    wrapper: tuple[str, ...] = (),
    **variables: str,
) -> subprocess.Popen[str]:
    """`git [options] commit -a --edit` with an editor that sleeps: git holds index.lock
    meanwhile. `options`, `cwd` and `variables` point git at the repository another way;
    `wrapper` runs before git and execs it (another mount namespace)."""
    environment = {
        **os.environ,
        "GIT_EDITOR": "sleep 120; :",
        **GIT_ENVIRONMENT,
        **variables,
    }
    commit = children.start(
        [*wrapper, require_tool("git"), *options, "commit", "-a", "--edit", "-q"],
        cwd=cwd or repository,
        env=environment,
    )
    lock = lock or repository / ".git/index.lock"
    assert wait_until(lock.exists, timeout=10), commit.stderr
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
    assert finding.holder is None  # a candidate, never the named holder
    assert f"PID {commit.pid} (" in finding.reason
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
    assert "no git/git-* process has its working directory in, or names on its command line" in (
        finding.proof or ""
    )
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
    assert finding["holders"] == []
    assert f"PID {commit.pid} (" in finding["reason"]
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


def make_bare_dotfiles(tmp_path: Path) -> tuple[Path, Path]:
    """A bare "dotfiles" repository whose work tree is a home directory: git finds it only
    through --git-dir/--work-tree or GIT_DIR/GIT_WORK_TREE, never through its cwd."""
    git = require_tool("git")
    home, bare = tmp_path / "home", tmp_path / "home" / ".dotfiles"
    home.mkdir()
    environment = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    pointed = [git, f"--git-dir={bare}", f"--work-tree={home}"]
    subprocess.run([git, "init", "-q", "--bare", str(bare)], check=True, env=environment)
    for argv in (
        ["config", "user.email", "test@example.org"],
        ["config", "user.name", "Test"],
        ["config", "status.showUntrackedFiles", "no"],
    ):
        subprocess.run([*pointed, *argv], check=True, env=environment)
    (home / ".bashrc").write_text("one\n")
    subprocess.run([*pointed, "add", ".bashrc"], check=True, env=environment)
    subprocess.run([*pointed, "commit", "-qm", "one"], check=True, env=environment)
    (home / ".bashrc").write_text("two\n")
    return bare, home


POINTINGS = {
    "options": lambda bare, home: ((f"--git-dir={bare}", f"--work-tree={home}"), {}),
    "separate options": lambda bare, home: (("--git-dir", str(bare), "--work-tree", str(home)), {}),
    "variables": lambda bare, home: ((), {"GIT_DIR": str(bare), "GIT_WORK_TREE": str(home)}),
}


@pytest.mark.parametrize("pointing", sorted(POINTINGS))
def test_a_git_pointed_at_a_bare_repository_from_elsewhere_keeps_its_lock_from_stale(
    children, tmp_path, pointing
):
    bare, home = make_bare_dotfiles(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    options, variables = POINTINGS[pointing](bare, home)
    lock = bare / "index.lock"
    commit = start_commit_waiting_for_its_editor(
        children, home, options, cwd=elsewhere, lock=lock, **variables
    )
    # An hour on (past stale_after): only the running commit keeps the lock from stale.
    finding = inspect(str(lock), "git", later=HOUR)

    assert finding.state is State.HELD_TOO_LONG, finding.reason  # past its 15m budget
    assert finding.holder is None and f"PID {commit.pid} (" in finding.reason
    assert finding.action is None  # nothing proves which process to stop


def test_git_dash_c_from_elsewhere_keeps_its_lock_from_stale(children, tmp_path):
    repository = make_repository(tmp_path / "repo")
    commit = start_commit_waiting_for_its_editor(children, repository, ("-C", "repo"), cwd=tmp_path)
    lock = repository / ".git/index.lock"
    finding = inspect(str(lock), "git", later=HOUR)
    assert finding.state is State.HELD_TOO_LONG, finding.reason
    assert f"PID {commit.pid} (" in finding.reason


def test_a_reader_beside_a_committer_is_a_candidate_never_the_holder(children, tmp_path):
    """`git cat-file --batch` works in the repository but takes no lock: it is never named, and
    never given `kill`, even once the committer is killed and the lock is past its budget."""
    repository = make_repository(tmp_path / "repo")
    reader = children.start([require_tool("git"), "cat-file", "--batch"], cwd=repository,
                            stdin=subprocess.PIPE)  # fmt: skip
    commit = start_commit_waiting_for_its_editor(children, repository)
    lock = repository / ".git/index.lock"

    both = inspect(str(lock), "git")
    assert both.state is State.HELD and both.holder is None, both.reason
    assert f"PID {commit.pid} (" in both.reason and f"PID {reader.pid} (" in both.reason

    commit.kill()
    commit.wait(timeout=5)
    late = inspect(str(lock), "git", later=2 * HOUR, warn_after=60, critical_after=120)
    assert late.holder is None and late.state is not State.STALE, late.reason
    assert late.action is None or str(reader.pid) not in late.action


def test_a_live_lock_pointed_at_from_elsewhere_is_never_removed(children, tmp_path):
    """remove_stale with the shortest stale_confirm: two runs past stale_after leave the live
    lock of a commit that works through --git-dir where it is."""
    bare, home = make_bare_dotfiles(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock = bare / "index.lock"
    start_commit_waiting_for_its_editor(
        children, home, (f"--git-dir={bare}", f"--work-tree={home}"), cwd=elsewhere, lock=lock
    )
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[lock]]\nname = "dotfiles"\npath = "{lock}"\nformat = "git"\n'
        f'stale_after = "1m"\nremove_stale = true\nstale_confirm = "1s"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
    )
    hour_on = datetime.now(UTC) + timedelta(hours=1)
    for run in range(2):  # two runs an hour on, past stale_after and stale_confirm apart
        moment = (hour_on + timedelta(seconds=5 * run)).strftime("%Y-%m-%dT%H:%M:%SZ")
        _code, document = run_json("--once", "--now", moment, "--config", str(config))
        [finding] = document["locks"]
        assert finding["state"] == "held_too_long", finding["reason"]
        assert finding["holders"] == [] and finding["action"] is None
    assert lock.exists()


LAYOUTS = {
    "separate git directory": make_separate_git_dir,
    "submodule": make_submodule,
    "core.worktree": make_core_worktree,
}


def runs_removing_stale(lock: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Two real `--once` runs with remove_stale and the shortest stale_after and stale_confirm,
    past stale_after and stale_confirm apart: each run's finding."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[lock]]\nname = "repository"\npath = "{lock}"\nformat = "git"\n'
        f'stale_after = "5s"\nremove_stale = true\nstale_confirm = "5s"\n'
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
    )
    later = datetime.now(UTC) + timedelta(minutes=20)
    findings = []
    for run in range(2):
        moment = (later + timedelta(minutes=run)).strftime("%Y-%m-%dT%H:%M:%SZ")
        _code, document = run_json("--once", "--now", moment, "--config", str(config))
        [finding] = document["locks"]
        findings.append(finding)
    return findings


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_live_lock_whose_work_tree_is_elsewhere_is_never_removed(children, tmp_path, layout):
    """remove_stale with the shortest stale_confirm: two runs past stale_after leave the
    index.lock of a commit waiting for its editor, started where a person starts it (its work
    tree; the git directory for core.worktree), where the git directory is not the work tree's
    `.git` directory."""
    repository = LAYOUTS[layout](tmp_path)
    start_in = repository.git_directory if layout == "core.worktree" else repository.work_tree
    commit = start_commit_waiting_for_its_editor(
        children, repository.work_tree, cwd=start_in, lock=repository.lock
    )
    for finding in runs_removing_stale(repository.lock, tmp_path):
        assert finding["state"] == "held_too_long", finding["reason"]
        assert f"PID {commit.pid} (" in finding["reason"]
        assert finding["reason"].count("cannot name") == 1, finding["reason"]  # said once
        assert finding["holders"] == [] and finding["action"] is None
    assert repository.lock.exists()
    assert commit.poll() is None


def test_a_live_lock_whose_work_tree_was_deleted_under_its_git_is_never_removed(children, tmp_path):
    """A linked work tree removed (`rm -rf`) while a commit there waits for its editor: the
    git still runs and holds the index.lock in `.git/worktrees/NAME`, though its working
    directory is now an unlinked one. Two runs past stale_after, with remove_stale and the
    shortest stale_confirm, may not call the live lock stale nor remove it."""
    repository = make_linked_work_tree(tmp_path)
    commit = start_commit_waiting_for_its_editor(
        children, repository.work_tree, lock=repository.lock
    )
    shutil.rmtree(repository.work_tree)
    for finding in runs_removing_stale(repository.lock, tmp_path):
        assert finding["state"] != "stale", finding["proof"]
    assert repository.lock.exists()
    assert commit.poll() is None


def test_a_push_s_receive_pack_keeps_the_ref_lock_it_holds_from_stale(children, tmp_path):
    """A push's `git-receive-pack` (the kernel names it git-receive-pac) holds the pushed ref's
    lock in the repository it serves while the reference-transaction hook runs; the pushing
    `git push origin` names no path. It is a candidate, and the lock is never stale."""
    served = tmp_path / "served.git"
    git_in(tmp_path, "init", "-q", "--bare", str(served))
    hook = served / "hooks/reference-transaction"
    hook.write_text('#!/bin/sh\n[ "$1" = prepared ] && sleep 120\nexit 0\n')
    hook.chmod(0o755)
    client = make_repository(tmp_path / "client")
    git_in(client, "remote", "add", "origin", str(served))
    push = children.start(
        [require_tool("git"), "push", "-q", "origin", "HEAD:refs/heads/main"],
        cwd=client,
        env={**os.environ, **GIT_ENVIRONMENT},
    )
    lock = served / "refs/heads/main.lock"
    assert wait_until(lock.exists, timeout=10), push.stderr
    receivers = []
    for helper in psutil.Process(push.pid).children(recursive=True):
        children.track(helper.pid)
        if helper.name().startswith("git-receive"):
            receivers.append(helper.pid)
    assert len(receivers) == 1

    finding = inspect(str(lock), "git", later=HOUR)

    assert finding.state is State.HELD_TOO_LONG, finding.reason
    assert finding.holder is None and f"PID {receivers[0]} (" in finding.reason


@pytest.mark.parametrize(
    "make", [make_separate_git_dir, make_submodule, make_linked_work_tree], ids=lambda f: f.__name__
)
def test_inspect_of_a_work_tree_whose_git_is_a_file_reads_the_lock_it_names(
    children, tmp_path, make
):
    """A work tree whose `.git` is a file (`gitdir: PATH`) is inspected by the index.lock of
    the git directory it names, not by a `.git/index.lock` that cannot be there."""
    repository = make(tmp_path)
    commit = start_commit_waiting_for_its_editor(
        children, repository.work_tree, lock=repository.lock
    )

    code, document = run_json("inspect", str(repository.work_tree))

    [finding] = document["locks"]
    assert (finding["format"], finding["path"]) == ("git", str(repository.lock))
    assert finding["state"] == "held" and f"PID {commit.pid} (" in finding["reason"]
    assert code == 0


def test_a_git_that_cannot_be_followed_leaves_the_lock_unknown_never_stale(children, tmp_path):
    """A git process outside the repository's directories may still reach it through a `.git`
    file above where it works; one there that cannot be read (here a FIFO, which git itself
    passes over) leaves the way unknown, and so the lock, however old."""
    repository = make_repository(tmp_path / "repo")
    lock = repository / ".git/index.lock"
    lock.write_text("")
    backdate(lock, HOUR)
    odd = tmp_path / "odd"
    (odd / "below").mkdir(parents=True)
    os.mkfifo(odd / ".git")
    children.start([require_tool("git"), "hash-object", "--stdin"], cwd=odd / "below",
                   stdin=subprocess.PIPE)  # fmt: skip

    finding = inspect(str(lock), "git")

    assert finding.state is State.UNKNOWN, finding.reason
    assert "1 such process could not be followed to where it works" in finding.reason
    assert finding.action is None or not finding.action.startswith("rm")


@pytest.mark.parametrize(
    "value",
    [
        "../tree",
        "/srv/work tree",
        "../a#b;c",
        'quo"ted',
        "back\\slash",
        " padded ",
        "\tWorkTree = ../by   hand  # why",
        '\tworktree=" ../by hand";',
    ],
)
def test_core_worktree_is_read_as_git_writes_and_reads_it(tmp_path, value):
    """The config file as real `git config` writes it (quoting and escaping what needs it), or
    a line as a person writes it, read back the way `git config --get` reads it; a hand-written
    section header and comment beside it change nothing."""
    config = make_repository(tmp_path / "repo") / ".git/config"
    by_hand = value.startswith("\t")
    if by_hand:
        config.write_text(config.read_text() + f"[Core]{value}\n")
    else:
        git_in(tmp_path, "config", "--file", str(config), "core.worktree", value)
    config.write_text(config.read_text() + "[CORE] ; a comment\n\tbare = false # another\n")
    read = subprocess.run(
        [require_tool("git"), "config", "--file", str(config), "--get", "core.worktree"],
        env={**os.environ, **GIT_ENVIRONMENT},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.removesuffix("\n")

    assert git_format.core_worktree_values(config.read_text()) == [read]
    assert by_hand or read == value
