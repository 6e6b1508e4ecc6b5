"""The Prometheus textfile: per-lock gauges for node-exporter's textfile collector.

Written after every run to a temporary file in the same directory, flushed to disk, then
renamed over the old one, so the collector (and anyone else) sees either the previous complete
file or the new complete file, never half of one. The temporary name does not end in `.prom`,
so the collector never reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from lockwarden.atomic import write_atomically
from lockwarden.model import Finding, State
from lockwarden.run import RunResult

LOCK_LABELS = ("lock", "path", "state", "holder_role", "holder_unit")

# Each metric: (name, help text); all are gauges.
LOCK_STATE = (
    "lockwarden_lock_state",
    "Severity of the lock's state (0 ok, 1 warning, 2 critical, 3 unknown); "
    "the state itself is the state label",
)
LOCK_HELD_SECONDS = (
    "lockwarden_lock_held_seconds",
    "How long the current holder has held the lock (0 when free, NaN when not known)",
)
LOCK_WAITERS = ("lockwarden_lock_waiters", "Processes blocked waiting for the lock")
LAST_RUN = (
    "lockwarden_last_run_timestamp_seconds",
    "Unix time of the last completed lockwarden run",
)
RUN_DURATION = ("lockwarden_run_duration_seconds", "How long the last lockwarden run took")


def escape_label_value(value: str) -> str:
    """The exposition format's escapes for a label value: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def lock_labels(finding: Finding) -> str:
    holder = finding.holder
    values = (
        finding.name,
        finding.path,
        finding.state.value,
        (holder.role or "") if holder else "",
        (holder.unit or "") if holder else "",
    )
    pairs = (
        f'{name}="{escape_label_value(value)}"'
        for name, value in zip(LOCK_LABELS, values, strict=True)
    )
    return "{" + ",".join(pairs) + "}"


def held_seconds(finding: Finding) -> float:
    if finding.state is State.FREE:
        return 0.0
    return math.nan if finding.held_for_s is None else finding.held_for_s


def gauge(metric: tuple[str, str], samples: Iterable[tuple[str, float]]) -> list[str]:
    name, help_text = metric
    lines = [f"# HELP {name} {escape_help(help_text)}", f"# TYPE {name} gauge"]
    lines.extend(f"{name}{labels} {number(value)}" for labels, value in samples)
    return lines


def render_metrics(result: RunResult, duration_s: float) -> str:
    """The whole textfile for one run, in the Prometheus text exposition format."""
    findings = result.findings
    lines = [
        *gauge(LOCK_STATE, ((lock_labels(f), float(f.severity)) for f in findings)),
        *gauge(LOCK_HELD_SECONDS, ((lock_labels(f), held_seconds(f)) for f in findings)),
        *gauge(LOCK_WAITERS, ((lock_labels(f), float(len(f.waiters))) for f in findings)),
        *gauge(LAST_RUN, [("", result.checked_at.timestamp())]),
        *gauge(RUN_DURATION, [("", duration_s)]),
    ]
    return "\n".join(lines) + "\n"


def write_textfile(path: str, result: RunResult, duration_s: float) -> None:
    """Mode 0644: node-exporter runs as another user and must read it."""
    write_atomically(path, render_metrics(result, duration_s), mode=0o644)
