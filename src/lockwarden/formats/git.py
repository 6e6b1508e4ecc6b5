"""git's lock files: `.git/index.lock` and every other `*.lock` under the git directory
(`HEAD.lock`, `refs/heads/main.lock`, `config.lock`, ...).

git (lockfile.c) creates `X.lock` with O_EXCL, writes the new X into it, and renames it over X
(or deletes it) when done; it does not keep it open, and records nothing in it. So nothing
proves which process holds it: every git process that could be working on the repository is
a candidate, never the named holder (a reader such as `git cat-file --batch` works there too).
A git process (`git`, or git run by a dashed name: a push's `git-receive-pack`) works on a
repository through its working directory (git chdirs to the top of the work tree), `-C DIR`,
`--git-dir=`/`--work-tree=` on its command line, or GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
GIT_COMMON_DIR in its environment (a bare "dotfiles" repository with the home directory as its
work tree). The work trees are the git directory's parent when it is `.git`, each
`core.worktree` of its config (a submodule's `.git/modules/NAME`, or git started inside the git
directory), and its linked work trees (`git worktree add`). A work tree the git directory does
not name (`git init --separate-git-dir`) names it in its own `.git` file (`gitdir: PATH`): a
git process is followed up from where it works, by the directories' identities (a bind mount,
a symlink, another mount namespace reach them by other paths), through such files. While any
candidate runs the lock is held, by a holder lockwarden cannot name; a git process whose
working directory or environment it cannot read, or whose way cannot be followed, leaves it
`unknown`. With none, the file is stale once it is older than the lock's `stale_after`; a
younger one may belong to a git just starting, or to one this host cannot see.
"""

from __future__ import annotations

import os
import stat

from lockwarden.formats.base import STOP_HOLDER, absent, key_of, lstat_or_none, mtime_of, unreadable
from lockwarden.model import Claim, InodeKey, Staleness, StaleProof, Workers
from lockwarden.support.safe_read import UnsafeRecord, list_directory, read_pointer, read_record

NAME = "git"
GIT_DIRECTORY = ".git"
INDEX_LOCK = "index.lock"
# What points a git process at a repository from elsewhere (git(1), ENVIRONMENT VARIABLES);
# paths on its command line (-C, --git-dir=, --work-tree=) are checked as well.
GIT_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")
# `git` itself, and git run by one of its dashed names: a push's `git-receive-pack` (the kernel
# names it git-receive-pac) holds the pushed refs' locks in the repository it serves.
GIT_PROGRAMS = ("git", "git-*")
# A work tree whose git directory is elsewhere (a linked work tree, a submodule, `git init
# --separate-git-dir`) holds a `.git` file naming it.
GIT_FILE = (GIT_DIRECTORY, "gitdir:")
CONFIG_LIMIT = 256 * 1024


def git_directory_of(path: str) -> str | None:
    """The git directory a lock file lies in: the nearest `.git` above it, or a bare
    repository (a directory holding HEAD, objects/ and refs/)."""
    directory = os.path.dirname(os.path.abspath(path))
    while directory != os.path.dirname(directory):
        if os.path.basename(directory) == GIT_DIRECTORY or _is_bare_repository(directory):
            return directory
        directory = os.path.dirname(directory)
    return None


def _is_bare_repository(directory: str) -> bool:
    return all(
        lstat_or_none(os.path.join(directory, name)) is not None
        for name in ("HEAD", "objects", "refs")
    )


def lock_path_for(path: str) -> str:
    """A repository or its `.git` given for its index lock: a work tree's `.git` file is
    followed to the git directory it names."""
    status = lstat_or_none(path)
    if status is None or not stat.S_ISDIR(status.st_mode):
        return path
    if os.path.basename(path.rstrip("/")) != GIT_DIRECTORY:
        git_directory = git_directory_in(path)
        if git_directory is not None:
            return os.path.join(git_directory, INDEX_LOCK)
    return os.path.join(path, INDEX_LOCK)


def git_directory_in(work_tree: str) -> str | None:
    """The git directory of a work tree: its `.git` directory, or the one its `.git` file
    names (relative to the work tree)."""
    dot_git = os.path.join(work_tree, GIT_DIRECTORY)
    if os.path.isdir(dot_git):  # a symlink to a git directory is one too, to git
        return dot_git
    try:
        target = read_pointer(dot_git, GIT_FILE[1])
    except (OSError, UnsafeRecord):
        return None
    return None if target is None else os.path.normpath(os.path.join(work_tree, target))


def work_directories(git_directory: str) -> tuple[str, ...]:
    """Where a git process that may hold the repository's locks works: the git directory,
    the main work tree, and every linked work tree (`worktrees/*/gitdir` names its `.git`)."""
    found = [git_directory]
    if os.path.basename(git_directory) == GIT_DIRECTORY:
        found.append(os.path.dirname(git_directory))
    found.extend(_configured_work_trees(git_directory))
    found.extend(_linked_work_trees(git_directory))
    return tuple(dict.fromkeys(found))


def _configured_work_trees(git_directory: str) -> list[str]:
    """Every `core.worktree` of the repository's config (a submodule's, or one set by hand),
    relative to the git directory: git started in the git directory chdirs there, and nothing
    else names the repository. Each one written is taken, not only the one git would use."""
    trees = []
    for name in ("config", "config.worktree"):
        # a config may be a symlink (a dotfiles manager's): the file it names is read
        path = os.path.realpath(os.path.join(git_directory, name))
        try:
            data, _ = read_record(path, limit=CONFIG_LIMIT)
        except (OSError, UnsafeRecord):
            continue
        for value in core_worktree_values(data.decode("utf-8", errors="replace")):
            trees.append(os.path.normpath(os.path.join(git_directory, value)))
    return trees


def core_worktree_values(text: str) -> list[str]:
    """The values of `worktree` in the `[core]` sections of a git config file (git-config(1):
    names are case-insensitive, a value may be quoted, `#` or `;` starts a comment)."""
    values, section = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section, _, line = line[1:].partition("]")
            section = section.strip().lower()
            line = line.strip()  # `[core] worktree = ...` on one line
        key, equals, value = line.partition("=")
        if section == "core" and equals and key.strip().lower() == "worktree":
            values.append(_config_value(value))
    return [value for value in values if value]


def _config_value(raw: str) -> str:
    """A config value as git reads it (config.c, parse_value): quotes removed, escapes undone,
    a comment cut off, whitespace outside quotes dropped at either end."""
    escapes = {"n": "\n", "t": "\t", "b": "\b"}  # and any other escaped character is itself
    value: list[str] = []
    spaces: list[str] = []  # outside quotes: kept only once a word follows
    quoted = escaped = False
    for character in raw:
        if escaped:
            value.append(escapes.get(character, character))
            escaped = False
            continue
        if character.isspace() and not quoted:
            spaces.append(character if value else "")
            continue
        if character in "#;" and not quoted:
            break
        value.extend(spaces)
        spaces.clear()
        if character == "\\":
            escaped = True
        elif character == '"':
            quoted = not quoted
        else:
            value.append(character)
    return "".join(value)


def identities_of(directories: tuple[str, ...]) -> tuple[InodeKey, ...]:
    """The identity of each directory that is there (a removed work tree is not)."""
    found = []
    for directory in directories:
        try:
            found.append(key_of(os.stat(directory)))
        except OSError:
            continue
    return tuple(dict.fromkeys(found))


def _linked_work_trees(git_directory: str) -> list[str]:
    common = git_directory
    if os.path.basename(os.path.dirname(git_directory)) == "worktrees":
        common = os.path.dirname(os.path.dirname(git_directory))
    try:
        entries = list_directory(os.path.join(common, "worktrees"))
    except (OSError, UnsafeRecord):
        return []
    trees = []
    for entry in entries:
        try:
            data, _ = read_record(os.path.join(entry.path, "gitdir"), limit=4096)
        except (OSError, UnsafeRecord):
            continue
        target = data.decode("utf-8", errors="replace").strip()
        if os.path.isabs(target):
            trees.append(os.path.dirname(target))
    return trees


class GitLock:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "a git *.lock file (held while a git process works in the repository)"
    layout = False
    directory = True
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISDIR(status.st_mode):
            return git_directory_in(path) is not None
        return (
            stat.S_ISREG(status.st_mode)
            and path.endswith(".lock")
            and git_directory_of(path) is not None
        )

    def read(self, path: str, pid_max: int) -> Claim:
        path = lock_path_for(path)
        git_directory = git_directory_of(path)
        status = lstat_or_none(path)
        if status is None:
            return absent(NAME, path, existence_is_lock=True)
        if git_directory is None or not stat.S_ISREG(status.st_mode):
            return unreadable(
                NAME,
                path,
                f"{path} is not a git lock file (a regular file inside a git directory)",
                existence_is_lock=True,
            )
        return Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=True,
            keys=(key_of(status),),
            created_at=mtime_of(status),
            stale=Staleness(StaleProof.NO_WORKER, "git removes its lock files before it exits"),
            workers=_workers(git_directory),
            record_path=path,
            remove_path=path,
        )


def _workers(git_directory: str) -> Workers:
    """The git processes that may hold the repository's locks: those working in its git
    directory or a work tree (found from the directories' paths or identities, or from a `.git`
    file that points at the git directory), or pointed there from elsewhere."""
    directories = work_directories(git_directory)
    return Workers(
        directories,
        GIT_PROGRAMS,
        GIT_VARIABLES,
        identities=identities_of(directories),
        pointer=GIT_FILE,
    )
