"""The Prometheus textfile: per-lock and per-run gauges for node-exporter's textfile collector.

Written after every run to a temporary file in the same directory, flushed to disk, then
renamed over the old one, so the collector (and anyone else) sees either the previous complete
file or the new complete file, never half of one. The temporary name does not end in `.prom`,
so the collector never reads it. Samples carry no timestamps: the scrape time is the truth, and
an old file is caught by the age of `lockwarden_last_run_timestamp_seconds`.

Labels: every per-lock series is keyed by `lock` and `path` only, never by anything about this
host, so the same lock on shared storage seen by several hosts differs only in the labels
Prometheus adds per target (`instance`, and a `host` label by relabelling); Alertmanager's
`group_by: [alertname, lock]` then makes them one notification. What changes while a lock is
held (the holder) lives on its own info series, so a new holder does not break the state's
history.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lockwarden import __version__
from lockwarden.model import Bound, Finding, Severity, State, own_finding
from lockwarden.support.atomic import write_atomically
from lockwarden.support.trusted import Untrusted, write_problem


@dataclass(frozen=True)
class Metric:
    """One metric family of the textfile: its name and help; all are gauges."""

    name: str
    help: str


# The one table of metric names: add a row here (and to docs/fleet.md's table) for a new metric.
LOCK_STATE = Metric(
    "lockwarden_lock_state",
    "1 for the lock's current state (the state label), 0 for the others",
)
LOCK_SEVERITY = Metric(
    "lockwarden_lock_severity",
    "1 for the lock's current severity (the severity label: ok, warning, critical, unknown), "
    "0 for the others",
)
LOCK_HOLDER_INFO = Metric(
    "lockwarden_lock_holder_info",
    "Always 1; the labels name the holder and the action (a lock with no holder to name has "
    "none; a stale one names the gone holder in gone_pids, with the proof); a label without a "
    "value is left out",
)
LOCK_HELD_SECONDS = Metric(
    "lockwarden_lock_held_seconds",
    "How long the current holder has held the lock (0 when free; absent when not known)",
)
LOCK_HOLD_STARTED = Metric(
    "lockwarden_lock_hold_started_timestamp_seconds",
    "Unix time the current hold began (absent when not known); lockwarden_lock_held_bound says "
    "how sure that is",
)
LOCK_HELD_BOUND = Metric(
    "lockwarden_lock_held_bound",
    "1 for how the held duration is known (the bound label: exact, at_least, at_most, "
    "unknown), 0 for the others; a lock that is not free only",
)
LOCK_WAITERS = Metric("lockwarden_lock_waiters", "Processes blocked waiting for the lock")
LAST_RUN = Metric(
    "lockwarden_last_run_timestamp_seconds", "Unix time of the last completed lockwarden run"
)
RUN_DURATION = Metric("lockwarden_run_duration_seconds", "How long the last lockwarden run took")
ALERTS_UNDELIVERED = Metric(
    "lockwarden_alerts_undelivered",
    "Alert messages the last run could not deliver to every service or Alertmanager (retried, "
    "given up, or unsent for a broken [notify]); above 0 means a person may not have been told",
)
NOTIFY_UNUSABLE = Metric(
    "lockwarden_notify_services_unusable",
    "Configured notify URLs (or apprise config files) that apprise cannot use",
)
LAST_DELIVERY = Metric(
    "lockwarden_last_delivery_timestamp_seconds",
    "Unix time of the last alert a service confirmed, from the state journal (absent: never)",
)
BUILD_INFO = Metric("lockwarden_build_info", "Always 1; the version label is lockwarden's")

METRICS = (
    LOCK_STATE,
    LOCK_SEVERITY,
    LOCK_HOLDER_INFO,
    LOCK_HELD_SECONDS,
    LOCK_HOLD_STARTED,
    LOCK_HELD_BOUND,
    LOCK_WAITERS,
    LAST_RUN,
    RUN_DURATION,
    ALERTS_UNDELIVERED,
    NOTIFY_UNUSABLE,
    LAST_DELIVERY,
    BUILD_INFO,
)

Sample = tuple[dict[str, str], float]


@dataclass(frozen=True)
class RunFacts:
    """What the textfile says about the run itself, beside its findings."""

    checked_at: datetime
    duration_s: float
    undelivered: int = 0
    unusable_services: int = 0
    last_delivered_at: datetime | None = None


@dataclass(frozen=True)
class HoldStart:
    """When the current hold began, and how sure that is."""

    at: float  # Unix time; NaN when not known
    bound: str  # exact, at_least, at_most or unknown: how the held duration is known


def hold_start(finding: Finding) -> HoldStart:
    """The start of the hold as the finding's judge saw it (model.Held), with the bound its
    duration has: exact from a record, at_least from the sighting memory, at_most from a
    running time."""
    held = finding.held
    if held.since is None:
        return HoldStart(math.nan, Bound.UNKNOWN.value)
    return HoldStart(held.since.timestamp(), held.bound.value)


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


def labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    pairs = (f'{name}="{escape_label_value(value)}"' for name, value in labels.items())
    return "{" + ",".join(pairs) + "}"


def lock_labels(finding: Finding, **extra: str) -> dict[str, str]:
    return {"lock": finding.name, "path": finding.path, **extra}


HOLDER_LABELS = (
    "holder_pid",
    "holder_pids",
    "holder_role",
    "holder_unit",
    "holder_user",
    "gone_pids",
    "proof",
    "action",
    "store",
)
"""Every label the info series may carry, in order; the rules join them all."""


def holder_labels(finding: Finding) -> dict[str, str]:
    """The holder as the alert rules carry it into a notification, only the labels that have
    a value (Prometheus drops an empty one, and an info series with empty labels is noise):
    every process that holds the lock (`holder_pids`: `flock FILE cmd` is flock and its
    command), and the action that frees it, the same as the report's and the alert's. A stale
    lock names the holder its record gave and the proof that it is gone (`gone_pids`: never
    `holder_pid`, as a reused PID now belongs to another process)."""
    holder = finding.holder
    pids = [process.pid for process in finding.holders if process.pid is not None]
    stale = finding.state is State.STALE
    labels = {
        "holder_pid": "" if holder is None or holder.pid is None else str(holder.pid),
        "holder_pids": " ".join(str(pid) for pid in pids),
        "holder_role": "" if holder is None else holder.role or holder.name or "",
        "holder_unit": "" if holder is None else holder.unit or "",
        "holder_user": "" if holder is None else holder.user or "",
        "gone_pids": " ".join(str(pid) for pid in finding.gone_pids),
        "proof": (finding.proof or "") if stale else "",
        "action": finding.action or "",
        "store": finding.store or "",
    }
    return {name: value for name, value in labels.items() if value}


def holder_info_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    """One series for each lock with something to say of its holder or its action; none for
    a free lock or one nobody can be named for."""
    for finding in findings:
        labels = holder_labels(finding)
        if labels:
            yield lock_labels(finding, **labels), 1.0


def held_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    """0 for a free lock, the held time when known; no sample when not known (a NaN would
    poison every sum and max over the fleet)."""
    for finding in findings:
        if finding.state is State.FREE:
            yield lock_labels(finding), 0.0
        elif finding.held_for_s is not None:
            yield lock_labels(finding), finding.held_for_s


def state_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    for finding in findings:
        for state in State:
            yield lock_labels(finding, state=state.value), float(finding.state is state)


def severity_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    """One-hot, like the state: a numeric enum would rank unknown above critical under `max`."""
    for finding in findings:
        for severity in Severity:
            labels = lock_labels(finding, severity=severity.label)
            yield labels, float(finding.severity is severity)


def hold_start_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    for finding in findings:
        if finding.state is not State.FREE:
            start = hold_start(finding)
            if not math.isnan(start.at):
                yield lock_labels(finding), start.at


def held_bound_samples(findings: Sequence[Finding]) -> Iterable[Sample]:
    """One-hot, like the state: the bound changes during one hold (at_most on the first run,
    at_least after), and a label of the start's own series would make it a new series."""
    for finding in findings:
        if finding.state is not State.FREE:
            known = hold_start(finding).bound
            for bound in Bound:
                yield lock_labels(finding, bound=bound.value), float(bound.value == known)


def per_lock(findings: Sequence[Finding]) -> list[str]:
    return [
        *family(LOCK_STATE, state_samples(findings)),
        *family(LOCK_SEVERITY, severity_samples(findings)),
        *family(LOCK_HOLDER_INFO, holder_info_samples(findings)),
        *family(LOCK_HELD_SECONDS, held_samples(findings)),
        *family(LOCK_HOLD_STARTED, hold_start_samples(findings)),
        *family(LOCK_HELD_BOUND, held_bound_samples(findings)),
        *family(LOCK_WAITERS, ((lock_labels(f), float(len(f.waiters))) for f in findings)),
    ]


def family(metric: Metric, samples: Iterable[Sample]) -> list[str]:
    lines = [f"# HELP {metric.name} {escape_help(metric.help)}", f"# TYPE {metric.name} gauge"]
    lines.extend(f"{metric.name}{labels_text(labels)} {number(value)}" for labels, value in samples)
    return lines


def render_metrics(findings: Sequence[Finding], run: RunFacts) -> str:
    """The whole textfile for one run, in the Prometheus text exposition format."""
    lines = [
        *per_lock(findings),
        *family(LAST_RUN, [({}, run.checked_at.timestamp())]),
        *family(RUN_DURATION, [({}, run.duration_s)]),
        *family(ALERTS_UNDELIVERED, [({}, float(run.undelivered))]),
        *family(NOTIFY_UNUSABLE, [({}, float(run.unusable_services))]),
        *family(BUILD_INFO, [({"version": __version__}, 1.0)]),
    ]
    if run.last_delivered_at is not None:  # never delivered: absent, not a fake 0
        lines.extend(family(LAST_DELIVERY, [({}, run.last_delivered_at.timestamp())]))
    return "\n".join(lines) + "\n"


TEXTFILE_FINDING = "lockwarden:prometheus"


def unwritten(path: str, error: OSError) -> Finding:
    """lockwarden's own finding when the textfile could not be written: unknown (exit 3, or 2
    beside a critical lock), as a textfile never written has no series for the rules' "agent
    silent" alert to see go stale."""
    reason = f"could not write the Prometheus textfile: {error}"
    return own_finding(TEXTFILE_FINDING, path, "textfile", reason)


def write_textfile(path: str, findings: Sequence[Finding], run: RunFacts) -> None:
    """Mode 0644: node-exporter runs as another user and must read it. Never into a directory
    another user could change (support/trusted.py): they could swap what root writes there,
    or forge the series the alert rules read; Untrusted (an OSError) says which and the fix.
    The write itself follows no symlink: a new temporary file renamed over the name."""
    untrusted = write_problem(os.path.dirname(path) or ".")
    if untrusted is not None:
        raise Untrusted(f"refused to write {path}: {untrusted}")
    write_atomically(path, render_metrics(findings, run), mode=0o644)
