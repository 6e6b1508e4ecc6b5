"""Which lock formats `remove_stale` may remove, and why the others never are.

Kept apart from removal.py so that config.py can refuse `remove_stale` on a format that is never
removed without importing the removal stage.
"""

from __future__ import annotations

# Formats whose lock is an artefact left behind by a dead holder, and safe to take away.
ELIGIBLE_FORMATS = frozenset(
    {
        "owner-record",
        "pidfile",
        "filelock-soft",
        "chromium-profile",
        "firefox-profile",
        "mercurial",
        "emacs",
        "git",
        "pacman",
        "terraform",
    }
)
KERNEL_ONLY = "only a kernel lock counts for it, and the kernel frees that when its holder exits"
NEVER_REMOVED: dict[str, str] = {
    "kernel": KERNEL_ONLY,
    "sqlite": KERNEL_ONLY,
    "dpkg": KERNEL_ONLY,
    "borg": (
        "borg locks are broken with `borg break-lock`, which drops every lock of the repository "
        "(shared readers' roster entries too); lockwarden leaves that to a person"
    ),
    "postgres": (
        "PostgreSQL checks and replaces its own stale postmaster.pid at start; removing it by "
        "hand while old backends may still use the data directory risks corrupting it"
    ),
}
