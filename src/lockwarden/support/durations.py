"""The one duration parser and formatter: "90s", "15m", "2h", "1h30m", "2d", "0"."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class DurationError(ValueError):
    pass


def parse_duration(text: object) -> float:
    """Seconds in a duration string; raise DurationError with a hint on anything else."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(f'{text!r} is not a duration; use a string such as "15m"')
    compact = text.strip().lower().replace(" ", "")
    if compact == "0":
        return 0.0
    if not compact or _PART.sub("", compact) != "":
        raise DurationError(f'"{text}" is not a duration; use e.g. "15m"')
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(compact))


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 7m05s, 2h01m, 3d04h."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_limit(seconds: float) -> str:
    """A declared limit as a person writes it, zero parts dropped, and read back exactly by
    parse_duration: 30m, 1h, 1h30m, 90s -> 1m30s, 0.2 -> 200ms."""
    milliseconds = max(0, round(seconds * 1000))
    whole, millis = divmod(milliseconds, 1000)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    if millis:
        parts.append(f"{millis}ms")
    return "".join(parts) or "0s"


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, to the second, whatever zone the moment came in:
    `2026-12-02T09:58:00Z`. The one way a moment is written: the state journal, reports,
    messages, Alertmanager's startsAt and endsAt."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_config_duration(seconds: float) -> str:
    """Exact, in the units a config is written in: 900 -> "15m", 5400 -> "1h30m", 0.5 -> "500ms",
    86400 -> "24h" (hours at most, as the defaults and examples are written: check-config must
    show a default as `init` and the example config write it).
    parse_duration(format_config_duration(x)) == x for every whole number of milliseconds."""
    milliseconds = round(seconds * 1000)
    if milliseconds == 0:
        return "0"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, milliseconds = divmod(milliseconds, size)
        if count:
            parts.append(f"{count}{unit}")
    if milliseconds:
        parts.append(f"{milliseconds}ms")
    return "".join(parts)


def parse_time(text: Any) -> datetime | None:
    """A moment the journal wrote (or any RFC 3339 text); None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def stamp(moment: datetime | None) -> str:
    """format_time, or "unknown" for a moment nobody recorded."""
    if moment is None:
        return "unknown"
    return format_time(moment)
