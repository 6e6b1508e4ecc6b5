"""pacman's db.lck held by the real `pacman` (Debian's pacman-package-manager) waiting at its
prompt, on a private root and database that list one made-up installed package."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import require_tool, run_json, wait_until
from factories import capture_host
from format_helpers import inspect
from lockwarden.model import State, UnknownCause

DESC = "%NAME%\nlockwarden-test\n\n%VERSION%\n1.0-1\n\n%ARCH%\nany\n\n"


def private_pacman(base: Path) -> tuple[list[str], Path]:
    pacman = require_tool("pacman")
    if os.geteuid() != 0:  # the test command (scripts/test.sh) runs as root
        message = "pacman -R refuses to run unless root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    package = base / "db/local/lockwarden-test-1.0-1"
    package.mkdir(parents=True)
    (base / "root").mkdir()
    (base / "db/local/ALPM_DB_VERSION").write_text("9\n")
    (package / "desc").write_text(DESC)
    (package / "files").write_text("")
    (base / "pacman.conf").write_text("[options]\nArchitecture = auto\n")
    argv = [
        pacman,
        "--config",
        str(base / "pacman.conf"),
        "--root",
        str(base / "root"),
        "--dbpath",
        str(base / "db"),
        "--logfile",
        str(base / "pacman.log"),
        "-R",
        "lockwarden-test",
    ]
    return argv, base / "db/db.lck"


def test_pacman_at_its_prompt_holds_db_lck_and_leaves_it_stale_when_killed(children, tmp_path):
    argv, lock = private_pacman(tmp_path)
    pacman = children.start(argv, stdin=subprocess.PIPE)
    assert wait_until(lambda: inspect(str(lock), "pacman").state is State.HELD, timeout=10)

    finding = inspect(str(lock), "pacman")
    assert finding.holder is not None and finding.holder.pid == pacman.pid
    assert finding.action is None  # held within its budget: nothing to do yet

    pacman.kill()
    pacman.wait(timeout=5)
    assert lock.exists(), "a killed pacman leaves db.lck behind"
    assert_stale_or_honestly_unknown(inspect(str(lock), "pacman"), lock)


def assert_stale_or_honestly_unknown(finding, lock: Path) -> None:  # type: ignore[no-untyped-def]
    """Stale, with proof, when every process's descriptors can be read. A host where some
    cannot (even root may not read a more privileged PID 1's) gives no proof that none of
    them has the file open: then the finding must say unknown and why, never stale."""
    if blind_processes():
        assert finding.state is State.UNKNOWN, finding.reason
        assert finding.unknown_cause is UnknownCause.MISSING_RIGHT
        return
    assert finding.state is State.STALE, finding.reason
    assert "no process has" in (finding.proof or "") and "open" in finding.proof
    assert finding.action == f"rm -- {lock}"


def blind_processes() -> int:
    return capture_host(scan_keys=((0, 0),)).unreadable_pids


def test_a_child_holding_db_lck_open_is_the_holder(children, tmp_path):
    """pacman's layout made the way libalpm makes it (O_EXCL, kept open), by a Python child."""
    lock = tmp_path / "db.lck"
    holder = children.python(
        """
        import os, sys, time
        descriptor = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o000)
        print("ready", flush=True)
        time.sleep(120)
        """,
        str(lock),
    )
    code, document = run_json("inspect", str(lock))
    finding = document["locks"][0]
    assert finding["format"] == "pacman"
    assert finding["state"] == "held" and finding["holders"][0]["pid"] == holder.pid
    assert code == 0


def test_a_pacman_lock_nobody_has_open_is_stale_with_proof(tmp_path):
    lock = tmp_path / "db.lck"
    lock.write_text("")
    finding = inspect(str(lock))
    assert finding.format == "pacman"
    assert_stale_or_honestly_unknown(finding, lock)


# Debian's pacman ships pacman-db-upgrade but not the libmakepkg files it sources: these stand
# in for them. Only `msg` does more than print: it waits while the gate file exists, so the
# test holds the real script right after it took the lock (it says a message then).
STAND_INS = {
    "message.sh": (
        "colorize() { :; }\n"
        'msg() { printf "==> %s\\n" "$1" >&2; while [ -e "$LW_GATE" ]; do sleep 0.05; done; }\n'
        'msg2() { msg "$@"; }\n'
        'warning() { printf "WARNING: %s\\n" "$1" >&2; }\n'
        'error() { printf "ERROR: %s\\n" "$1" >&2; }\n'
    ),
    "parseopts.sh": (
        'parseopts() { shift; while [[ $1 != -- ]]; do shift; done; shift; OPTRET=("$@" --); }\n'
    ),
}


def test_pacman_db_upgrade_holds_db_lck_without_keeping_it_open(children, tmp_path):
    """The real pacman-db-upgrade takes db.lck with `touch` and drops it with `rm`: nothing
    has it open while it upgrades, yet it is held (it was called stale, and removed)."""
    upgrade = require_tool("pacman-db-upgrade")
    (tmp_path / "db/local").mkdir(parents=True)  # no ALPM_DB_VERSION: an old database
    (tmp_path / "root").mkdir()
    (tmp_path / "pacman.conf").write_text("[options]\n")
    library = tmp_path / "makepkg/util"
    library.mkdir(parents=True)
    for name, text in STAND_INS.items():
        (library / name).write_text(text)
    gate = tmp_path / "gate"
    gate.touch()
    options = ["--config", str(tmp_path / "pacman.conf"), "--nocolor"]
    places = ["-d", str(tmp_path / "db"), "-r", str(tmp_path / "root")]
    env = {**os.environ, "LIBRARY": str(library.parent), "LW_GATE": str(gate)}
    running = children.start([upgrade, *options, *places], env=env, stdin=subprocess.DEVNULL)
    lock = tmp_path / "db/db.lck"
    assert wait_until(lock.exists, timeout=10)

    held = inspect(str(lock), "pacman")
    gate.unlink()
    assert running.wait(timeout=30) == 0
    assert not lock.exists()  # it removed its own lock when done

    if blind_processes():
        assert held.state is State.UNKNOWN, held.reason
        return
    assert held.state is State.HELD, held.reason
    assert held.holder is None  # nothing proves which process took it
    assert f"PID {running.pid} (" in held.reason and "without keeping it open" in held.reason
