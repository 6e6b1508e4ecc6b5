"""formats/pidfile.py on real files: a pidfile a real process wrote names that process; the
file is the lock (its removal frees it) and is what removal would take away; a file anyone
may write, or that is not a PID, decides nothing."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from conftest import Children
from lockwarden.formats.pidfile import Pidfile

PID_MAX = 4194304
FORMAT = Pidfile()

WRITES_ITS_PIDFILE = """
import os, sys, time
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()}\\n")
print("ready", flush=True)
time.sleep(120)
"""


def test_a_pidfile_written_by_a_real_daemon_names_it(tmp_path: Path, children: Children) -> None:
    pidfile = tmp_path / "daemon.pid"
    daemon = children.python(WRITES_ITS_PIDFILE, str(pidfile))
    claim = FORMAT.read(str(pidfile), PID_MAX)
    status = pidfile.stat()
    assert (claim.format, claim.present, claim.existence_is_lock) == ("pidfile", True, True)
    assert claim.pid == daemon.pid
    assert claim.keys == ((status.st_dev, status.st_ino),)
    assert (claim.record_path, claim.remove_path) == (str(pidfile), str(pidfile))
    assert claim.owner_uid == os.geteuid()
    assert claim.created_at == datetime.fromtimestamp(status.st_mtime, UTC)
    assert (claim.problem, claim.distrust) == (None, None)


def test_an_absent_pidfile_is_an_absent_lock(tmp_path: Path) -> None:
    claim = FORMAT.read(str(tmp_path / "daemon.pid"), PID_MAX)
    assert (claim.present, claim.existence_is_lock, claim.pid) == (False, True, None)


def test_text_that_is_no_pid_is_a_problem_naming_the_file(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("running\n")
    claim = FORMAT.read(str(pidfile), PID_MAX)
    assert claim.present and claim.pid is None
    assert claim.problem is not None and claim.problem.startswith(f"{pidfile}: ")


def test_a_pid_past_pid_max_is_a_problem(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("99999\n")
    claim = FORMAT.read(str(pidfile), 32768)
    assert claim.pid is None and claim.problem is not None


def test_a_pidfile_every_user_may_write_is_distrusted(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("4242\n")
    pidfile.chmod(0o666)
    claim = FORMAT.read(str(pidfile), PID_MAX)
    assert claim.pid == 4242
    assert claim.distrust is not None and "writable by every user (mode 0666)" in claim.distrust


def test_only_a_regular_file_named_pid_is_detected(tmp_path: Path) -> None:
    (tmp_path / "daemon.pid").write_text("1\n")
    (tmp_path / "daemon.lock").write_text("1\n")
    (tmp_path / "dir.pid").mkdir()
    detected = {
        path.name for path in tmp_path.iterdir() if FORMAT.detect(str(path), os.lstat(path))
    }
    assert detected == {"daemon.pid"}


def test_a_fifo_named_pid_is_a_problem_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "daemon.pid"
    os.mkfifo(fifo)
    claim = FORMAT.read(str(fifo), PID_MAX)
    assert claim.present and claim.pid is None
    assert claim.problem is not None and "FIFO" in claim.problem
