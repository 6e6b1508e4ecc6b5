"""The direct Alertmanager target: what each run posts (a pure table), and the real CLI
against a real HTTP server on 127.0.0.1 that answers as Alertmanager's v2 API does (the real
Alertmanager cluster is driven in test_fleet.py): re-posting while firing, endsAt when
resolved, a resolve owed through an outage, one request per URL per run while it is down."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FLOCK_HOLDER, Children, run_cli, write_config
from factories import make_finding, make_holder
from lockwarden.alerts.alertmanager import (
    Alert,
    Posted,
    alert_annotations,
    alert_labels,
    plan,
)
from lockwarden.config import AlertmanagerSettings, ConfigError, effective, parse
from lockwarden.model import Finding, Severity, State
from lockwarden.support.durations import format_time

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SETTINGS = AlertmanagerSettings(urls=("http://127.0.0.1:1",), ends_after=300.0)


def finding(state: State, severity: Severity, pid: int | None = 42) -> Finding:
    holder = make_holder(pid=pid, role="re-sync", unit="wa-resync.service")
    return make_finding(
        name="wa-store",
        path="/srv/wa/LOCK",
        format="owner-record",
        state=state,
        severity=severity,
        reason="writes to wa-store blocked",
        holder=holder if state is not State.FREE else None,
        action="systemctl stop wa-resync.service",
    )


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def gauge(textfile: Path, name: str) -> float:
    """The one sample of a metric, as the reference parser reads the textfile."""
    families = text_string_to_metric_families(textfile.read_text())
    [value] = [
        sample.value for family in families for sample in family.samples if sample.name == name
    ]
    return value


def test_a_held_too_long_lock_fires_with_the_rules_labels() -> None:
    posted = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, SETTINGS)
    [alert] = posted.firing.values()
    assert alert.labels == {
        "alertname": "LockwardenLockHeldTooLong",
        "lock": "wa-store",
        "path": "/srv/wa/LOCK",
        "instance": "db1",  # as silences and inhibitions written for Prometheus's alerts match
        "host": "db1",
        "severity": "warning",
        "holder_pid": "42",
        "holder_pids": "42",
        "holder_role": "re-sync",
        "holder_unit": "wa-resync.service",
        "action": "systemctl stop wa-resync.service",
    }
    assert alert.annotations["summary"] == "wa-store on db1 held too long"
    assert alert.annotations["action"] == "systemctl stop wa-resync.service"
    assert alert.annotations["runbook_url"].endswith("/runbook.md#lockwardenlockheldtoolong")
    assert alert.starts_at == "2026-12-02T12:00:00Z" and alert.ends_at == "2026-12-02T12:05:00Z"
    assert posted.resolving == {}


@pytest.mark.parametrize(
    ("state", "severity", "fires"),
    [
        (State.FREE, Severity.OK, None),
        (State.HELD, Severity.OK, None),
        (State.HELD_TOO_LONG, Severity.WARNING, "warning"),
        (State.STALE, Severity.CRITICAL, "critical"),
        (State.UNKNOWN, Severity.UNKNOWN, None),  # as the rules: only after `for:`, not here
    ],
)
def test_which_states_fire(state: State, severity: Severity, fires: str | None) -> None:
    labels = alert_labels(finding(state, severity), "db1")
    assert [alert["severity"] for alert in labels] == ([fires] if fires else [])


def test_an_escalation_fires_critical_beside_the_warning_and_never_resolves_it() -> None:
    """Routing by severity would tell the warning channel "resolved" while the lock got
    worse: the warning alert keeps firing (Alertmanager's inhibit_rules mute it), and both
    end when the lock is free."""
    warned = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, SETTINGS)
    worse = [finding(State.HELD_TOO_LONG, Severity.CRITICAL)]
    escalated = plan(worse, warned, "db1", later(60), SETTINGS)
    assert escalated.resolving == {}
    assert sorted(a.labels["severity"] for a in escalated.firing.values()) == [
        "critical",
        "warning",
    ]
    [kept] = [a for a in escalated.firing.values() if a.labels["severity"] == "warning"]
    assert kept.starts_at == "2026-12-02T12:00:00Z"  # the same alert, renewed
    freed = plan([finding(State.FREE, Severity.OK)], escalated, "db1", later(120), SETTINGS)
    assert freed.firing == {} and len(freed.resolving) == 2


def test_the_watchdog_fires_every_run_and_ends_soon_after_the_last() -> None:
    """An agent that stops leaves its lock alerts firing (nothing said the locks are free);
    its watchdog, re-posted every run, ends five minutes after the last one, which a dead
    man's switch receiver turns into a page."""
    watched = replace(SETTINGS, watchdog=True)
    posted = plan([], Posted(), "db1", NOW, watched)
    [dog] = posted.firing.values()
    assert dog.labels == {
        "alertname": "LockwardenWatchdog",
        "severity": "none",
        "instance": "db1",
        "host": "db1",
    }
    assert dog.ends_at == "2026-12-02T12:05:00Z"
    again = plan([], posted, "db1", later(60), watched)
    assert [a.ends_at for a in again.firing.values()] == ["2026-12-02T12:06:00Z"]
    assert plan([], Posted(), "db1", NOW, SETTINGS).firing == {}  # off by default


def test_a_lock_alert_outlives_a_silent_agent_by_default() -> None:
    """The default ends_after: a lock no run saw free is not resolved by Alertmanager because
    the agent stopped posting (the Prometheus path keeps firing from the last textfile too)."""
    default = AlertmanagerSettings(urls=("http://127.0.0.1:1",))
    posted = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, default)
    [alert] = posted.firing.values()
    assert alert.ends_at == format_time(NOW + timedelta(days=7))


def test_a_firing_alert_is_renewed_each_run_and_keeps_its_start() -> None:
    held = [finding(State.HELD_TOO_LONG, Severity.WARNING)]
    first = plan(held, Posted(), "db1", NOW, SETTINGS)
    second = plan(held, first, "db1", later(60), SETTINGS)
    [alert] = second.firing.values()
    assert alert.starts_at == "2026-12-02T12:00:00Z" and alert.ends_at == "2026-12-02T12:06:00Z"


def test_released_is_posted_once_more_with_ends_at_now() -> None:
    first = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, SETTINGS)
    released = plan([finding(State.FREE, Severity.OK)], first, "db1", later(60), SETTINGS)
    assert released.firing == {}
    [alert] = released.resolving.values()
    assert alert.labels == next(iter(first.firing.values())).labels  # the same alert
    assert alert.ends_at == "2026-12-02T12:01:00Z"


def test_a_run_that_could_not_see_the_lock_neither_resolves_nor_renews_its_alert() -> None:
    """A database that did not answer once, a hung mount: nothing says the hold is over, so
    its alert is not resolved (to fire again a minute later); nor is it renewed, so an outage
    that lasts ends it ends_after after the last run that saw the lock."""
    first = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, SETTINGS)
    blind = make_finding(
        name="wa-store", state=State.UNKNOWN, severity=Severity.UNKNOWN, reason="no answer"
    )
    assert blind.unseen
    second = plan([blind], first, "db1", later(60), SETTINGS)
    assert second.firing == first.firing and second.resolving == {}  # kept as it was
    [alert] = second.firing.values()
    assert alert.ends_at == "2026-12-02T12:05:00Z"  # not renewed
    held = [finding(State.HELD_TOO_LONG, Severity.WARNING)]
    [renewed] = plan(held, second, "db1", later(120), SETTINGS).firing.values()
    assert renewed.starts_at == "2026-12-02T12:00:00Z" and renewed.ends_at == "2026-12-02T12:07:00Z"
    lasting = plan([blind], second, "db1", later(300), SETTINGS)  # its endsAt has come
    assert lasting.firing == {} and lasting.resolving == {}  # ended by itself: nothing to post
    seen_free = plan([finding(State.FREE, Severity.OK)], second, "db1", later(120), SETTINGS)
    assert seen_free.firing == {} and len(seen_free.resolving) == 1


def test_a_new_holder_resolves_the_old_alert_and_fires_a_new_one() -> None:
    first = plan([finding(State.HELD_TOO_LONG, Severity.WARNING)], Posted(), "db1", NOW, SETTINGS)
    other = [finding(State.HELD_TOO_LONG, Severity.WARNING, pid=43)]
    second = plan(other, first, "db1", later(60), SETTINGS)
    [new] = second.firing.values()
    [old] = second.resolving.values()
    assert new.labels["holder_pid"] == "43" and old.labels["holder_pid"] == "42"
    assert new.starts_at == "2026-12-02T12:01:00Z"


def test_an_owed_resolve_is_kept_until_the_last_firing_post_ran_out() -> None:
    owed = Alert({"alertname": "x"}, {}, "2026-12-02T11:00:00Z", "2026-12-02T12:00:00Z")
    before = Posted({}, {"k": owed})
    assert plan([], before, "db1", later(299), SETTINGS).resolving == {"k": owed}
    assert plan([], before, "db1", later(300), SETTINGS).resolving == {}


def test_config_section_is_checked_and_never_echoes_a_url() -> None:
    with pytest.raises(ConfigError) as error:
        parse({"alertmanager": {"urls": ["ftp://user:s3cret@am:9093"]}}, "c.toml")
    assert "alertmanager.urls: URL #1 is not an http:// or https:// URL" in str(error.value)
    assert "s3cret" not in str(error.value)
    urls = ["http://am-1:9093", "https://user:s3cret@am-2:9093"]
    config = parse({"alertmanager": {"urls": urls, "ends_after": "3m"}}, "c.toml")
    assert config.alertmanager.configured and config.alertmanager.ends_after == 180.0
    shown = effective(config)["alertmanager"]  # what check-config prints
    assert shown["urls"] == ["http://am-1:9093/(hidden)", "https://(hidden)"]
    assert shown["ends_after"] == "3m"


@dataclass
class FakeAlertmanager:
    """A real HTTP server answering POST /api/v2/alerts with `status` (200, or 503 when down)."""

    server: ThreadingHTTPServer
    posts: list[list[dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    queries: list[str] = field(default_factory=list)

    def active(self) -> list[dict[str, Any]]:
        """What a real Alertmanager lists as active: the latest post of each label set,
        unless its endsAt has passed."""
        latest: dict[str, dict[str, Any]] = {}
        for post in self.posts:
            for alert in post:
                latest[json.dumps(alert["labels"], sort_keys=True)] = alert
        now = datetime.now(UTC)
        return [
            alert
            for alert in latest.values()
            if datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00")) > now
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def alertmanager() -> Iterator[FakeAlertmanager]:
    fake: FakeAlertmanager

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.path == "/api/v2/alerts"
            fake.posts.append(json.loads(body))
            self.send_response(fake.status)
            self.end_headers()

        def do_GET(self) -> None:
            fake.queries.append(self.path)
            body = json.dumps(fake.active()).encode()
            self.send_response(fake.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    fake = FakeAlertmanager(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def test_an_outage_costs_one_post_per_run_and_the_resolve_is_delivered_after(
    tmp_path: Path, children: Children, alertmanager: FakeAlertmanager
) -> None:
    lock = tmp_path / "store.lock"
    textfile = tmp_path / "lockwarden.prom"
    config = write_config(
        tmp_path / "config.toml",
        f"""
        [state]
        path = "{tmp_path}/state/state.jsonl"
        [prometheus]
        textfile = "{textfile}"
        [alertmanager]
        urls = ["{alertmanager.url}"]
        host = "db1"
        [[lock]]
        name = "store"
        path = "{lock}"
        format = "kernel"
        warn_after = "0"
        critical_after = "1h"
        """,
    )
    holder = children.python(FLOCK_HOLDER, str(lock))
    alertmanager.status = 503
    for _ in range(3):
        completed = run_cli("--once", "--config", config)
        assert completed.returncode == 1, completed.stderr  # the lock's verdict, not the outage
        assert "alertmanager: NOT delivered to http://127.0.0.1" in completed.stdout
        assert "warning: alertmanager: NOT delivered" in completed.stderr
        assert gauge(textfile, "lockwarden_alerts_undelivered") == 1
    assert len(alertmanager.posts) == 3  # one request per run, no burst
    assert all(post[0]["labels"]["holder_pid"] == str(holder.pid) for post in alertmanager.posts)
    holder.kill()
    holder.wait(timeout=10)
    run_cli("--once", "--config", config)  # released while Alertmanager is still down
    alertmanager.status = 200
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 0, completed.stderr
    [resolve] = alertmanager.posts[-1]
    assert resolve["labels"]["lock"] == "store"
    ends = datetime.fromisoformat(resolve["endsAt"].replace("Z", "+00:00"))
    assert ends <= datetime.now(UTC)  # ended, not renewed
    assert gauge(textfile, "lockwarden_alerts_undelivered") == 0
    posts = len(alertmanager.posts)
    assert run_cli("--once", "--config", config).returncode == 0
    assert len(alertmanager.posts) == posts  # nothing owed, nothing firing: nothing posted


def test_a_damaged_memory_of_what_was_posted_is_said_and_posting_goes_on(
    tmp_path: Path, children: Children, alertmanager: FakeAlertmanager
) -> None:
    lock = tmp_path / "store.lock"
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "alertmanager.json").write_text('{"firing": [')
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{state}/state.jsonl"\n'
        f'[alertmanager]\nurls = ["{alertmanager.url}"]\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
        'warn_after = "0"\ncritical_after = "1h"\n',
    )
    children.python(FLOCK_HOLDER, str(lock))
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 1
    assert (
        "alertmanager.json unreadable (JSONDecodeError); what was posted is taken from Alertmanager"
    ) in completed.stderr
    [[alert]] = alertmanager.posts
    assert alert["labels"]["lock"] == "store"
    assert json.loads((state / "alertmanager.json").read_text())["firing"]  # rewritten whole


def test_the_stores_role_is_an_annotation() -> None:
    held = replace(finding(State.HELD_TOO_LONG, Severity.CRITICAL), store="WhatsApp session store")
    assert alert_annotations(held, "db1")["store"] == "WhatsApp session store"
    assert "store" not in alert_annotations(finding(State.HELD_TOO_LONG, Severity.CRITICAL), "db1")


def test_a_lost_memory_is_taken_from_alertmanager_so_a_freed_lock_is_still_resolved(
    tmp_path: Path, children: Children, alertmanager: FakeAlertmanager
) -> None:
    """A run that cannot read what was posted (alertmanager.json damaged) asks Alertmanager what
    this host has firing: a lock freed meanwhile is resolved, not left firing for ends_after
    (a week). The server answers as Alertmanager's v2 API does (GET lists active alerts)."""
    lock = tmp_path / "store.lock"
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{state}/state.jsonl"\n'
        f'[alertmanager]\nurls = ["{alertmanager.url}"]\nhost = "db1"\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
        'warn_after = "0"\ncritical_after = "1h"\n',
    )
    holder = children.python(FLOCK_HOLDER, str(lock))
    assert run_cli("--once", "--config", config).returncode == 1
    [[fired]] = alertmanager.posts
    holder.kill()
    holder.wait(timeout=10)
    (state / "alertmanager.json").write_text("{damaged")
    completed = run_cli("--once", "--config", config)
    assert completed.returncode == 0, completed.stderr
    [query] = alertmanager.queries  # asked once, for this host's alerts only
    assert "instance%3D%22db1%22" in query, query
    [resolve] = alertmanager.posts[-1]
    assert resolve["labels"] == fired["labels"]
    ends = datetime.fromisoformat(resolve["endsAt"].replace("Z", "+00:00"))
    assert ends <= datetime.now(UTC)  # resolved now, not left to run out in a week
