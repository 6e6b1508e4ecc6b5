"""Alerts straight to Alertmanager's v2 API, for hosts that no Prometheus scrapes.

Alertmanager keeps alerts as state, not messages: a client posts every alert that is firing,
again and again, each with an `endsAt` a little in the future, and Alertmanager ends one by
itself when no post renews it in time. So this is a sibling of the apprise path, not one of its
services: every run posts the alerts firing now (endsAt = now + `ends_after`), and posts an
alert that stopped firing once more with endsAt = now, which resolves it at once. Each
configured URL gets every post (the peers of a cluster dedupe what they notify about).

The labels are those the shipped Prometheus rules give their alerts (alertname, lock, path,
host, severity, holder_*), so one Alertmanager route serves both ways. What was posted as
firing is remembered in `alertmanager.json` beside the state journal: a resolve needs the
exact labels that fired (a holder that changed is a new alert), and a resolve that no
Alertmanager took is posted again next run. An Alertmanager that is down costs one bounded
request per URL per run, never a burst, and the apprise journal is not involved at all.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lockwarden.config import AlertmanagerSettings, hide_url
from lockwarden.model import Finding, Severity, State
from lockwarden.output.prometheus import holder_labels as textfile_holder_labels
from lockwarden.support.atomic import write_atomically
from lockwarden.support.durations import format_time

log = logging.getLogger(__name__)

STATE_NAME = "alertmanager.json"
API_PATH = "/api/v2/alerts"
ALERT_NAMES = {
    State.HELD_TOO_LONG: "LockwardenLockHeldTooLong",
    State.STALE: "LockwardenLockStale",
}

Labels = dict[str, str]
RUNBOOK: str = AlertmanagerSettings().runbook_url
"""The runbook, as the Debian package installs it ([alertmanager] runbook_url's default); the
shipped rules link the same."""

WATCHDOG: dict[str, str] = {"alertname": "LockwardenWatchdog", "severity": "none"}
WATCHDOG_ENDS_S = 300.0
"""The watchdog alert ends this long after the last run that posted it (five minutely runs)."""
WATCHDOG_TEXT = (
    "Always firing while lockwarden runs on this host: route it to a dead man's switch, whose "
    "silence says the agent stopped (its lock alerts then stay as the last run left them)."
)


@dataclass(frozen=True)
class Alert:
    """One alert as Alertmanager's API takes it (times as RFC 3339 strings)."""

    labels: Labels
    annotations: Labels
    starts_at: str
    ends_at: str = ""

    def payload(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": self.starts_at,
            "endsAt": self.ends_at,
        }


@dataclass(frozen=True)
class Posted:
    """What Alertmanager was told: alerts firing, and resolves not yet taken by all URLs."""

    firing: dict[str, Alert] = field(default_factory=dict)
    resolving: dict[str, Alert] = field(default_factory=dict)


@dataclass
class ManagerOutcome:
    """What one run posted, and which Alertmanagers did not take it."""

    firing: int = 0
    resolved: int = 0
    urls: int = 0
    failures: list[str] = field(default_factory=list)
    problem: str | None = None
    dry_run: bool = False

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.problem)

    def notes(self) -> tuple[str, ...]:
        if self.dry_run:
            return (f"alertmanager: would post {self.firing} firing, {self.resolved} resolved",)
        notes = [f"alertmanager: {failure}" for failure in self.failures]
        if self.problem:
            notes.append(f"alertmanager: {self.problem}")
        if self.firing or self.resolved:
            taken = self.urls - len(self.failures)
            notes.append(
                f"alertmanager: {self.firing} firing, {self.resolved} resolved posted; "
                f"{taken} of {self.urls} Alertmanager(s) took them"
            )
        return tuple(notes)


def holder_labels(finding: Finding) -> Labels:
    """The holder labels the rules join in from the textfile, without the empty ones (as
    Prometheus drops a label whose value is empty)."""
    return {name: value for name, value in textfile_holder_labels(finding).items() if value}


def alert_labels(finding: Finding, host: str) -> list[Labels]:
    """The labels of the alerts the shipped rules would fire for this finding: a lock held
    too long fires at severity warning, and past its critical budget at critical as well,
    beside it (so an escalation never resolves the warning; Alertmanager's inhibit_rules mute
    it); a stale lock at critical. `instance` is the host, as silences and inhibitions written
    for the Prometheus path match on it; `host` too, as the rules' relabelling gives it."""
    name = ALERT_NAMES.get(finding.state)
    if name is None:
        return []
    base = {"alertname": name, "lock": finding.name, "path": finding.path}
    where = {"instance": host, "host": host}
    severities = ["critical"] if finding.state is State.STALE else ["warning"]
    if finding.state is State.HELD_TOO_LONG and finding.severity is Severity.CRITICAL:
        severities.append("critical")
    return [
        {**base, **where, "severity": severity, **holder_labels(finding)} for severity in severities
    ]


def alert_annotations(finding: Finding, host: str, runbook: str = RUNBOOK) -> Labels:
    what = "is stale" if finding.state is State.STALE else "held too long"
    notes = {
        "summary": f"{finding.name} on {host} {what}",
        "description": finding.reason,
        "store": finding.store or "",
        "action": finding.action or "",
        "proof": finding.proof or "",
        "runbook_url": f"{runbook}#{ALERT_NAMES.get(finding.state, '').lower()}",
    }
    return {key: value for key, value in notes.items() if value}


def alert_key(labels: Mapping[str, str]) -> str:
    return json.dumps(sorted(labels.items()), separators=(",", ":"))


def plan(
    findings: Sequence[Finding],
    before: Posted,
    host: str,
    now: datetime,
    settings: AlertmanagerSettings,
) -> Posted:
    """What to post this run (pure): each firing alert renewed until now + ends_after, each one
    that stopped firing (or whose resolve is still owed) ended at the moment it stopped. An
    alert of a lock this run could not see (Finding.unseen) is neither resolved nor renewed:
    one failed look does not end it, and Alertmanager ends it by itself `ends_after` after the
    last run that saw the lock."""
    firing: dict[str, Alert] = {}
    until = format_time(now + timedelta(seconds=settings.ends_after))
    for finding in findings:
        for labels in alert_labels(finding, host):
            key = alert_key(labels)
            known = before.firing.get(key)
            started = known.starts_at if known is not None else format_time(now)
            notes = alert_annotations(finding, host, settings.runbook_url)
            firing[key] = Alert(labels, notes, started, until)
    if settings.watchdog:
        firing[alert_key(WATCHDOG)] = Alert(
            WATCHDOG | {"instance": host, "host": host},
            {"summary": f"lockwarden runs on {host}", "description": WATCHDOG_TEXT},
            format_time(now),
            format_time(now + timedelta(seconds=WATCHDOG_ENDS_S)),
        )
    unseen = {finding.name for finding in findings if finding.unseen}
    kept = {  # a lock this run could not see: not over, nor renewed (it ends by itself)
        key: alert
        for key, alert in before.firing.items()
        if key not in firing and alert.labels.get("lock") in unseen
    }
    firing.update({key: alert for key, alert in kept.items() if not _ended(alert, now)})
    resolving = {
        key: Alert(alert.labels, alert.annotations, alert.starts_at, format_time(now))
        for key, alert in before.firing.items()
        if key not in firing and key not in kept
    }
    for key, alert in before.resolving.items():
        if key not in firing and key not in resolving and _still_owed(alert, now, settings):
            resolving[key] = alert
    return Posted(firing, resolving)


def _ended(alert: Alert, now: datetime) -> bool:
    """Past its endsAt: Alertmanager has ended it by itself."""
    return datetime.fromisoformat(alert.ends_at.replace("Z", "+00:00")) <= now


def _still_owed(alert: Alert, now: datetime, settings: AlertmanagerSettings) -> bool:
    """A resolve is owed until the last firing post has run out by itself anyway."""
    ended = datetime.fromisoformat(alert.ends_at.replace("Z", "+00:00"))
    return (now - ended).total_seconds() < settings.ends_after


def load_posted(path: str) -> Posted:
    """The alerts posted by the last run; none when there is no file yet."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return Posted()
    return Posted(
        firing={key: _alert(value) for key, value in document["firing"].items()},
        resolving={key: _alert(value) for key, value in document["resolving"].items()},
    )


def _alert(value: dict[str, Any]) -> Alert:
    return Alert(
        dict(value["labels"]), dict(value["annotations"]), value["startsAt"], value["endsAt"]
    )


def save_posted(path: str, posted: Posted) -> None:
    document = {
        "firing": {key: alert.payload() for key, alert in posted.firing.items()},
        "resolving": {key: alert.payload() for key, alert in posted.resolving.items()},
    }
    write_atomically(path, json.dumps(document, indent=1, sort_keys=True) + "\n", mode=0o600)


def recovered(settings: AlertmanagerSettings, host: str) -> Posted:
    """What this host has firing, as Alertmanager itself holds it: when the memory of what was
    posted is lost, a lock alert no run renews would otherwise stay firing for `ends_after`
    (a week) with nobody to resolve it. The first URL that answers is asked; none: nothing."""
    import requests

    for url in settings.urls:
        try:
            response = requests.get(
                url.rstrip("/") + API_PATH,
                params={"filter": f'instance="{host}"', "silenced": "true", "inhibited": "true"},
                timeout=settings.timeout,
            )
            listed = response.json() if response.ok else None
        except (requests.RequestException, ValueError):
            continue
        if not isinstance(listed, list):
            continue
        firing = {}
        for item in listed:
            labels = item.get("labels") if isinstance(item, dict) else None
            if not isinstance(labels, dict) or not str(labels.get("alertname")).startswith(
                "Lockwarden"
            ):
                continue
            alert = Alert(
                {str(k): str(v) for k, v in labels.items()},
                dict(item.get("annotations") or {}),
                str(item.get("startsAt", "")),
                str(item.get("endsAt", "")),
            )
            firing[alert_key(alert.labels)] = alert
        return Posted(firing=firing)
    return Posted()


def post(url: str, alerts: list[dict[str, Any]], timeout: float) -> str | None:
    """POST the alerts to one Alertmanager; None when it took them, else why not (no URL
    path or credentials in the words: they may be secret)."""
    import requests

    try:
        response = requests.post(url.rstrip("/") + API_PATH, json=alerts, timeout=timeout)
    except requests.RequestException as error:
        return f"NOT delivered to {hide_url(url)}: {type(error).__name__}; retried next run"
    if not response.ok:
        return f"NOT delivered to {hide_url(url)}: HTTP {response.status_code}; retried next run"
    return None


def post_everywhere(settings: AlertmanagerSettings, alerts: list[dict[str, Any]]) -> list[str]:
    """Each URL at once, so one dead peer does not delay the others; every failure."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(settings.urls)) as pool:
        results = pool.map(lambda url: post(url, alerts, settings.timeout), settings.urls)
        return [failure for failure in results if failure is not None]


def alertmanager_stage(
    settings: AlertmanagerSettings,
    findings: Sequence[Finding],
    state_directory: str,
    hostname: str,
    now: datetime,
    dry_run: bool = False,
    state_unusable: str | None = None,
) -> ManagerOutcome:
    """Post this run's alerts to every configured Alertmanager and remember what was said.
    `state_unusable`: why the state directory is not touched this run (a hung mount): the
    alerts still go out, from nothing remembered, and nothing is saved."""
    path = os.path.join(state_directory, STATE_NAME)
    outcome = ManagerOutcome(urls=len(settings.urls), dry_run=dry_run)
    host = settings.host or hostname
    if state_unusable is not None:
        before = recovered(settings, host)
        outcome.problem = f"{state_unusable}; what was posted is taken from Alertmanager"
    else:
        try:
            before = load_posted(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            before = recovered(settings, host)
            outcome.problem = (
                f"{path} unreadable ({type(error).__name__}); what was posted is taken from "
                "Alertmanager"
            )
    now_posted = plan(findings, before, host, now, settings)
    outcome.firing, outcome.resolved = len(now_posted.firing), len(now_posted.resolving)
    if dry_run:
        return outcome
    alerts = [
        alert.payload() for alert in (*now_posted.firing.values(), *now_posted.resolving.values())
    ]
    if alerts:
        outcome.failures = post_everywhere(settings, alerts)
    for failure in outcome.failures:  # a person may not be told: say so at warning priority
        log.warning("alertmanager: %s", failure)
    if not outcome.failures:  # every Alertmanager took the resolves: none is owed any more
        now_posted = Posted(now_posted.firing, {})
    if now_posted != before and state_unusable is None:
        try:
            save_posted(path, now_posted)
        except OSError as error:
            outcome.problem = f"cannot write {path}: {error.strerror}"
    if outcome.problem:
        log.warning("alertmanager: %s", outcome.problem)
    return outcome
