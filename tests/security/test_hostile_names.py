"""Attack 3 of docs/security.md: one file name must not stop all monitoring.

A writer waits on a file whose name is not UTF-8 (`v\\xff\\xfe`, bytes any user may give a file)
past [host] blocked_after, while a configured lock of root's has gone stale. Every run must
still report and alert both: the text report, the JSON report (the name carried losslessly:
Python's surrogate escapes, which `os.fsencode` turns back into the file's bytes), the state
journal and the alerts a real HTTP receiver gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from alerts.helpers import Receiver, receiver
from conftest import FLOCK_HOLDER, Children, cli_env, unit_directives, wait_until, write_config
from integration.test_why import WAITER, blocked_in_lock_call
from lockwarden.support.escape import visible

__all__ = ["receiver"]

NAMES = (b"v\xff\xfe", b"\xc3(", b"ok\xed\xa0\x80", b"\x1b[2J\xff")


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    """The real command, its output kept as bytes (what a terminal or a pipe gets)."""
    return subprocess.run(
        [sys.executable, "-m", "lockwarden", *args],
        capture_output=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )


def test_a_writer_blocked_on_a_non_utf8_name_is_reported_and_so_is_everything_else(
    tmp_path: Path, children: Children, receiver: Receiver
) -> None:
    directory = os.fsencode(tmp_path / "spool")
    os.mkdir(directory)
    locks = [os.fsdecode(os.path.join(directory, name)) for name in NAMES]
    waiters = []
    for lock in locks:
        children.python(FLOCK_HOLDER, lock)
        waiters.append(children.python(WAITER, lock, "flock"))
    assert wait_until(lambda: all(blocked_in_lock_call(w.pid) for w in waiters), timeout=10)
    stale = tmp_path / "daemon.pid"
    stale.write_text("999999\n")  # above pid_max's default: no such process
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        '[host]\nblocked_after = "5m"\nblocked_critical_after = "10m"\n'
        f'[notify]\nurls = ["{receiver.url()}"]\n'
        f'[[lock]]\nname = "daemon"\npath = "{stale}"\nformat = "pidfile"\n',
    )
    os.chmod(config, 0o600)
    start = datetime.now(UTC)
    for minute in (0, 2, 5, 8):
        _run("--once", "--config", config, "--now", (start + timedelta(minutes=minute)).isoformat())
    later = (start + timedelta(minutes=11)).isoformat()

    text = _run("--once", "--config", config, "--now", later)
    assert b"Traceback" not in text.stderr and text.stdout, text.stderr.decode(
        errors="backslashreplace"
    )
    shown = text.stdout.decode()  # the report is UTF-8 text, whatever the names
    assert "daemon" in shown and "stale" in shown, shown
    for name in NAMES:
        assert visible(os.fsdecode(name)) in shown, shown  # each escaped, visibly

    done = _run("--once", "--json", "--config", config, "--now", later)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="backslashreplace")
    document = json.loads(done.stdout.decode())
    paths = {
        os.fsencode(lock["path"])
        for lock in document["locks"]
        if lock["name"].startswith("blocked:") and lock["path"].startswith(str(tmp_path))
    }
    assert paths == {os.path.join(directory, name) for name in NAMES}  # losslessly, each one
    [daemon] = [lock for lock in document["locks"] if lock["name"] == "daemon"]
    assert daemon["state"] == "stale"

    # Both reached a person: the stale lock and each blocked writer, by the real receiver.
    titles = [payload["title"] for payload in receiver.payloads]
    assert any("daemon" in title for title in titles), titles
    assert sum("spool" in title for title in titles) >= len(NAMES), titles


def test_a_run_that_crashes_says_so_as_a_failure_the_unit_sees(tmp_path: Path) -> None:
    """The run's own failure is exit 70, which the shipped unit's SuccessExitStatus= does not
    take, so `systemctl --failed` shows it (before, a crash was exit 3: an alert state the
    unit counts as success). No real input is known to crash a run now (the one above did):
    a stand-in raises inside the real CLI's dispatch, the one place this is a stand-in."""
    config = write_config(tmp_path / "config.toml", f'[state]\npath = "{tmp_path / "s.jsonl"}"\n')
    crash = (
        "import sys, lockwarden.cli.commands as cli\n"
        "def boom(*args):\n    raise RuntimeError('bad \\x1b[2J name')\n"
        "cli.dispatch = boom\nraise SystemExit(cli.run())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", crash, "--once", "--config", config],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 70, done.stderr
    assert "internal error: RuntimeError: bad \\x1b[2J name" in done.stderr  # escaped
    unit = Path(__file__).resolve().parents[2] / "systemd" / "lockwarden.service"
    [success] = unit_directives(unit)["SuccessExitStatus"]
    assert "70" not in success.split()


def test_init_and_discover_write_a_config_a_hostile_file_name_cannot_change(
    tmp_path: Path, children: Children
) -> None:
    """`init` and `discover --write` list every file the kernel shows locked: one named with
    bytes that are not UTF-8 is left out (a TOML config cannot hold it; before, it crashed
    both), and a name with a newline cannot add a line of its own to root's config."""
    import tomllib

    directory = os.fsencode(tmp_path / "held")
    os.mkdir(directory)
    injected = b'x\nremove_stale = true\n[[lock]]\nname = "evil"\npath = "x'
    held = [os.fsdecode(os.path.join(directory, name)) for name in (b"v\xff\xfe", injected)]
    for lock in held:
        children.python(FLOCK_HOLDER, lock)
    made = tmp_path / "init.toml"
    done = _run("init", "--path", str(made))
    assert done.returncode == 0, done.stderr.decode(errors="backslashreplace")
    found = tomllib.loads(made.read_text(encoding="utf-8"))["lock"]
    assert not [lock for lock in found if lock["name"] == "evil" or lock.get("remove_stale")]
    mine = [lock["path"] for lock in found if lock["path"].startswith(str(tmp_path))]
    assert mine == [held[1]]  # the UTF-8 one, whole, as data; the other left out

    written = tmp_path / "discovered.toml"
    done = _run("discover", "--write", str(written))
    assert done.returncode == 0, done.stderr.decode(errors="backslashreplace")
    listed = tomllib.loads(written.read_text(encoding="utf-8"))["lock"]
    assert [lock["path"] for lock in listed if lock["path"].startswith(str(tmp_path))] == [held[1]]
    assert not [lock for lock in listed if lock["name"] == "evil" or lock.get("remove_stale")]
