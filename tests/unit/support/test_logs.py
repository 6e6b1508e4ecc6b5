"""Log lines: syslog priority prefixes into the journal, human (and coloured only on a TTY
without NO_COLOR) elsewhere; the report on stdout, logs on stderr.

The journal cases connect the real CLI's stderr to a pipe and name that pipe in
JOURNAL_STREAM exactly as systemd names the journal socket (`device:inode`); no journald runs
here, and none is needed: journald reads the prefixes from the stream.
"""

from __future__ import annotations

import io
import logging
import os
import pty
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FLOCK_HOLDER, Children, cli_env, run_python, write_config
from lockwarden.support import logs

ESCAPE = "\033["


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("lockwarden", level, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        (logging.CRITICAL, "<2>"),
        (logging.ERROR, "<3>"),
        (logging.WARNING, "<4>"),
        (logging.INFO, "<6>"),
        (logging.DEBUG, "<7>"),
        (logging.WARNING + 5, "<3>"),  # a custom level between rounds to the more severe
    ],
)
def test_journal_lines_carry_the_syslog_priority_and_no_timestamp(level: int, prefix: str) -> None:
    line = logs.JournalFormatter().format(record(level, "the message"))
    assert line == f"{prefix}the message"


def test_every_line_of_a_multiline_journal_record_keeps_its_priority() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failing = logging.LogRecord(
            "lockwarden", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    lines = logs.JournalFormatter().format(failing).splitlines()
    assert len(lines) > 2
    assert all(line.startswith("<3>") for line in lines)


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (logging.ERROR, "lockwarden: config error: x"),
        (logging.WARNING, "lockwarden: warning: config error: x"),
        (logging.DEBUG, "lockwarden: debug: config error: x"),
    ],
)
def test_terminal_lines_are_plain_without_colour(level: int, expected: str) -> None:
    assert logs.TerminalFormatter(colour=False).format(record(level, "config error: x")) == expected


def test_terminal_lines_are_coloured_when_asked() -> None:
    line = logs.TerminalFormatter(colour=True).format(record(logging.WARNING, "careful"))
    assert line.startswith(ESCAPE) and line.endswith("\033[0m")
    assert "lockwarden: warning: careful" in line


def test_a_stringio_is_never_the_journal_nor_coloured() -> None:
    stream = io.StringIO()
    assert not logs.writes_to_journal(stream, {"JOURNAL_STREAM": "1:2"})
    assert not logs.wants_colour(stream, {})


def test_journal_stream_naming_another_file_is_not_the_journal(tmp_path: Path) -> None:
    """A unit that redirects stderr to a file keeps JOURNAL_STREAM; lines must stay plain."""
    with open(tmp_path / "log", "w") as redirected:
        assert not logs.writes_to_journal(redirected, {"JOURNAL_STREAM": "8:12345"})
        status = os.fstat(redirected.fileno())
        named = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        assert logs.writes_to_journal(redirected, named)


def run_with_stderr(
    argv: list[str], stderr_fd: int, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockwarden", *argv],
        stdout=subprocess.PIPE,
        stderr=stderr_fd,
        text=True,
        timeout=30,
        env=cli_env(**env),
        check=False,
    )


def stderr_of(argv: list[str], tty: bool = False, journal: bool = False, **env: str) -> str:
    """Run the real CLI with stderr on a pipe (or a pseudo-terminal) and return what it wrote."""
    read_end, write_end = pty.openpty() if tty else os.pipe()
    try:
        if journal:
            status = os.fstat(write_end)
            env["JOURNAL_STREAM"] = f"{status.st_dev}:{status.st_ino}"
        completed = run_with_stderr(argv, write_end, **env)
        os.close(write_end)
        write_end = -1
        assert completed.returncode == 78  # every case below is a configuration error
        chunks = []
        while True:
            try:
                chunk = os.read(read_end, 65536)
            except OSError:  # a pty's reader gets EIO once the writer is gone
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode().replace("\r\n", "\n")
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)


def bad_config(tmp_path: Path) -> str:
    return write_config(tmp_path / "bad.toml", '[defaults]\nwarn_afer = "1m"\n')


def test_cli_errors_under_systemd_carry_priority_three(tmp_path: Path) -> None:
    text = stderr_of(["check-config", "--config", bad_config(tmp_path)], journal=True)
    lines = text.splitlines()
    assert lines and all(line.startswith("<3>config error: ") for line in lines), text
    assert "warn_afer: unknown key" in text


def test_cli_errors_on_a_pipe_are_plain(tmp_path: Path) -> None:
    text = stderr_of(["check-config", "--config", bad_config(tmp_path)])
    assert text.startswith("lockwarden: config error: ")
    assert ESCAPE not in text and "<3>" not in text


def test_cli_errors_on_a_terminal_are_coloured(tmp_path: Path) -> None:
    text = stderr_of(["check-config", "--config", bad_config(tmp_path)], tty=True)
    assert ESCAPE in text
    assert "lockwarden: config error: " in text


def test_no_color_turns_colour_off_on_a_terminal(tmp_path: Path) -> None:
    text = stderr_of(["check-config", "--config", bad_config(tmp_path)], tty=True, NO_COLOR="1")
    assert ESCAPE not in text
    assert text.startswith("lockwarden: config error: ")


def test_report_goes_to_stdout_and_logs_to_stderr(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "ok.toml", f'[[lock]]\nname = "spare"\npath = "{tmp_path / "LOCK"}"\n'
    )
    read_end, write_end = os.pipe()
    status = os.fstat(write_end)
    try:
        completed = run_with_stderr(
            ["--once", "-v", "--config", config],
            write_end,
            JOURNAL_STREAM=f"{status.st_dev}:{status.st_ino}",
        )
        os.close(write_end)
        with os.fdopen(read_end) as stderr:
            read_end = -1
            logged = stderr.read()
    finally:
        if read_end != -1:
            os.close(read_end)
    assert completed.returncode == 0, logged
    assert "spare" in completed.stdout and "OK" in completed.stdout
    assert not any(line.startswith("<") for line in completed.stdout.splitlines())
    assert "<6>checked 1 locks in " in logged
    assert all(line[:3] in ("<7>", "<6>", "<4>") for line in logged.splitlines()), logged


PROBE = """
import io, logging, sys
from lockwarden.support import logs
stream = io.StringIO()
logs.configure(sys.argv[1] == "verbose", stream, {"NO_COLOR": "1"})
log = logging.getLogger("lockwarden.probe")
log.debug("a debug line %s", 1)
log.info("an info line")
log.warning("a warning %s", "line")
print(stream.getvalue(), end="")
"""


def probe(verbosity: str) -> list[str]:
    completed = run_python(PROBE, verbosity)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.splitlines()


def test_without_verbose_only_warnings_reach_the_cli_handler() -> None:
    assert probe("quiet") == ["lockwarden: warning: a warning line"]


def test_verbose_lines_are_all_written_through_the_cli_handler() -> None:
    assert probe("verbose") == [
        "lockwarden: debug: a debug line 1",
        "lockwarden: info: an info line",
        "lockwarden: warning: a warning line",
    ]


def test_settings_a_cli_call_never_used_are_not_applied_after_it_returns(
    tmp_path: Path,
) -> None:
    """A `main()` takes its stderr handler away when it returns: a line logged later in the
    same process (lockwarden used as a library by then) reaches the handler the application
    set up, and only that one."""
    from lockwarden.cli import commands as cli

    lock = tmp_path / "free.lock"
    lock.touch()
    logger = logging.getLogger("lockwarden")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    stream = io.StringIO()
    try:
        logger.handlers[:] = []
        assert cli.main(["inspect", "--format", "kernel", str(lock)]) == 0
        handler = logging.StreamHandler(stream)
        logger.addHandler(handler)
        logging.getLogger("lockwarden.library").warning("a journal problem")
        assert logger.handlers == [handler]
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    assert stream.getvalue() == "a journal problem\n"


# The real command line, with journald's socket (output.journal.SOCKET) at the path given first.
WITH_JOURNAL_SOCKET = """
import sys
from lockwarden.output import journal
journal.SOCKET = sys.argv[1]
from lockwarden.cli.commands import main
raise SystemExit(main(sys.argv[2:]))
"""


def run_under_systemd(
    tmp_path: Path, children: Children, socket_path: Path
) -> tuple[subprocess.CompletedProcess[str], str, int]:
    """`--once` with stdout on what JOURNAL_STREAM names (as systemd connects it), a critical
    lock and a free one; the run, its stdout and the holder's PID."""
    held = tmp_path / "held.lock"
    free = tmp_path / "free.lock"
    free.touch()
    holder = children.python(FLOCK_HOLDER, str(held))
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
        f'[[lock]]\nname = "held"\npath = "{held}"\nformat = "kernel"\nrole = "session store"\n'
        'warn_after = "0s"\ncritical_after = "0s"\n'
        f'[[lock]]\nname = "free"\npath = "{free}"\nformat = "kernel"\n',
    )
    report = tmp_path / "stdout"
    with report.open("w") as stdout:
        status = os.fstat(stdout.fileno())
        journal = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        argv = [sys.executable, "-c", WITH_JOURNAL_SOCKET, str(socket_path)]
        completed = subprocess.run(
            [*argv, "--once", "--config", config],
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=30,
            env=cli_env(**journal), check=False,
        )  # fmt: skip
    return completed, report.read_text(), holder.pid


def test_report_lines_under_systemd_carry_the_priority_of_their_lock(
    tmp_path: Path, children: Children
) -> None:
    """stdout on the journal stream and no journald socket to send entries to: a critical
    lock's line and its details at `<2>` (crit), a free lock's at `<6>` (info), the headline
    at the run's worst, so `journalctl -p warning` shows the critical lock whole and nothing
    that is fine."""
    completed, text, _pid = run_under_systemd(tmp_path, children, tmp_path / "no-journald")
    assert completed.returncode == 2, completed.stderr
    lines = text.splitlines()
    assert lines[0].startswith("<2>lockwarden ") and ": CRITICAL (" in lines[0], lines
    held_lines = [line for line in lines if line.startswith("<2>  CRITICAL  held ")]
    assert len(held_lines) == 1, lines
    details = lines[lines.index(held_lines[0]) + 1 :]
    assert details[0].startswith("<2>            path ") and "holder   PID" in "".join(details)
    assert any(line.startswith("<6>  OK        free ") for line in lines), lines
    assert all(line[:3] in ("<2>", "<4>", "<5>", "<6>") for line in lines), lines


def decode(datagram: bytes) -> dict[str, str]:
    """One datagram of journald's native protocol, read as journald reads it."""
    fields: dict[str, str] = {}
    while datagram:
        line, _, datagram = datagram.partition(b"\n")
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields[key.decode()] = value.decode()
            continue
        (size,) = struct.unpack("<Q", datagram[:8])
        fields[line.decode()] = datagram[8 : 8 + size].decode()
        datagram = datagram[8 + size + 1 :]
    return fields


def test_under_systemd_each_lock_is_one_journal_entry_with_its_fields(
    tmp_path: Path, children: Children
) -> None:
    """With journald's socket there (here a real datagram socket the test reads): one entry
    per lock, its line and details as one message at the lock's priority, and fields that
    `journalctl LOCKWARDEN_LOCK=held` matches; nothing on the stream (said once)."""
    from lockwarden.output.journal import MESSAGE_IDS

    path = tmp_path / "journal.socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as journald:
        journald.bind(str(path))
        completed, text, pid = run_under_systemd(tmp_path, children, path)
        journald.setblocking(False)
        entries = []
        while True:
            try:
                entries.append(decode(journald.recv(65536)))
            except BlockingIOError:
                break
    assert completed.returncode == 2, completed.stderr
    assert text == ""  # every entry went to journald: nothing twice
    by_lock = {entry.get("LOCKWARDEN_LOCK"): entry for entry in entries}
    held, free, summary = by_lock["held"], by_lock["free"], entries[0]
    notes = [entry for entry in entries if entry["MESSAGE_ID"] == MESSAGE_IDS["note"]]
    assert len(entries) == 3 + len(notes) and notes, entries
    assert all(note["MESSAGE"].startswith("note: ") and note["PRIORITY"] == "5" for note in notes)
    assert summary["MESSAGE"].startswith("lockwarden ") and summary["PRIORITY"] == "2"
    assert summary["MESSAGE_ID"] == MESSAGE_IDS["summary"]
    assert held["PRIORITY"] == "2" and held["MESSAGE_ID"] == MESSAGE_IDS["held_too_long"]
    assert held["LOCKWARDEN_STATE"] == "held_too_long"
    assert held["LOCKWARDEN_SEVERITY"] == "critical"
    assert held["LOCKWARDEN_HOLDER_PID"] == str(pid)
    assert held["LOCKWARDEN_ACTION"] == f"kill {pid}"
    assert held["LOCKWARDEN_STORE"] == "session store"
    assert held["LOCKWARDEN_PATH"] == str(tmp_path / "held.lock")
    assert held["SYSLOG_IDENTIFIER"] == "lockwarden"
    lines = held["MESSAGE"].splitlines()  # the report's own block, line for line
    assert lines[0].startswith("  CRITICAL  held ") and lines[1].startswith("            path ")
    assert free["PRIORITY"] == "6" and free["LOCKWARDEN_STATE"] == "free"
    assert "LOCKWARDEN_HOLDER_PID" not in free  # no empty fields
    assert all(entry["MESSAGE_ID"] in MESSAGE_IDS.values() for entry in entries)
