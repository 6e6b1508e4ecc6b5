"""Turn the text of an owner record into typed fields, once, refusing anything untrustworthy.

Accepted: a JSON object (`pid`, `role`, `host`/`hostname`, `startedAt`/`started_at`/
`acquired_at`, plus lockwarden's own `boot_id`, `start_ticks`, `pid_namespace`, `max_hold`),
`key=value` lines (`pid=N\\nacquired_at=RFC3339\\n`), or a bare PID. Anything ambiguous
(duplicate keys, NaN, a PID that is not a plain integer in range) becomes a `problem`, never a
guess.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockwarden.support.durations import DurationError, parse_duration

MAX_PID_DIGITS = 10
MAX_TEXT = 256
MAX_EXTRA = 32
MAX_COUNTER = 2**63 - 1
# A record's time outside these years is a lie or garbage; refusing it here also keeps every
# later datetime sum (time + margin) from overflowing.
EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

PID_KEYS = ("pid", "PID", "owner_pid", "ownerPid")
ROLE_KEYS = ("role", "owner", "purpose", "operation")
HOST_KEYS = ("host", "hostname", "node")
TIME_KEYS = ("startedAt", "started_at", "acquired_at", "acquiredAt", "created_at", "createdAt")


class RecordProblem(ValueError):
    pass


@dataclass(frozen=True)
class OwnerRecord:
    """The fields an owner record may carry, whatever its syntax."""

    pid: int | None = None
    role: str | None = None
    host: str | None = None
    user: str | None = None
    started_at: datetime | None = None
    started_at_naive: bool = False
    """The start time is text with no offset (read as UTC; maybe its writer's local time)."""
    boot_id: str | None = None
    start_ticks: int | None = None
    pid_namespace: int | None = None
    max_hold_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    style: str = "empty"


def parse_record(data: bytes, pid_max: int) -> OwnerRecord:
    """Parse record bytes; raise RecordProblem with a one-sentence reason."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        raise RecordProblem(f"the record is not valid UTF-8 (byte {error.start})") from error
    if not text:
        return OwnerRecord()
    if text.startswith("{"):
        return _from_mapping(_load_json(text), pid_max, "json")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if all("=" in line for line in lines):
        return _from_mapping(_key_values(lines), pid_max, "key-value")
    if len(lines) == 1:
        return OwnerRecord(pid=parse_pid(lines[0], pid_max), style="bare")
    raise RecordProblem("the record is neither JSON, key=value lines nor a bare PID")


def _load_json(text: str) -> dict[str, Any]:
    def refuse_constant(name: str) -> None:
        raise RecordProblem(f"the record contains {name}, which is not JSON")

    def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping = dict(pairs)  # a set-based check: 64 KiB of keys must not cost seconds
        if len(mapping) != len(pairs):
            raise RecordProblem(f"the record repeats the key {_first_repeat(pairs)[:40]!r}")
        return mapping

    try:
        value = json.loads(text, parse_constant=refuse_constant, object_pairs_hook=unique_pairs)
    except RecursionError as error:
        raise RecordProblem("the record is nested too deeply") from error
    except (json.JSONDecodeError, ValueError) as error:
        if isinstance(error, RecordProblem):
            raise
        raise RecordProblem(f"the record is not valid JSON ({error})") from error
    if not isinstance(value, dict):
        raise RecordProblem("the record is JSON but not an object")
    return value


def _first_repeat(pairs: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return ""


def _key_values(lines: list[str]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for line in lines:
        key, _, value = line.partition("=")
        key = key.strip()
        if key in mapping:
            raise RecordProblem(f"the record repeats the key {key!r}")
        mapping[key] = value.strip()
    return mapping


def _from_mapping(mapping: dict[str, Any], pid_max: int, style: str) -> OwnerRecord:
    pid_value = _first(mapping, PID_KEYS)
    timestamp = _first(mapping, TIME_KEYS)
    known = {*PID_KEYS, *ROLE_KEYS, *HOST_KEYS, *TIME_KEYS, "user", "boot_id", "start_ticks"}
    known |= {"pid_namespace", "max_hold"}
    return OwnerRecord(
        pid=None if pid_value is None else parse_pid(pid_value, pid_max),
        role=_text(_first(mapping, ROLE_KEYS)),
        host=_text(_first(mapping, HOST_KEYS)),
        user=_text(mapping.get("user")),
        started_at=None if timestamp is None else parse_timestamp(timestamp),
        started_at_naive=timestamp is not None and is_naive(timestamp),
        boot_id=_boot_id(mapping.get("boot_id")),
        start_ticks=_optional_int(mapping.get("start_ticks"), "start_ticks"),
        pid_namespace=_optional_int(mapping.get("pid_namespace"), "pid_namespace"),
        max_hold_s=_optional_duration(mapping.get("max_hold")),
        extra=_extra(mapping, known),
        style=style,
    )


def _extra(mapping: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """Unknown keys kept for the report: scalars only, so nothing deep or huge travels on."""
    kept: dict[str, Any] = {}
    for key, value in mapping.items():
        if len(kept) >= MAX_EXTRA:
            break
        if key in known or not isinstance(value, str | int | float | bool | None):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_COUNTER:
            continue
        kept[key[:MAX_TEXT]] = value[:MAX_TEXT] if isinstance(value, str) else value
    return kept


def _boot_id(value: Any) -> str | None:
    """A boot id proves "another boot" only when it is one: a lowercase UUID as the kernel
    prints it. Anything else would turn garbage into a stale verdict."""
    text = _text(value)
    if text is None:
        return None
    if not BOOT_ID.fullmatch(text.strip()):
        raise RecordProblem(f"the record's boot_id {text[:40]!r} is not a boot id")
    return text.strip()


def _first(mapping: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((mapping[key] for key in keys if key in mapping), None)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.isprintable():
        raise RecordProblem(f"the record has a non-text value {_preview(value)}")
    return value[:MAX_TEXT]


def _optional_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    if type(value) is int and 0 <= value <= MAX_COUNTER:
        return value
    raise RecordProblem(f"the record's {key} is not a non-negative integer")


def _optional_duration(value: Any) -> float | None:
    """`max_hold`, the holder's own declared limit: "30m" (as `lockwarden hold` writes it) or
    seconds as a number."""
    if value is None:
        return None
    if type(value) in (int, float) and math.isfinite(value) and value > 0:
        return float(value)
    try:
        seconds = parse_duration(value)
    except DurationError:
        shown = str(value)[:40]
        raise RecordProblem(f"the record's max_hold {shown!r} is not a duration") from None
    if seconds <= 0:
        raise RecordProblem("the record's max_hold is not a positive duration")
    return seconds


def parse_pid(value: Any, pid_max: int) -> int:
    """A PID is a plain integer in 2..pid_max; booleans, floats and long strings are refused."""
    if isinstance(value, str):
        digits = value.strip()
        if not digits.isascii() or not digits.isdigit() or len(digits) > MAX_PID_DIGITS:
            raise RecordProblem(f"the record's pid {digits[:20]!r} is not a process id")
        value = int(digits)
    if type(value) is not int:
        raise RecordProblem(f"the record's pid {_preview(value)} is not a process id")
    if not 2 <= value <= pid_max:
        raise RecordProblem(f"the record's pid {_preview(value)} is outside 2..{pid_max}")
    return value


def _preview(value: Any) -> str:
    """A short, printable hint of a refused value for the reason; never the whole thing."""
    if type(value) is int and abs(value) >= 10**12:
        return f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return repr(str(value)[:20])


def parse_timestamp(value: Any) -> datetime:
    """RFC 3339 text or Unix time (seconds, or milliseconds as JavaScript writes them),
    between 1970 and 9000; anything else is a problem, never a guess."""
    moment = _timestamp(value)
    if not EARLIEST <= moment <= LATEST:
        raise RecordProblem("the record's start time is out of range")
    return moment


def is_naive(value: Any) -> bool:
    """RFC 3339-like text without an offset (`2026-12-06T10:00:00`): a wall-clock time in a zone
    it does not name. Its writer may mean UTC (`datetime.utcnow()`) or its own local time
    (`datetime.now()`)."""
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).tzinfo is None
    except ValueError:
        return False


def _timestamp(value: Any) -> datetime:
    if isinstance(value, bool):
        raise RecordProblem("the record's start time is not a time")
    if isinstance(value, int | float):
        try:
            if not math.isfinite(value) or value <= 0:
                raise RecordProblem("the record's start time is not a time")
            seconds = value / 1000 if value > 1e11 else value
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError) as error:
            raise RecordProblem("the record's start time is out of range") from error
    if isinstance(value, str) and len(value) <= 64:
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            if text.isascii() and text.isdigit():
                return _timestamp(int(text))
            raise RecordProblem(f"the record's start time {value!r} is not RFC 3339") from None
        return _as_utc(parsed)
    raise RecordProblem("the record's start time is not a time")


def _as_utc(parsed: datetime) -> datetime:
    """Aware, in UTC; an offset that pushes year 1 or 9999 over the edge is out of range."""
    try:
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (OverflowError, ValueError) as error:
        raise RecordProblem("the record's start time is out of range") from error
