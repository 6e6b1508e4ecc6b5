"""Real servers on 127.0.0.1 for alert tests: an HTTP receiver (for apprise's json://) that can
answer 200, answer 500, hang, or be down (connection refused), and an SMTP server (aiosmtpd)
for mailto://. Plus a tiny tmpfs for ENOSPC. Everything is stopped at teardown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

# The root conftest's helpers (tests/ is on sys.path: it is the rootdir of this package).
from conftest import SRC, Children, cli_env, require_tool, run_cli, wait_until

__all__ = ["SRC", "Children", "cli_env", "require_tool", "run_cli", "wait_until"]


class Receiver:
    """A JSON webhook receiver. `mode`: ok (200), fail (500), hang (never answers), slow
    (answers 200 once `release` is set), and
    `stop()` closes the listening socket so connections are refused; `start()` reopens it
    on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.mode = "ok"
        self.fail_status = 500  # what mode "fail" answers (503: a service that is down)
        self.payloads: list[dict[str, Any]] = []
        self.pings: list[str] = []
        self.requests = 0
        self.release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.requests += 1
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if receiver.mode == "hang":
                    receiver.release.wait(30)
                    return
                if receiver.mode == "slow":  # answers 200 once the test sets `release`
                    receiver.release.wait(30)
                if receiver.mode == "fail":
                    self.send_response(receiver.fail_status)
                    self.end_headers()
                    self.wfile.write(f"failed for {self.path} {self.headers}".encode())
                    return
                receiver.payloads.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                receiver.pings.append(self.path)
                self.send_response(500 if receiver.mode == "fail" else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, secret: str = "") -> str:
        auth = f"lockwarden:{secret}@" if secret else ""
        return f"json://{auth}127.0.0.1:{self.port}/hook"


def title_kind(title: str) -> str:
    """What kind of message a title announces: `CRITICAL db1: wa-store blocked 2h by ...` is
    "writes blocked", `CRITICAL db1: reminder: ...` "reminder", `RESOLVED db1: ...` "resolved"."""
    if title.startswith("RESOLVED "):
        return "resolved"
    if title.startswith("removed"):
        return "removed"
    rest = title.split(": ", 1)[1] if ": " in title else title
    if rest.startswith("reminder: "):
        return "reminder"
    if "lockwarden state degraded" in rest:
        return "state degraded"
    if " stale lock " in rest:
        return "stale lock"
    if " blocked " in rest:
        return "writes blocked"
    return rest


def is_about(title: str, lock_name: str) -> bool:
    return f" {lock_name} " in f" {title} ".replace(":", " ")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    try:
        yield server
    finally:
        server.release.set()
        server.stop()


class MailSink:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.original_content or envelope.content))
        return "250 OK"


class Smtp:
    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.sink = MailSink()
        self.port = free_port()
        self.controller = Controller(self.sink, hostname="127.0.0.1", port=self.port)

    def url(self) -> str:
        plain = f"mailto://127.0.0.1:{self.port}?to=oncall@example.net&from=lockwarden@example.net"
        # Newer apprise sends mailto:// with STARTTLS unless told `mode=insecure`; apprise 1.2
        # (Debian 12) sends it in plain text and rejects that mode: ask its own parser.
        return plain + "&mode=insecure" if _accepts(plain + "&mode=insecure") else plain

    def bodies(self) -> list[str]:
        texts = []
        for message in self.sink.messages:
            parts = message.walk() if message.is_multipart() else [message]
            for part in parts:
                if part.get_content_type() == "text/plain":
                    payload = part.get_payload(decode=True)
                    assert isinstance(payload, bytes)
                    texts.append(payload.decode())
        return texts

    def subjects(self) -> list[str]:
        return [str(message["Subject"]) for message in self.sink.messages]


def _accepts(url: str) -> bool:
    import apprise

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


@pytest.fixture
def smtp() -> Iterator[Smtp]:
    server = Smtp()
    server.controller.start()
    try:
        yield server
    finally:
        server.controller.stop()


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (needs root or CAP_SYS_ADMIN; a failure under CI=true)."""
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        message = f"cannot mount a tmpfs here: {done.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)
