"""dpkg/apt locks held by a real `apt-get` waiting at its prompt, on a private root.

apt-get is pointed at a throwaway root (`Dir=`) whose dpkg status lists one made-up installed
package; `apt-get remove` then takes lock-frontend, lock and archives/lock under that root and
waits at "Do you want to continue? [Y/n]" on a pipe the test keeps open. `Dir::Bin::dpkg` is
/bin/false, so nothing could ever be removed, even if the prompt were answered.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import POSIX_HOLDER, require_tool, run_json, wait_until
from format_helpers import inspect
from lockwarden import config
from lockwarden.formats.dpkg import DPKG_LOCK_PATHS
from lockwarden.model import State

STATUS = """\
Package: lockwarden-test-package
Status: install ok installed
Priority: optional
Section: misc
Maintainer: Nobody <nobody@example.org>
Architecture: all
Version: 1.0
Description: a package that exists only in this test's private dpkg status

"""


APT_LOCKS = ("var/lib/dpkg/lock-frontend", "var/lib/dpkg/lock", "var/cache/apt/archives/lock")


def private_apt_root(root: Path) -> Path:
    for directory in (
        "var/lib/dpkg/updates",
        "var/lib/dpkg/info",
        "var/lib/apt/lists/partial",
        "var/cache/apt/archives/partial",
        "etc/apt/apt.conf.d",
        "etc/apt/preferences.d",
        "etc/apt/sources.list.d",
    ):
        (root / directory).mkdir(parents=True)
    (root / "etc/apt/sources.list").write_text("")
    (root / "etc/apt/apt.conf").write_text("")
    (root / "var/lib/dpkg/status").write_text(STATUS)
    return root


def start_apt_get_at_its_prompt(children, root: Path) -> subprocess.Popen[str]:
    apt_get = require_tool("apt-get")
    argv = [
        apt_get,
        f"-oDir={root}",
        f"-oDir::State::status={root}/var/lib/dpkg/status",
        f"-oDir::Etc={root}/etc/apt",
        "-oDir::Bin::dpkg=/bin/false",
        "remove",
        "lockwarden-test-package",
    ]
    env = {"APT_CONFIG": str(root / "etc/apt/apt.conf"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return children.start(argv, stdin=subprocess.PIPE, env=env)


def test_apt_get_at_its_prompt_is_named_and_never_to_be_deleted(children, tmp_path):
    root = private_apt_root(tmp_path / "root")
    apt = start_apt_get_at_its_prompt(children, root)
    frontend = str(root / "var/lib/dpkg/lock-frontend")
    locks = [str(root / lock) for lock in APT_LOCKS]
    # apt takes them one after another; at its prompt it holds all three.
    assert wait_until(
        lambda: all(inspect(lock, "dpkg").state is State.HELD for lock in locks), timeout=20
    )

    for lock in locks:
        finding = inspect(lock, "dpkg")
        assert finding.state is State.HELD, (lock, finding.reason)
        assert finding.holder is not None and finding.holder.pid == apt.pid
        assert finding.holder.name == "apt-get"
        assert finding.action is None  # held within its budget: nothing to do yet
        assert finding.never_remove and "corrupt" in finding.never_remove

    apt.kill()
    apt.wait(timeout=5)
    finding = inspect(frontend, "dpkg")
    assert finding.state is State.FREE, finding.reason
    assert finding.action is None


def test_an_unheld_dpkg_lock_is_never_stale_and_never_to_be_removed(tmp_path):
    lock = tmp_path / "var/lib/dpkg/lock-frontend"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    finding = inspect(str(lock))
    assert finding.format == "dpkg"
    assert finding.state is State.FREE
    assert finding.action is None


def test_a_posix_holder_within_budget_gets_no_action_and_is_never_removed(children, tmp_path):
    """A child holding the lock the way apt does: within its budget no action, and never rm."""
    lock = tmp_path / "var/lib/apt/lists/lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    holder = children.python(POSIX_HOLDER, str(lock))
    code, document = run_json("inspect", str(lock))
    finding = document["locks"][0]
    assert finding["format"] == "dpkg"
    assert finding["holders"][0]["pid"] == holder.pid
    assert finding["action"] is None
    assert finding["never_remove"]
    assert code == 0


def test_builtin_config_uses_the_dpkg_format_for_dpkg_and_apt_locks():
    builtin = config.builtin(exists=lambda path: True)
    formats = {lock.path: lock.format for lock in builtin.locks}
    assert all(formats[path] == "dpkg" for path in DPKG_LOCK_PATHS)
    assert formats["/run/unattended-upgrades.lock"] == "kernel"


def test_a_package_manager_past_its_budget_is_to_be_let_finish_never_stopped(children, tmp_path):
    """The headline (what an alert says first) asks what the action does: wait, never stop a
    package manager mid-transaction (it said "— stop it" above a "wait for" action)."""
    root = private_apt_root(tmp_path / "root")
    apt = start_apt_get_at_its_prompt(children, root)
    lock = str(root / "var/lib/dpkg/lock-frontend")
    assert wait_until(lambda: inspect(lock, "dpkg").state is State.HELD, timeout=20)

    budgets = ("--warn-after", "0s", "--critical-after", "0s")
    _code, document = run_json("inspect", lock, "--format", "dpkg", *budgets)

    [finding] = document["locks"]
    assert finding["state"] == "held_too_long", finding
    assert finding["reason"].endswith(" — let it finish"), finding["reason"]
    assert "stop it" not in finding["reason"]
    assert finding["action"]["line"].startswith(f"wait for PID {apt.pid}")
