"""alerts/heartbeat.py against a real HTTP server on 127.0.0.1: a run's ping reaches the check's
URL (with /start or /fail as asked), a ping answered with an error, refused or unanswered is
False and logged without the URL's secret, and never raises."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lockwarden.alerts.heartbeat import FAIL, START, ping, ping_url
from lockwarden.config import HeartbeatSettings

TOKEN = "0f6a1c2e-hb-Secret-4d7b"


class PingServer:
    """Answers each GET with `status` (or never, while `hang` is set) and records its path."""

    def __init__(self) -> None:
        self.status = 200
        self.paths: list[str] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                if server.hang.is_set():
                    server.release.wait(30)
                    return
                self.send_response(server.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ping/{TOKEN}"

    def close(self) -> None:
        self.release.set()
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[PingServer]:
    running = PingServer()
    try:
        yield running
    finally:
        running.close()


def refused_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "signal", "expected"),
    [
        ("https://hc-ping.com/uuid", None, "https://hc-ping.com/uuid"),
        ("https://hc-ping.com/uuid", FAIL, "https://hc-ping.com/uuid/fail"),
        ("https://hc-ping.com/uuid/", START, "https://hc-ping.com/uuid/start"),
    ],
)
def test_the_ping_url_of_each_signal(url: str, signal: str | None, expected: str) -> None:
    assert ping_url(url, signal) == expected


def test_no_url_is_no_ping() -> None:
    assert ping(HeartbeatSettings(url=None)) is False


@pytest.mark.parametrize(("signal", "suffix"), [(None, ""), (START, "/start"), (FAIL, "/fail")])
def test_an_answered_ping_reaches_the_checks_path(
    server: PingServer, signal: str | None, suffix: str
) -> None:
    assert ping(HeartbeatSettings(url=server.url(), timeout=5.0), signal) is True
    assert server.paths == [f"/ping/{TOKEN}{suffix}"]


def test_an_error_answer_is_false_and_logged_without_the_secret(
    server: PingServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.status = 503
    with caplog.at_level(logging.WARNING, logger="lockwarden.alerts.heartbeat"):
        assert ping(HeartbeatSettings(url=server.url(), timeout=5.0)) is False
    [record] = [r for r in caplog.records if r.name == "lockwarden.alerts.heartbeat"]
    assert record.getMessage() == (
        f"heartbeat ping to http://127.0.0.1:{server.port}/(hidden) was answered HTTP 503"
    )
    assert TOKEN not in caplog.text


def test_a_refused_ping_is_false_and_names_the_failure_not_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{refused_port()}/ping/{TOKEN}"
    with caplog.at_level(logging.WARNING, logger="lockwarden.alerts.heartbeat"):
        assert ping(HeartbeatSettings(url=url, timeout=5.0)) is False
    messages = [r.getMessage() for r in caplog.records if r.name == "lockwarden.alerts.heartbeat"]
    assert messages == [
        f"heartbeat ping to {url.split('/ping')[0]}/(hidden) failed: ConnectionError"
    ]
    assert TOKEN not in caplog.text


def test_an_unanswered_ping_gives_up_at_its_timeout(server: PingServer) -> None:
    server.hang.set()
    started = time.monotonic()
    assert ping(HeartbeatSettings(url=server.url(), timeout=0.5)) is False
    assert time.monotonic() - started < 5
    assert server.paths == [f"/ping/{TOKEN}"]
