"""The environment of everything the suite builds or installs for itself: the live tests' root
file systems, database servers' data directories, pinned packages, a .deb installed with apt.

The test session sets variables of its own for the code under test (an empty
$CREDENTIALS_DIRECTORY, a private $RUNTIME_DIRECTORY, CI=true, ...). Passed on to a build they
change what the build's own programs do: systemd's postinst inside a new root file system
fails on an empty $CREDENTIALS_DIRECTORY. So a build starts from nothing and gets only what it
needs from the host: the system PATH, HOME, a UTF-8 locale, TMPDIR, proxy settings, and pip's
own settings for a pip install.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_SETTINGS = ("home", "tmpdir", "http_proxy", "https_proxy", "no_proxy", "all_proxy")


def build_environment(
    *, pip: bool = False, host: Mapping[str, str] | None = None, **extra: str
) -> dict[str, str]:
    """A clean environment for a build: the host's settings a build needs, `extra`, nothing else."""
    host = os.environ if host is None else host
    kept = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    for name, value in host.items():
        wanted = name.lower() in HOST_SETTINGS or (pip and name.startswith("PIP_"))
        if wanted:
            kept[name] = value
    kept.update(extra)
    return kept


def main(argv: list[str]) -> None:
    """`python tests/buildenv.py COMMAND ...`: run a build step of a shell script (the pinned
    virtualenvs of scripts/test-debian.sh) in the same clean environment, pip's settings kept."""
    if not argv:
        raise SystemExit("usage: buildenv.py COMMAND [ARGUMENT ...]")
    os.execvpe(argv[0], argv, build_environment(pip=True))


if __name__ == "__main__":
    main(sys.argv[1:])
