"""Lock files made by existence, as the Python packages `filelock` and `lockfile` write them.

py-filelock's `SoftFileLock` (checked against 3.12, 3.20, 3.21, 3.22, 3.29, 3.30 and 4.3.1):
an O_EXCL file that the holder keeps open until it releases, holding
* nothing (<= 3.21);
* `pid\\nhost\\n` (3.22 - 3.29);
* `pid\\nhost\\ntoken\\n` (>= 3.30), token = boot_id << 64 | starttime (the holder's start in
  clock ticks; boot_id the 128-bit /proc boot id, 0 when filelock could not read it). From 4.x
  the host may end in `?pidns-HEX`, the holder's PID namespace inode;
* or, from 4.x's marker locks, `filelock/2\\npid=..\\nhost=..\\nmode=..\\n[start=token\\n]`.

lockfile 0.12 (`lockfile.LockBase`): `LinkLockFile` hard-links `X.lock` to an empty file named
`HOST-TID.PIDHASH` beside it (`HOST.PIDHASH` when not threaded; TID is the thread ident's low 32
bits in hex, HASH is `hash(path)`, possibly negative); `MkdirLockFile` makes the directory
`X.lock/` holding an empty file `HOST.-TIDPID` (`HOST.PID`). Where hex TID, PID and HASH run
together the name reads as several PIDs; the claim lists them all (`PidProof.candidates`).
`PIDLockFile` writes `pid\\n`, read here too (and by the `pidfile` format).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from datetime import datetime

from lockwarden.formats.base import STOP_HOLDER, absent, key_of, lstat_or_none, mtime_of
from lockwarden.formats.record import RecordProblem, parse_pid
from lockwarden.model import Claim, PidProof, Staleness, StaleProof
from lockwarden.support.safe_read import UnsafeRecord, list_directory, read_record, scan_directory

NAME = "filelock-soft"
RECORD_LIMIT = 1024
MARKER_PROTOCOL = "filelock/2"
NAMESPACE_MARK = "?pidns-"
MAX_TID_HEX = 8
MAX_HASH_DIGITS = 19
SIBLING_SCAN_LIMIT = 10000
SOFT_RELEASE_FACT = "py-filelock's SoftFileLock keeps its lock file open while it holds it"
LEGACY_LINE = re.compile(r"[0-9]+\n[^\n]+\n(?:[0-9]+\n)?")


@dataclass(frozen=True)
class Owner:
    """What one of these layouts says about its holder."""

    pid: int | None = None
    host: str | None = None
    pid_namespace: int | None = None
    boot_id: str | None = None
    start_ticks: int | None = None
    candidates: tuple[int, ...] = ()
    started_at: datetime | None = None
    layout: str = ""


def decode_start_token(token: int) -> tuple[str | None, int]:
    """filelock's `boot_id << 64 | starttime`: the boot id as /proc writes it (None when
    filelock recorded 0) and the start time in clock ticks."""
    boot = token >> 64
    ticks = token & (2**64 - 1)
    import uuid  # only a token-bearing SoftFileLock record needs it

    return (str(uuid.UUID(int=boot)) if boot else None), ticks


def split_host(recorded: str) -> tuple[str, int | None]:
    """`vm?pidns-effffffb` -> ("vm", 0xeffffffb)."""
    host, mark, namespace = recorded.partition(NAMESPACE_MARK)
    if mark and re.fullmatch(r"[0-9a-f]{1,16}", namespace):
        return host, int(namespace, 16)
    return recorded, None


def parse_soft_record(data: bytes, pid_max: int) -> Owner:
    """Any of SoftFileLock's contents, or PIDLockFile's `pid\\n`; RecordProblem otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordProblem("the lock file is not valid UTF-8") from error
    if not text.strip():
        return Owner(layout="SoftFileLock <= 3.21 (empty)")
    if text.startswith(MARKER_PROTOCOL + "\n"):
        return _parse_marker(text, pid_max)
    lines = text.split("\n")[:-1] if text.endswith("\n") else None
    if lines is None:
        raise RecordProblem("the lock file's last line is incomplete (a write in progress?)")
    if len(lines) == 1:
        return Owner(pid=parse_pid(lines[0], pid_max), layout="PIDLockFile")
    if len(lines) not in (2, 3):
        raise RecordProblem("the lock file is not one of filelock's layouts")
    host, namespace = split_host(lines[1])
    owner = Owner(pid=parse_pid(lines[0], pid_max), host=host, pid_namespace=namespace)
    if len(lines) == 2:
        return replace(owner, layout="SoftFileLock 3.22-3.29 (pid, host)")
    boot_id, ticks = decode_start_token(_decimal(lines[2], "start token"))
    return replace(
        owner, boot_id=boot_id, start_ticks=ticks, layout="SoftFileLock >= 3.30 (pid, host, token)"
    )


def _parse_marker(text: str, pid_max: int) -> Owner:
    fields: dict[str, str] = {}
    for line in text.strip().split("\n")[1:]:
        key, separator, value = line.partition("=")
        if not separator or key in fields:
            raise RecordProblem(f"the filelock/2 marker has a bad line {line[:40]!r}")
        fields[key] = value
    if "pid" not in fields or "host" not in fields:
        raise RecordProblem("the filelock/2 marker names no pid or host")
    host, namespace = split_host(fields["host"])
    owner = Owner(
        pid=parse_pid(fields["pid"], pid_max),
        host=host,
        pid_namespace=namespace,
        layout=f"filelock/2 marker ({fields.get('mode', 'unknown')} mode)",
    )
    if "start" not in fields:
        return owner
    boot_id, ticks = decode_start_token(_decimal(fields["start"], "start token"))
    return replace(owner, boot_id=boot_id, start_ticks=ticks)


def _decimal(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 60:
        raise RecordProblem(f"the lock file's {what} {text[:40]!r} is not a decimal number")
    return int(text)


def pid_readings(digits: str, pid_max: int, max_rest: int) -> tuple[int, ...]:
    """Every PID a run of digits can start with, leaving 1..max_rest digits after it that do
    not start with 0 (Python prints no leading zeros): `134837184...` -> 1348, 13483, ..."""
    readings = []
    for length in range(1, len(digits)):
        head, rest = digits[:length], digits[length:]
        if head.startswith("0") or len(rest) > max_rest or (rest.startswith("0") and rest != "0"):
            continue
        if 2 <= int(head) <= pid_max:
            readings.append(int(head))
    return tuple(readings)


def parse_link_name(name: str, pid_max: int) -> Owner | None:
    """LinkLockFile's `HOST-TID.PIDHASH` / `HOST.PIDHASH`."""
    host_part, dot, pid_hash = name.rpartition(".")
    if not dot or not host_part or not re.fullmatch(r"[0-9]+(?:-?[0-9]+)?", pid_hash):
        return None
    host, _, tid = host_part.rpartition("-")
    if not host or not re.fullmatch(r"[0-9a-f]{1,8}", tid):
        host = host_part  # not threaded: the whole part is the host
    if "-" in pid_hash:  # a negative hash: the '-' separates the PID
        head = pid_hash.split("-", 1)[0]
        pid = int(head) if 2 <= int(head) <= pid_max and not head.startswith("0") else None
        candidates: tuple[int, ...] = () if pid is None else (pid,)
    else:
        candidates = pid_readings(pid_hash, pid_max, MAX_HASH_DIGITS)
    return _owner_from_candidates(host, candidates, "lockfile LinkLockFile")


def parse_mkdir_name(name: str, pid_max: int) -> Owner | None:
    """MkdirLockFile's `HOST.-TIDPID` / `HOST.PID`."""
    host, dot, rest = name.rpartition(".")
    if not dot or not host:
        return None
    if re.fullmatch(r"[0-9]+", rest):
        pid = int(rest)
        candidates: tuple[int, ...] = (pid,) if 2 <= pid <= pid_max else ()
    elif re.fullmatch(r"-[0-9a-f]+", rest):
        candidates = _tid_pid_readings(rest[1:], pid_max)
    else:
        return None
    return _owner_from_candidates(host, candidates, "lockfile MkdirLockFile")


def _tid_pid_readings(text: str, pid_max: int) -> tuple[int, ...]:
    readings = []
    for length in range(1, min(MAX_TID_HEX, len(text) - 1) + 1):
        pid_text = text[length:]
        if pid_text.isdigit() and not pid_text.startswith("0") and 2 <= int(pid_text) <= pid_max:
            readings.append(int(pid_text))
    return tuple(readings)


def _owner_from_candidates(host: str, candidates: tuple[int, ...], layout: str) -> Owner | None:
    if not candidates:
        return None
    if len(candidates) == 1:
        return Owner(pid=candidates[0], host=host, layout=layout)
    return Owner(host=host, candidates=candidates, layout=layout)


class SoftLockFile:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "py-filelock SoftFileLock, or lockfile's LinkLockFile / MkdirLockFile / PIDLockFile"
    layout = False
    directory = False
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        if not path.endswith(".lock"):
            return False
        if stat.S_ISDIR(status.st_mode):
            return _mkdir_owner(path, 2**22) is not None
        if not stat.S_ISREG(status.st_mode):
            return False
        if status.st_nlink == 2 and status.st_size == 0:
            return _link_sibling(path, status) is not None
        if not 0 < status.st_size <= RECORD_LIMIT:
            return False
        try:
            data, _ = read_record(path, RECORD_LIMIT)
            text = data.decode("utf-8")
        except (OSError, UnsafeRecord, UnicodeDecodeError):
            return False
        return LEGACY_LINE.fullmatch(text) is not None or text.startswith(MARKER_PROTOCOL + "\n")

    def read(self, path: str, pid_max: int) -> Claim:
        status = lstat_or_none(path)
        if status is None:
            return absent(NAME, path, existence_is_lock=True)
        base = Claim(
            format=NAME,
            path=path,
            present=True,
            existence_is_lock=True,
            keys=(key_of(status),),
            created_at=mtime_of(status),
            owner_uid=status.st_uid,
            remove_path=path,
        )
        if stat.S_ISDIR(status.st_mode):
            return _from_owner(base, _mkdir_owner(path, pid_max), f"{path}/ holds no lockfile name")
        if not stat.S_ISREG(status.st_mode):
            return replace(base, problem=f"{path} is neither a lock file nor a lock directory")
        if status.st_nlink == 2 and status.st_size == 0:
            # A hard-linked empty file is a LinkLockFile: without its other name, no owner.
            missing = f"{path} is hard-linked (a LinkLockFile) but its other name was not found"
            owner = _link_sibling(path, status, pid_max)
            return _from_owner(replace(base, record_path=path), owner, missing)
        return _from_file(base, path, pid_max)


def _from_file(base: Claim, path: str, pid_max: int) -> Claim:
    try:
        data, _ = read_record(path, RECORD_LIMIT)
        owner = parse_soft_record(data, pid_max)
    except FileNotFoundError:
        return absent(NAME, path, existence_is_lock=True)
    except (UnsafeRecord, RecordProblem) as error:
        return replace(base, problem=f"{path}: {error}", record_path=path)
    claim = _from_owner(replace(base, record_path=path), owner, "")
    if owner.pid is None:  # only the open descriptor tells who holds an empty one
        return replace(claim, stale=Staleness(StaleProof.NO_OPENER, SOFT_RELEASE_FACT))
    if owner.start_ticks is None:  # written once, when taken: its time dates the holder
        return replace(claim, started_at=base.created_at)
    return claim


def _from_owner(base: Claim, owner: Owner | None, missing: str) -> Claim:
    if owner is None:
        return replace(base, problem=missing)
    return replace(
        base,
        pid=owner.pid,
        host=owner.host,
        pid_namespace=owner.pid_namespace,
        boot_id=owner.boot_id,
        start_ticks=owner.start_ticks,
        pid_proof=PidProof(candidates=owner.candidates),
        started_at=owner.started_at,
        note=f"layout: {owner.layout}",
    )


def _mkdir_owner(path: str, pid_max: int) -> Owner | None:
    try:
        entries = list_directory(path)
    except (OSError, UnsafeRecord):
        return None
    files = [entry for entry in entries if entry.is_file(follow_symlinks=False)]
    if len(files) != 1:
        return None
    owner = parse_mkdir_name(files[0].name, pid_max)
    if owner is None:
        return None
    # The name file is made right after the directory: its time is when the lock was taken.
    return replace(owner, started_at=mtime_of(files[0].stat(follow_symlinks=False)))


def _link_sibling(path: str, status: os.stat_result, pid_max: int = 2**22) -> Owner | None:
    """The other name of a LinkLockFile's hard link, found by inode in the same directory."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        for entry in scan_directory(directory, SIBLING_SCAN_LIMIT):
            if entry.inode() == status.st_ino and entry.path != os.path.abspath(path):
                owner = parse_link_name(entry.name, pid_max)
                return None if owner is None else replace(owner, started_at=mtime_of(status))
    except OSError:
        return None
    return None
