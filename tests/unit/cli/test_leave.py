"""How the `lockwarden` command ends (cli/commands.py: leave): without interpreter
finalisation, yet with nothing a reader or the host can see lost: the whole report through a
pipe, the log lines, the exit code, the exit handlers' work, and a thread that is no daemon
waited for as Python's own exit waits for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import cli_env, write_config

# The entry point as pyproject's script calls it, with an exit handler and, when asked, a
# thread that is no daemon and writes its file only after the command is done.
ENTRY = """
import atexit, sys, threading, time
from lockwarden.cli import commands

marker, late = sys.argv[1], sys.argv[2]
atexit.register(lambda: open(marker, "w").write("exit handler ran"))
if late != "-":
    def finish():
        time.sleep(0.5)
        open(late, "w").write("thread finished")
    threading.Thread(target=finish, name="late-writer").start()
sys.argv = ["lockwarden", *sys.argv[3:]]
raise SystemExit(commands.run())
"""


def run_entry(
    tmp_path: Path, *args: str, late: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe is block-buffered, as under systemd
    return subprocess.run(
        [sys.executable, "-c", ENTRY, str(tmp_path / "marker"), str(late or "-"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def many_absent_locks(tmp_path: Path, count: int) -> Path:
    """A config of locks in a missing directory, each `unknown` (exit 3); 400 of them make a
    report larger than a pipe holds (64 KiB). Only what the test made is looked at: no blocked
    writers on the host, a state directory of its own."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    tables = f'[state]\npath = "{state}/state.jsonl"\n\n[host]\nblocked_writers = false\n\n'
    tables += "".join(
        f'[[lock]]\nname = "store-{number}"\npath = "{tmp_path}/gone/store-{number}/LOCK"\n'
        'format = "owner-record"\n\n'
        for number in range(count)
    )
    return Path(write_config(tmp_path / "config.toml", tables))


def test_the_whole_report_the_logs_the_code_and_the_exit_handlers_arrive(tmp_path: Path) -> None:
    config = many_absent_locks(tmp_path, 400)
    completed = run_entry(tmp_path, "--once", "--config", str(config), "-v")
    assert completed.returncode == 3
    assert len(completed.stdout.encode()) > 1 << 16
    reported = [line for line in completed.stdout.splitlines() if "store-" in line]
    assert {f"store-{number}" for number in range(400)} <= {
        word for line in reported for word in line.split()
    }
    assert completed.stdout.endswith("\n")
    assert "checked 400 locks" in completed.stderr  # the last log line of the run
    assert (tmp_path / "marker").read_text() == "exit handler ran"


def test_a_thread_that_is_no_daemon_is_waited_for(tmp_path: Path) -> None:
    config = many_absent_locks(tmp_path, 1)
    late = tmp_path / "late"
    completed = run_entry(tmp_path, "--once", "--config", str(config), late=late)
    assert completed.returncode == 3
    assert late.read_text() == "thread finished"
    assert (tmp_path / "marker").read_text() == "exit handler ran"


def test_a_command_that_leaves_its_output_buffered_has_it_printed(tmp_path: Path) -> None:
    config = many_absent_locks(tmp_path, 3)
    completed = run_entry(tmp_path, "check-config", "--config", str(config))
    assert completed.returncode == 0
    assert completed.stdout.startswith(f"# effective configuration from {config}: valid, 3 locks")
    assert completed.stdout.count("[[lock]]") == 3
    assert completed.stdout.splitlines()[-1].startswith("# notify services:")  # the last line


def test_a_usage_error_leaves_with_its_code_and_message(tmp_path: Path) -> None:
    completed = run_entry(tmp_path, "--bogus")
    assert completed.returncode == 64
    assert "unrecognized arguments: --bogus" in completed.stderr
    assert (tmp_path / "marker").read_text() == "exit handler ran"
