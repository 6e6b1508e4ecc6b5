"""A holder whose /proc details do not answer in time is still named by its PID.

A process's `cmdline` is read from its memory under its mmap lock; on kernels where a page
fault on a hung mount holds that lock, reading it blocks (`ps` hangs). On Linux 6.18 a fault
on a hung FUSE mount waits without the lock (measured: cmdline, stat, status and cgroup of
such a process answered at once), so no real process can be made to block it here. A FIFO
in its place does block a reader for real: a copy of a real holder's /proc entry whose
cmdline is a FIFO no one writes to.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import FLOCK_HOLDER, Children
from lockwarden.check.identify import holder_from_process
from lockwarden.procfs.reader import HostReader, Request, wall_clock
from lockwarden.procfs.snapshot import read_within


def test_a_holder_whose_command_line_does_not_answer_is_still_named_by_pid(
    tmp_path: Path, children: Children
) -> None:
    holder = children.python(FLOCK_HOLDER, str(tmp_path / "db.lock"))
    entry = tmp_path / "proc" / str(holder.pid)
    entry.mkdir(parents=True)
    for name in ("stat", "status", "cgroup"):
        shutil.copyfile(f"/proc/{holder.pid}/{name}", entry / name)
    cmdline = entry / "cmdline"
    os.mkfifo(cmdline)
    host = HostReader(wall_clock, read_timeout=0.2)
    host.capture(Request())  # the boot time from the real /proc
    host.proc = str(tmp_path / "proc")  # the holder's details from the copy
    try:
        process = host.process(holder.pid)
        assert process is not None
        assert process.cmdline == ()
        kernel_name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
        assert holder_from_process(process).describe() == f"PID {holder.pid} ({kernel_name})"
    finally:
        _release(cmdline)


def test_a_command_line_that_answers_is_read_whole(children: Children, tmp_path: Path) -> None:
    holder = children.python(FLOCK_HOLDER, str(tmp_path / "db.lock"))
    host = HostReader(wall_clock, read_timeout=5)
    process = host.capture(Request(pids=(holder.pid,))).process(holder.pid)
    assert process is not None
    assert process.cmdline[1] == "-c"
    assert process.cmdline[-1] == str(tmp_path / "db.lock")
    assert read_within(f"/proc/{holder.pid}/cmdline", 5) == "\0".join(process.cmdline) + "\0"


def _release(fifo: Path) -> None:
    """End the helper thread still waiting on the FIFO: a writer comes and goes."""
    descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.close(descriptor)
