"""What a phone shows: one alert rendered and sent through apprise's real plugins, checked in
the payload each service's receiver got (Slack, Mattermost, Rocket.Chat, a JSON webhook,
email through aiosmtpd), one test per format.

Slack's plugin posts to a fixed https host: its `webhook_url` attribute is pointed at the
receiver on 127.0.0.1, the one stand-in here (the payload is still the plugin's own).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from lockwarden.alerts.messages import Ended, render_alert, render_resolved
from lockwarden.alerts.notify import Notifier
from lockwarden.config import NotifySettings
from lockwarden.model import Bound, Finding, Held, Holder, Severity, State

from .helpers import Receiver, Smtp

NOW = datetime(2026, 12, 2, 11, 19, tzinfo=UTC)
HELD = Finding(
    name="wa-store",
    path="/srv/wa/store/LOCK",
    format="owner-record",
    state=State.HELD_TOO_LONG,
    severity=Severity.CRITICAL,
    reason="writes to wa-store blocked by PID 64969 (maintenance-job) for 2h01m",
    held=Held.of(7260.0, Bound.UNKNOWN, NOW),
    holder=Holder(
        pid=64969,
        alive=True,
        role="maintenance-job",
        user="wa",
        cmdline=("node", "resync.js", "--full"),
        name="node",
        started_at=NOW - timedelta(hours=2, minutes=1),
        unit="wa-resync.service",
    ),
    action="systemctl stop wa-resync.service",
)
ROLE = "WhatsApp session store"
TITLE = "CRITICAL db-01: wa-store blocked 2h01m by PID 64969 (maintenance-job, wa-resync.service)"


def send(url: str, **plugin_attributes: Any) -> list[bool]:
    notifier = Notifier(NotifySettings(urls=(url,), timeout=5.0))
    [service] = notifier.services
    for name, value in plugin_attributes.items():
        setattr(service.plugin, name, value)
    message = render_alert(HELD, "db-01", role=ROLE)
    return [delivery.ok for delivery in notifier.send(message, [service.service_id])]


def assert_phone_words(text: str) -> None:
    assert text.index("systemctl stop wa-resync.service") < text.index("Host")  # action first
    assert ROLE in text
    assert "PID 64969" in text and "wa-resync.service" in text and "2h01m" in text


def test_slack_payload(receiver: Receiver) -> None:
    hook = f"http://127.0.0.1:{receiver.port}/services"
    receiver.reply = b"ok"  # what Slack's webhook answers
    delivered = send("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/", webhook_url=hook)
    # apprise 1.2 (Debian 12) compares the webhook's answer (bytes) with the str "ok", so it
    # reports every Slack webhook delivery failed although Slack got it; lockwarden then
    # retries it each run until give_up_after. Newer apprise reports it delivered.
    assert delivered == ([False] if version("apprise").startswith("1.2.") else [True])
    [payload] = receiver.payloads
    text = json.dumps(payload)
    assert TITLE in text
    assert_phone_words(str(payload["attachments"][0].get("text", "")) or text)
    info = Notifier(NotifySettings(urls=("json://127.0.0.1:9/x",)))._asset.color("info")
    assert payload["attachments"][0]["color"] not in (info, None)  # critical is not blue


def test_mattermost_payload(receiver: Receiver) -> None:
    assert send(f"mmost://127.0.0.1:{receiver.port}/3ccdd113474722377935511fc85d3dd4") == [True]
    [payload] = receiver.payloads
    assert TITLE in payload["text"]
    assert_phone_words(payload["text"])


def test_rocketchat_webhook_payload(receiver: Receiver) -> None:
    url = f"rocket://abcd1234efgh5678/ijkl9012mnop3456@127.0.0.1:{receiver.port}"
    assert send(url) == [True]
    [payload] = receiver.payloads
    text = json.dumps(payload)
    assert TITLE in text
    assert_phone_words(str(payload.get("text", "")) + text)


def test_json_webhook_payload_carries_the_notify_type(receiver: Receiver) -> None:
    assert send(receiver.url("Tok3nSecretAbcdefXyz")) == [True]
    [payload] = receiver.payloads
    assert payload["title"] == TITLE
    assert payload["type"] == "failure"
    assert_phone_words(str(payload["message"]))
    ended = render_resolved(
        ended=Ended(
            "wa-store", HELD.path, "PID 64969 (maintenance-job)", NOW, NOW, "held_too_long"
        ),
        finding=None,
        host="db-01",
        now=NOW + timedelta(hours=1),
    )
    assert ended.notify_type == "success"


def test_email_subject_and_plain_body(smtp: Smtp) -> None:
    assert send(smtp.url()) == [True]
    [mail] = smtp.sink.messages
    assert mail["Subject"] == TITLE
    assert mail.get_content_type() == "text/plain"
    [body] = smtp.bodies()
    assert body.startswith(TITLE)
    assert_phone_words(body)
    assert "**" not in body
