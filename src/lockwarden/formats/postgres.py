"""PostgreSQL's `DATADIR/postmaster.pid` (src/include/utils/pidfile.h): line 1 the postmaster's
PID (negative for a single-user backend), 2 the data directory, 3 the start time (Unix
seconds), 4 the port, 5 the socket directory, 6 the listen address, 7 the shared memory key,
8 the status (`starting`, `ready`, `stopping`).

The start time is the postmaster's own, so a PID now running a process that started at another
time is not it (reuse proven in both directions). Every postgres process works in the data
directory (the postmaster chdirs there and its backends inherit it), so a dead postmaster
whose backends still run still holds the data directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from lockwarden.formats.base import (
    HolderAction,
    SafeAction,
    absent,
    key_of,
    lstat_or_none,
    mtime_of,
)
from lockwarden.formats.record import RecordProblem, parse_pid, parse_timestamp
from lockwarden.model import Claim, PidProof, Workers
from lockwarden.support.safe_read import UnsafeRecord, read_record

NAME = "postgres"
PID_FILE = "postmaster.pid"
DATA_DIRECTORY_MARKER = "PG_VERSION"


def pid_file_for(path: str) -> str:
    status = lstat_or_none(path)
    if status is not None and stat.S_ISDIR(status.st_mode):
        return os.path.join(path, PID_FILE)
    return path


class PostgresPidFile:
    name = NAME
    flock = False
    holder_action = SafeAction(
        HolderAction.SHUTDOWN,
        "pg_ctl stop -m fast; never kill -9 a database server (it skips its checkpoint)",
    )
    summary = "PostgreSQL's postmaster.pid (PID and start time; backends in the data directory)"
    layout = False
    directory = True
    never_removed = (
        "PostgreSQL checks and replaces its own stale postmaster.pid at start; removing it by "
        "hand while old backends may still use the data directory risks corrupting it"
    )

    def detect(self, path: str, status: os.stat_result) -> bool:
        if stat.S_ISDIR(status.st_mode):
            return lstat_or_none(os.path.join(path, DATA_DIRECTORY_MARKER)) is not None
        return stat.S_ISREG(status.st_mode) and os.path.basename(path) == PID_FILE

    def read(self, path: str, pid_max: int) -> Claim:
        path = pid_file_for(path)
        data_directory = os.path.dirname(os.path.abspath(path))
        base = Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=True,
            workers=Workers((data_directory,), ("postgres", "postmaster")),
            pid_proof=PidProof(started_at_is_start=True),
            record_path=path,
            remove_path=path,
        )
        try:
            data, status = read_record(path)
        except FileNotFoundError:
            return absent(NAME, path, existence_is_lock=True)
        except UnsafeRecord as error:
            return replace(base, problem=str(error))
        base = replace(base, keys=(key_of(status),), created_at=mtime_of(status))
        try:
            return _with_fields(base, data, pid_max, status.st_uid)
        except RecordProblem as error:
            return replace(base, problem=f"{path}: {error}")


def _with_fields(base: Claim, data: bytes, pid_max: int, owner_uid: int) -> Claim:
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise RecordProblem("the file is not valid UTF-8") from error
    if len(lines) < 3 or not lines[0].strip():
        raise RecordProblem("the file has fewer than its first three lines (pid, dir, start)")
    pid_text = lines[0].strip()
    single_user = pid_text.startswith("-")
    port = lines[3].strip() if len(lines) > 3 else ""
    status = lines[7].strip() if len(lines) > 7 else ""
    kind = "postgres single-user backend" if single_user else "postgres"
    details = ", ".join(part for part in (f"port {port}" if port else "", status) if part)
    return replace(
        base,
        pid=parse_pid(pid_text.lstrip("-"), pid_max),
        started_at=parse_timestamp(lines[2].strip()),
        role=f"{kind} ({details})" if details else kind,
        owner_uid=owner_uid,
        extra={"data_directory": lines[1].strip()[:256], "port": port, "status": status},
    )
