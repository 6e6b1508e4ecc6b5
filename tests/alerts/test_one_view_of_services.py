"""`--once` run by hand, check-config and notify-test name the same notify services, each with
where it was configured, as a run under lockwarden.service would use them: from the config,
from the unit's credential (LoadCredential=lockwarden-notify-urls), or both.

Root's shell has no $CREDENTIALS_DIRECTORY, so the commands look for the credential where
LoadCredential= does. The real command runs with those stores pointed at temporary
directories (never this host's /etc/credstore), and real webhooks on 127.0.0.1 receive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import FLOCK_HOLDER, validate_report

from .helpers import Children, Receiver, cli_env, run_cli

# Under CI=true (run as root) it runs, and would fail rather than skip without root.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="only root reads the system unit's credential from a shell",
)

CREDENTIAL = "lockwarden-notify-urls"

# The real command line, with LoadCredential='s stores (commands.SYSTEM_CREDSTORES) replaced
# by the directories given first.
AS_ROOT_IN_A_SHELL = """
import sys
from lockwarden.cli import commands
commands.SYSTEM_CREDSTORES = tuple(sys.argv[1].split(":"))
sys.argv = ["lockwarden", *sys.argv[2:]]
raise SystemExit(commands.run())
"""


def in_a_shell(
    stores: list[Path], *args: str, credentials: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`lockwarden ARGS` as root types it: no $CREDENTIALS_DIRECTORY, unless `credentials` is
    given (as systemd gives it to the service)."""
    env = cli_env()
    env.pop("CREDENTIALS_DIRECTORY", None)  # the test session's own "none given"
    if credentials is not None:
        env["CREDENTIALS_DIRECTORY"] = str(credentials)
    store_list = ":".join(str(store) for store in stores)
    completed = subprocess.run(
        [sys.executable, "-c", AS_ROOT_IN_A_SHELL, store_list, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    if "--once" in args and "--json" in args and completed.stdout.strip():
        validate_report(json.loads(completed.stdout))
    return completed


def named(services: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    return [(service["url"], service["origin"], service["tags"]) for service in services]


class Host:
    """A config and the credential stores LoadCredential= would search, all temporary."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.stores = [tmp_path / "etc-credstore", tmp_path / "run-credstore"]
        for store in self.stores:
            store.mkdir(mode=0o700)
        self.config = tmp_path / "lockwarden.toml"
        self.lock = tmp_path / "store.lock"

    def configure(self, urls: list[str], held_too_long: bool = False) -> None:
        budgets = 'warn_after = "0s"\ncritical_after = "0s"\n' if held_too_long else ""
        notify = f"[notify]\nurls = {json.dumps(urls)}\n" if urls else ""
        self.config.write_text(
            f'[state]\npath = "{self.tmp_path / "state" / "state.jsonl"}"\n{notify}'
            f'[[lock]]\nname = "store"\npath = "{self.lock}"\nformat = "kernel"\n{budgets}'
        )
        self.config.chmod(0o600)

    def credential(self, text: str, store: int = 1) -> Path:
        """The credential in the second store (/run/credstore), as `systemd-creds` leaves it."""
        path = self.stores[store] / CREDENTIAL
        path.write_text(text)
        path.chmod(0o600)
        return path

    def run(self, *args: str, credentials: Path | None = None) -> subprocess.CompletedProcess[str]:
        return in_a_shell(self.stores, *args, "--config", str(self.config), credentials=credentials)

    def views(self, credentials: Path | None = None) -> dict[str, Any]:
        """What check-config (text and --json) and notify-test --json say."""
        text = self.run("check-config", credentials=credentials)
        as_json = self.run("check-config", "--json", credentials=credentials)
        tested = self.run("notify-test", "--json", credentials=credentials)
        for done in (text, as_json, tested):
            assert done.returncode == 0, done.stdout + done.stderr
        return {
            "check-config": named(json.loads(as_json.stdout)["services"]),
            "notify-test": named(json.loads(tested.stdout)["services"]),
            "text": text.stdout,
            "stderr": text.stderr + as_json.stderr + tested.stderr,
        }


def shown(receiver: Receiver, user: str = "") -> str:
    """A webhook as every report names it: its password and its path (often a token) hidden."""
    login = f"{user}:****@" if user else ""
    return f"json://{login}127.0.0.1:{receiver.port}/…"


def test_urls_in_the_config_only(tmp_path: Path, receiver: Receiver) -> None:
    host = Host(tmp_path)
    host.configure([f"ops={receiver.url()}"])
    views = host.views()
    expected = [(shown(receiver), "notify.urls[1]", ["ops"])]
    assert views["check-config"] == views["notify-test"] == expected
    assert f"#   {shown(receiver)} (notify.urls[1], tags ops)\n" in views["text"]
    assert "reading" not in views["stderr"]  # no credential in any store
    assert len(receiver.payloads) == 1  # notify-test's


def test_urls_in_the_credential_only(tmp_path: Path, receiver: Receiver) -> None:
    host = Host(tmp_path)
    host.configure([])
    credential = host.credential(f"# the on-call webhook\nops={receiver.url('T0kenSecret42')}\n")
    views = host.views()
    origin = f"notify.urls_file ({credential} line 2)"
    masked = shown(receiver, "lockwarden")
    assert views["check-config"] == views["notify-test"] == [(masked, origin, ["ops"])]
    assert f"#   {masked} ({origin}, tags ops)\n" in views["text"]
    assert f"reading {credential}, as LoadCredential= passes it" in views["stderr"]
    assert "T0kenSecret42" not in views["text"] + views["stderr"]
    assert len(receiver.payloads) == 1


def test_a_url_in_both_is_one_service_named_by_both_origins(
    tmp_path: Path, receiver: Receiver
) -> None:
    other = Receiver()
    other.start()
    try:
        host = Host(tmp_path)
        host.configure([receiver.url()])
        credential = host.credential(f"{receiver.url()}\ndb={other.url()}\n")
        views = host.views()
        twice = f"notify.urls[1] and notify.urls_file ({credential} line 1)"
        expected = [
            (shown(receiver), twice, []),
            (shown(other), f"notify.urls_file ({credential} line 2)", ["db"]),
        ]
        assert views["check-config"] == views["notify-test"] == expected
        assert "# notify services a run would use (2):\n" in views["text"]
        assert len(receiver.payloads) == 1 and len(other.payloads) == 1  # sent once each
    finally:
        other.stop()


def test_the_services_own_credentials_directory_is_used_and_no_store(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Under the unit (or with $CREDENTIALS_DIRECTORY given by hand) the stores are not
    searched: the credential systemd passed is the one named."""
    host = Host(tmp_path)
    host.configure([])
    host.credential("json://127.0.0.1:9/never-used\n", store=0)
    passed = tmp_path / "credentials"
    passed.mkdir(mode=0o700)
    (passed / CREDENTIAL).write_text(receiver.url() + "\n")
    views = host.views(credentials=passed)
    origin = f"notify.urls_file ({passed / CREDENTIAL} line 1)"
    assert views["check-config"] == views["notify-test"] == [(shown(receiver), origin, [])]
    assert "reading" not in views["stderr"] and "never-used" not in views["text"]
    assert len(receiver.payloads) == 1


def test_check_config_says_when_only_the_service_can_see_the_urls(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.configure([])
    host.config.write_text(
        host.config.read_text() + '[notify]\nurls_env = "LOCKWARDEN_TEST_UNSET_URLS"\n'
    )
    text = host.run("check-config")
    assert text.returncode == 0, text.stderr
    assert "# notify services: none that can be seen from here\n" in text.stdout
    assert "#   notify.urls_env: $LOCKWARDEN_TEST_UNSET_URLS is not set here" in text.stdout
    document = json.loads(host.run("check-config", "--json").stdout)
    assert document["services"] == []
    assert document["not_seen_here"][0].startswith("notify.urls_env: $LOCKWARDEN_TEST_UNSET_URLS")
    host.configure([])  # nothing configured and no credential anywhere: alerting is off
    off = host.run("check-config")
    assert "# notify services: none, alerting is off" in off.stdout, off.stdout


def test_once_by_hand_delivers_to_the_credentials_service(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    """As root in a shell, `--once` sends the alert for a lock held too long to the service in
    the unit's credential (it used to say alerting was off), names it as check-config does,
    and `--dry-run` says it would send."""
    host = Host(tmp_path)
    host.configure([], held_too_long=True)
    credential = host.credential(f"ops={receiver.url()}\n")
    holder = children.python(FLOCK_HOLDER, str(host.lock))
    listed = named(json.loads(host.run("check-config", "--json").stdout)["services"])
    assert listed == [(shown(receiver), f"notify.urls_file ({credential} line 1)", ["ops"])]
    dry = host.run("--once", "--dry-run", "--json", "-v")  # -v: which credential was read
    assert dry.returncode == 2, dry.stderr
    assert [item["kind"] for item in json.loads(dry.stdout)["would_send"]] == ["alert"]
    assert f"reading {credential}" in dry.stderr and "alerting is off" not in dry.stderr
    assert receiver.payloads == []
    once = host.run("--once", "--json", "-v")
    assert once.returncode == 2, once.stderr
    document = json.loads(once.stdout)
    store = next(finding for finding in document["locks"] if finding["name"] == "store")
    assert store["holders"][0]["pid"] == holder.pid
    deliveries = document["alerts"]["deliveries"]
    assert [(d["service"], d["origin"], d["delivered"]) for d in deliveries] == [
        (listed[0][0], listed[0][1], True)
    ]
    assert f"reading {credential}, as LoadCredential= passes it" in once.stderr
    quiet = host.run("--once", "--json")  # every minute from a root cron job: not a word
    assert "reading" not in quiet.stderr, quiet.stderr
    [payload] = receiver.payloads
    assert "store" in payload["title"]


def test_once_without_a_root_shell_keeps_its_rules(tmp_path: Path, receiver: Receiver) -> None:
    """An empty $CREDENTIALS_DIRECTORY (given, but nothing passed) is not a root shell: the
    stores are not searched and alerting stays off, as the unit would have it."""
    host = Host(tmp_path)
    host.configure([], held_too_long=True)
    host.credential(receiver.url() + "\n")
    empty = tmp_path / "passed-nothing"
    empty.mkdir()
    once = host.run("--once", "--json", credentials=empty)
    assert "reading" not in once.stderr
    assert json.loads(once.stdout)["alerts"]["deliveries"] == []
    assert receiver.payloads == []
    assert run_cli("check-config", "--config", str(host.config)).returncode == 0
