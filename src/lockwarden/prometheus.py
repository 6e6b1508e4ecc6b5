"""The Prometheus textfile: per-lock gauges for node-exporter's textfile collector.

Written after every run to a temporary file in the same directory, flushed to disk, then
renamed over the old one, so the collector (and anyone else) sees either the previous complete
file or the new complete file, never half of one. The temporary name does not end in `.prom`,
so the collector never reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from lockwarden.atomic import write_atomically
from lockwarden.model import Finding, State
from lockwarden.run import RunResult
from lockwarden.structs import struct

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
ALERTS_UNDELIVERED = (
    "lockwarden_alerts_undelivered",
    "Alert messages the last run could not deliver to every service (retried, given up, or "
    "unsent for a broken [notify]); above 0 means a person may not have been told",
)
NOTIFY_UNUSABLE = (
    "lockwarden_notify_services_unusable",
    "Configured notify URLs (or apprise config files) that apprise cannot use",
)
LAST_DELIVERY = (
    "lockwarden_last_delivery_timestamp_seconds",
    "Unix time of the last alert a service confirmed (from the state journal)",
)


@struct
class DeliveryMetrics:
    """What the alert stage of a run could not deliver, for the textfile."""

    undelivered: int
    unusable_services: int
    last_delivered_at: datetime | None


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


def render_metrics(
    result: RunResult, duration_s: float, delivery: DeliveryMetrics | None = None
) -> str:
    """The whole textfile for one run, in the Prometheus text exposition format."""
    findings = result.findings
    lines = [
        *gauge(LOCK_STATE, ((lock_labels(f), float(f.severity)) for f in findings)),
        *gauge(LOCK_HELD_SECONDS, ((lock_labels(f), held_seconds(f)) for f in findings)),
        *gauge(LOCK_WAITERS, ((lock_labels(f), float(len(f.waiters))) for f in findings)),
        *gauge(LAST_RUN, [("", result.checked_at.timestamp())]),
        *gauge(RUN_DURATION, [("", duration_s)]),
    ]
    if delivery is not None:
        lines.extend(delivery_lines(delivery))
    return "\n".join(lines) + "\n"


def delivery_lines(delivery: DeliveryMetrics) -> list[str]:
    lines = [
        *gauge(ALERTS_UNDELIVERED, [("", float(delivery.undelivered))]),
        *gauge(NOTIFY_UNUSABLE, [("", float(delivery.unusable_services))]),
    ]
    if delivery.last_delivered_at is not None:  # never delivered: absent, not a fake 0
        lines.extend(gauge(LAST_DELIVERY, [("", delivery.last_delivered_at.timestamp())]))
    return lines


def write_textfile(
    path: str, result: RunResult, duration_s: float, delivery: DeliveryMetrics | None = None
) -> None:
    """Mode 0644: node-exporter runs as another user and must read it."""
    write_atomically(path, render_metrics(result, duration_s, delivery), mode=0o644)
