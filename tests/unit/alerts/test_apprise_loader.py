"""apprise_loader against the installed apprise: it must build what apprise builds, from only
the plugin module of the URL's scheme. These tests fail loudly when apprise moves, renames or
drops a plugin module the loader names, or starts loading every plugin on the direct path."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import apprise
import pytest

from conftest import cli_env
from lockwarden.alerts.apprise_loader import PLUGIN_MODULES, direct_service, plugin_class

# One valid URL per listed scheme (made-up tokens in each service's own format).
SAMPLE_URLS = {
    "json": "json://127.0.0.1:9/hook",
    "jsons": "jsons://user:secret@example.com/hook",
    "form": "form://127.0.0.1:9/hook",
    "forms": "forms://example.com/hook",
    "xml": "xml://127.0.0.1:9/hook",
    "xmls": "xmls://example.com/hook",
    "mailto": "mailto://user:secret@example.com",
    "mailtos": "mailtos://user:secret@example.com?to=oncall@example.com",
    "ntfy": "ntfy://lockwarden-alerts",
    "ntfys": "ntfys://ntfy.example.com/lockwarden-alerts",
    "slack": "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ",
    "discord": "discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js",
    "tgram": "tgram://123456789:abcdefg_hijklmnop/12345",
}


def test_every_listed_scheme_has_a_sample_url() -> None:
    assert set(SAMPLE_URLS) == set(PLUGIN_MODULES)


@pytest.mark.parametrize("scheme", sorted(PLUGIN_MODULES))
def test_listed_module_still_serves_its_scheme(scheme: str) -> None:
    assert plugin_class(scheme) is not None, (
        f"apprise {apprise.__version__} has none of {PLUGIN_MODULES[scheme]} claiming "
        f"{scheme}://; update PLUGIN_MODULES in src/lockwarden/apprise_loader.py"
    )


@pytest.mark.parametrize("scheme", sorted(PLUGIN_MODULES))
def test_direct_service_is_what_apprise_instantiate_builds(scheme: str) -> None:
    url = SAMPLE_URLS[scheme]
    asset = apprise.AppriseAsset()
    ours = direct_service(url, asset)
    theirs = apprise.Apprise.instantiate(url, asset=asset)
    assert theirs is not None, f"apprise itself rejects the sample {scheme}:// URL"
    assert ours is not None, f"the direct path could not build {scheme}://"
    assert type(ours) is type(theirs)
    assert ours.url(privacy=True) == theirs.url(privacy=True)


def test_tags_are_given_to_the_service_as_apprise_instantiate_does() -> None:
    asset = apprise.AppriseAsset()
    ours = direct_service(SAMPLE_URLS["json"], asset, ("oncall", "db"))
    theirs = apprise.Apprise.instantiate(SAMPLE_URLS["json"], asset=asset, tag=["oncall", "db"])
    assert ours is not None and theirs is not None
    assert set(ours.tags) == set(theirs.tags) == {"oncall", "db"}


def test_unlisted_scheme_is_not_built_directly() -> None:
    assert direct_service("bogus://example.com", apprise.AppriseAsset()) is None


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[bytes]]]:
    """A real HTTP endpoint on 127.0.0.1 that records each POST body."""
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


ALERT = """
import json, sys
from datetime import UTC, datetime
import apprise
after_import = {m for m in sys.modules if m.startswith("apprise.plugins.")}
from lockwarden.alerts.messages import render_test
from lockwarden.alerts.notify import Notifier
from lockwarden.config import NotifySettings
notifier = Notifier(NotifySettings(urls=(sys.argv[1],)))
deliveries = notifier.send(render_test("db1", datetime.now(UTC)), notifier.targets(()))
loaded = {m for m in sys.modules if m.startswith("apprise.plugins.")} - after_import
print(json.dumps({"delivered": [d.ok for d in deliveries], "plugins_loaded": sorted(loaded)}))
"""


def test_json_alert_imports_one_plugin_module_and_is_delivered(
    receiver: tuple[int, list[bytes]],
) -> None:
    """In a fresh interpreter, through the notifier every run uses: the json:// plugin alone
    is imported, and the POST arrives."""
    port, bodies = receiver
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ALERT), f"json://127.0.0.1:{port}/hook"],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.splitlines()[-1])
    assert report["delivered"] == [True]
    # apprise 2.x: exactly the json plugin (built directly, never through the lookup that
    # imports every plugin); apprise 1.2 imported everything at `import apprise`.
    assert len(report["plugins_loaded"]) <= 2, report["plugins_loaded"]
    assert len(bodies) == 1
    assert "lockwarden test message from db1" in json.loads(bodies[0])["title"]
