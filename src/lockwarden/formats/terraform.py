"""Terraform's local state lock: an fcntl write lock on `terraform.tfstate`, described by the
JSON file `.terraform.tfstate.lock.info` beside it (`ID`, `Operation`, `Info`, `Who` as
`user@host`, `Version`, `Created`, `Path`).

Terraform (internal/states/statemgr/filesystem*.go) takes the kernel lock first, writes the
info, and on unlock removes the info before dropping the lock; so the info without a kernel lock
on the state file is a leftover, and with one it names who runs which operation. The info
records no PID: the kernel's lock table names the process.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from datetime import datetime
from typing import Any

from lockwarden.formats.base import (
    STOP_HOLDER,
    absent,
    key_of,
    lstat_or_none,
    mtime_of,
    one_name,
)
from lockwarden.formats.hidden import hidden_locks
from lockwarden.formats.record import RecordProblem, parse_timestamp
from lockwarden.model import Claim, Staleness, StaleProof
from lockwarden.support.safe_read import UnsafeRecord, read_record

NAME = "terraform"
STATE_NAME = "terraform.tfstate"


def info_path_for(state_path: str) -> str:
    """`.NAME.lock.info` beside the state; terraform drops a leading dot of NAME first."""
    directory, name = os.path.split(state_path)
    return os.path.join(directory, f".{name.removeprefix('.')}.lock.info")


def state_path_for(path: str) -> str:
    """The state file, given it, its lock info, or the directory holding them."""
    status = lstat_or_none(path)
    if status is not None and stat.S_ISDIR(status.st_mode):
        return os.path.join(path, STATE_NAME)
    directory, name = os.path.split(path)
    if name.startswith(".") and name.endswith(".lock.info"):
        return os.path.join(directory, name[1 : -len(".lock.info")])
    return path


class TerraformState:
    name = NAME
    flock = False
    holder_action = STOP_HOLDER
    summary = "Terraform's local state lock (fcntl on terraform.tfstate + .lock.info JSON)"
    layout = False
    directory = True
    never_removed = None

    def detect(self, path: str, status: os.stat_result) -> bool:
        state = state_path_for(path)
        return os.path.basename(state).endswith(".tfstate") and (
            lstat_or_none(state) is not None or lstat_or_none(info_path_for(state)) is not None
        )

    def read(self, path: str, pid_max: int) -> Claim:
        state_path = state_path_for(path)
        info_path = info_path_for(state_path)
        state = lstat_or_none(state_path)
        keys = () if state is None else (key_of(state),)
        if lstat_or_none(info_path) is None:
            if state is None:
                return absent(NAME, state_path, existence_is_lock=False)
            # No info: only a kernel lock on the state file (taken just before the info is
            # written) can mean it is held.
            return Claim(
                format=NAME,
                path=state_path,
                present=True,
                existence_is_lock=False,
                keys=keys,
                hidden_locks=hidden_locks([(state_path, key) for key in keys]),
            )
        # With the info, the lock's path is the info's; the kernel lock is on the state file
        # beside it, named so that a holder's descriptor shows it is on this lock's own file.
        named = one_name(state_path, state) if state is not None else None
        claim = _claim_from_info(info_path, state_path, keys)
        return replace(claim, key_names=(named,)) if named and claim.present else claim


def _claim_from_info(info_path: str, state_path: str, keys: tuple[tuple[int, int], ...]) -> Claim:
    base = Claim(
        format=NAME,
        path=info_path,
        present=True,
        existence_is_lock=True,
        keys=keys,
        stale=Staleness(
            StaleProof.NO_KERNEL_LOCK,
            f"terraform keeps an fcntl lock on {state_path} for as long as it holds the state lock",
        ),
        record_path=info_path,
        remove_path=info_path,
    )
    try:
        data, status = read_record(info_path)
        info = _parse_info(data)
    except FileNotFoundError:
        return absent(NAME, info_path, existence_is_lock=True)
    except (UnsafeRecord, RecordProblem) as error:
        return Claim(
            format=NAME,
            path=info_path,
            present=True,
            existence_is_lock=True,
            keys=keys,
            problem=f"{info_path}: {error}",
        )
    user, _, host = (info.get("Who") or "").rpartition("@")
    operation = info.get("Operation") or "an operation"
    return replace(
        base,
        role=f"terraform {operation} by {info.get('Who') or 'someone'}",
        user=user or None,
        host=host or None,
        started_at=info.get("Created"),
        created_at=mtime_of(status),
        owner_uid=status.st_uid,
        extra={key: info[key] for key in ("ID", "Info", "Version", "Path") if key in info},
    )


def _parse_info(data: bytes) -> dict[str, Any]:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise RecordProblem(f"the lock info is not valid JSON ({error})") from error
    if not isinstance(document, dict):
        raise RecordProblem("the lock info is JSON but not an object")
    info: dict[str, Any] = {}
    for key in ("ID", "Operation", "Info", "Who", "Version", "Path"):
        value = document.get(key)
        if value is not None and not isinstance(value, str):
            raise RecordProblem(f"the lock info's {key} is not text")
        if value:
            info[key] = value[:256]
    created = _created(document.get("Created"))
    if created is not None:
        info["Created"] = created
    return info


def _created(value: Any) -> datetime | None:
    """Go writes nanoseconds (`2026-12-02T11:35:15.123456789Z`); Python reads at most six.
    A time that cannot be read only loses the age, not the lock: None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "." in text:
        head, _, rest = text.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        return parse_timestamp(text)
    except RecordProblem:
        return None
