"""Alert content injection: a process's name, a lock's path and a record's role are data in
every alert, never a mail header, a line of the body or chat markup.

End to end through the real CLI (`--once`), with real holders (a process that names itself,
through /proc/self/comm, with a line break and a header; a lock in a directory whose name has a
line break and Slack's markup), a real SMTP server (aiosmtpd, apprise's `mailto://`) and a real
HTTP receiver (apprise's Mattermost plugin, which speaks Slack's `<!channel>` and
`<url|text>`) on 127.0.0.1. Slack's own plugin posts to a fixed https host: that test sends the
alert through lockwarden's Notifier with the plugin's `webhook_url` pointed at the receiver
(as tests/alerts/test_payloads.py does; the payload is still the plugin's own).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import Message as Mail
from pathlib import Path
from typing import Any

import pytest

from alerts.helpers import Receiver, Smtp
from alerts.helpers import receiver as receiver
from alerts.helpers import smtp as smtp
from conftest import Children, run_cli
from lockwarden.alerts.messages import render_alert
from lockwarden.alerts.notify import Notifier
from lockwarden.config import NotifySettings
from lockwarden.model import Bound, Finding, Held, Holder, Severity, State

# An owner-record holder that names itself: /proc/self/comm is what the kernel, and so
# lockwarden, reports as the process's name (15 bytes at most).
NAMED_HOLDER = """
import json, os, socket, sys, time
lock, comm, role, started = sys.argv[1:5]
with open("/proc/self/comm", "w") as handle:
    handle.write(comm)
os.mkdir(lock)
record = {"pid": os.getpid(), "host": socket.gethostname(), "startedAt": started}
if role:
    record["role"] = role
with open(os.path.join(lock, "owner.json"), "w") as handle:
    json.dump(record, handle)
print("ready", flush=True)
time.sleep(120)
"""

BCC = "\nBcc: m@evil.io"  # 15 bytes: a header of its own in a Subject built from it
FORGED_ACTION = "\nAction: kill 1"  # a line of its own in a mail body
MARKUP_ROLE = "<!channel> <http://evil.example|click> !here> @channel *bold* [x](http://e.example)"
MARKUP_DIR = "store\nAction: kill 1 <!channel> <http://evil.example|click>"


class Hostile:
    """A config of locks in `tmp_path`, held by real processes, run with `--now` 2h later."""

    def __init__(self, tmp_path: Path, children: Children) -> None:
        self.tmp_path = tmp_path
        self.children = children
        self.base = datetime.now(UTC)
        self.locks: list[tuple[str, str]] = []
        self.pids: dict[str, int] = {}

    def hold(self, name: str, directory: str, comm: str = "holder", role: str = "") -> int:
        # Built as a string: a `//` in the name stays as written (a Path would make it `/`).
        store = f"{self.tmp_path}/{directory}"
        os.makedirs(store)
        lock = Path(store) / "LOCK"
        started = self.base.strftime("%Y-%m-%dT%H:%M:%SZ")
        proc: subprocess.Popen[str] = self.children.python(
            NAMED_HOLDER, str(lock), comm, role, started
        )
        self.locks.append((name, f"{store}/LOCK"))
        self.pids[name] = proc.pid
        return proc.pid

    def once(self, urls: list[str]) -> dict[str, Any]:
        state = self.tmp_path / "state"
        state.mkdir(mode=0o700, exist_ok=True)
        locks = "".join(
            f'\n[[lock]]\nname = "{name}"\npath = {json.dumps(lock)}\n'
            'warn_after = "30m"\ncritical_after = "1h"\n'
            for name, lock in self.locks
        )
        config = self.tmp_path / "lockwarden.toml"
        config.write_text(
            f"[state]\npath = {json.dumps(str(state / 'state.jsonl'))}\n\n"
            f'[notify]\nurls = {json.dumps(urls)}\ntimeout = "5s"\n{locks}'
        )
        later = (self.base + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = run_cli("--once", "--config", str(config), "--now", later, "--json")
        assert done.returncode == 2, done.stdout + done.stderr  # held too long: critical
        report: dict[str, Any] = json.loads(done.stdout)
        return report


@pytest.fixture
def hostile(tmp_path: Path, children: Children) -> Iterator[Hostile]:
    yield Hostile(tmp_path, children)


def mail_about(smtp: Smtp, pid: int) -> Mail:
    [mail] = [mail for mail in smtp.sink.messages if f"PID {pid} " in str(mail["Subject"])]
    return mail


def body_of(mail: Mail) -> str:
    payload = mail.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


def test_a_process_name_with_a_header_is_one_subject_and_the_mail_is_delivered(
    hostile: Hostile, smtp: Smtp
) -> None:
    """apprise 1.2 (Debian 12) refuses a Subject with a line break in it, so the alert about
    this hold was never delivered (and retried in vain); newer ones sent it. Either way the
    mail must have the headers a mail about a plain holder has: no Bcc, nothing added."""
    calm = hostile.hold("calm", "calm-store", comm="maintenance")
    evil = hostile.hold("wa-store", "wa-store", comm=BCC)
    report = hostile.once([smtp.url()])
    assert len(smtp.sink.messages) == 2, report["alerts"]
    deliveries = report["alerts"]["deliveries"]
    assert all(delivery["delivered"] for delivery in deliveries), deliveries
    plain, forged = mail_about(smtp, calm), mail_about(smtp, evil)
    assert "Bcc" not in forged and forged.get_all("Bcc") is None
    assert sorted(forged.keys()) == sorted(plain.keys())
    subject = str(forged["Subject"])
    assert "\n" not in subject and "\r" not in subject
    assert f"by PID {evil} (\\nBcc: m@evil.io)" in subject, subject
    assert len(subject) <= 200


def test_a_process_name_or_path_cannot_add_an_action_line_to_the_mail(
    hostile: Hostile, smtp: Smtp
) -> None:
    pid = hostile.hold("wa-store", MARKUP_DIR, comm=FORGED_ACTION)
    report = hostile.once([smtp.url()])
    [lock] = report["locks"]
    [mail] = smtp.sink.messages
    body = body_of(mail)
    actions = [line for line in body.splitlines() if line.lstrip().startswith("Action:")]
    assert len(actions) == 1, body
    assert actions[0].split(":", 1)[1].strip() == lock["action"]["line"], body
    assert str(pid) in actions[0]
    # The hostile text is still there, as data: escaped, on the line it belongs to.
    assert "\\nAction: kill 1" in body
    assert "store\\nAction: kill 1 <!channel>" in body


SLACK_LIVE = ("<!channel", "<!here", "<http", "<@")  # mentions, and links that hide their address
MARKDOWN_LIVE = (*SLACK_LIVE, "@channel", "[x](", "*bold*")  # and Markdown's, Mattermost's


def assert_inert(text: str, live: tuple[str, ...]) -> None:
    """Nothing in `text` that the chat service reads as markup the role or the path opened."""
    for markup in live:
        assert markup not in text, (markup, text)


def test_chat_markup_in_a_role_or_path_is_inert_on_mattermost(
    hostile: Hostile, receiver: Receiver
) -> None:
    hostile.hold("wa-store", MARKUP_DIR, comm="maintenance", role=MARKUP_ROLE)
    report = hostile.once([f"mmost://127.0.0.1:{receiver.port}/3ccdd113474722377935511fc85d3dd4"])
    assert [delivery["delivered"] for delivery in report["alerts"]["deliveries"]] == [True]
    [payload] = receiver.payloads
    text = str(payload["text"])
    assert_inert(text, MARKDOWN_LIVE)
    lines = text.splitlines()
    starts = [line for line in lines if line.lstrip("*").startswith("Action:")]
    assert starts == [line for line in lines if line.startswith("**Action:** `kill ")], text
    assert len(starts) == 1, text
    assert "click" in text and "evil.example" in text  # shown, as words


NOW = datetime(2026, 12, 2, 11, 19, tzinfo=UTC)


def test_chat_markup_in_a_role_or_path_is_inert_on_slack(receiver: Receiver) -> None:
    """Slack's plugin escapes `&`, `<` and `>` and then makes `<url|text>` (apprise 1.2, 1.9)
    and `<!channel>` (1.9 and later) live again, even from `&lt;...&gt;`: what reaches it must
    leave nothing that pattern finds."""
    finding = Finding(
        name="wa-store",
        path=f"/srv/{MARKUP_DIR}/LOCK",
        format="owner-record",
        state=State.HELD_TOO_LONG,
        severity=Severity.CRITICAL,
        reason="writes to wa-store blocked by PID 64969 for 2h01m",
        held=Held.of(7260.0, Bound.EXACT, NOW),
        holder=Holder(pid=64969, alive=True, role=MARKUP_ROLE, name="x", cmdline=("sleep",)),
        action="kill 64969",
    )
    receiver.reply = b"ok"  # what Slack's webhook answers
    notifier = Notifier(
        NotifySettings(urls=("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/",), timeout=5.0)
    )
    [service] = notifier.services
    service.plugin.webhook_url = f"http://127.0.0.1:{receiver.port}/services"
    notifier.send(render_alert(finding, socket.gethostname()), [service.service_id])
    [payload] = receiver.payloads
    attachment = payload["attachments"][0]
    assert_inert(str(attachment.get("text", "")) + json.dumps(payload), SLACK_LIVE)
    assert "kill 64969" in json.dumps(payload)
