"""The system unit's credential (LoadCredential=lockwarden-notify-urls, a file in
/etc/credstore) turns alerting on with no config key, through the real CLI and a real receiver
on 127.0.0.1; systemd is stood in for by setting $CREDENTIALS_DIRECTORY, as it does."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FLOCK_HOLDER

from .helpers import Children, Receiver, run_cli

CONFIG = '[[lock]]\nname = "store"\npath = "/nonexistent/store.lock"\nformat = "kernel"\n'


def credentials(tmp_path: Path, urls: str) -> str:
    directory = tmp_path / "credentials"
    directory.mkdir(mode=0o700)
    (directory / "lockwarden-notify-urls").write_text(urls)
    return str(directory)


def test_the_units_credential_is_used_without_a_config_key(
    tmp_path: Path, receiver: Receiver
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    directory = credentials(tmp_path, f"# the on-call webhook\n{receiver.url()}\n")
    sent = run_cli("notify-test", "--config", str(config), CREDENTIALS_DIRECTORY=directory)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "delivered" in sent.stdout
    assert len(receiver.payloads) == 1


def test_without_the_credential_alerting_stays_off(tmp_path: Path, receiver: Receiver) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    empty = tmp_path / "credentials"
    empty.mkdir()
    sent = run_cli("notify-test", "--config", str(config), CREDENTIALS_DIRECTORY=str(empty))
    assert sent.returncode == 78, sent.stdout + sent.stderr
    assert "no [notify] service is configured" in sent.stderr
    assert receiver.payloads == []


def test_a_urls_file_in_the_config_wins_over_the_units_credential(
    tmp_path: Path, receiver: Receiver
) -> None:
    chosen = tmp_path / "chosen-urls"
    chosen.write_text(receiver.url() + "\n")
    config = tmp_path / "config.toml"
    config.write_text(CONFIG + f'\n[notify]\nurls_file = "{chosen}"\n')
    directory = credentials(tmp_path, "json://127.0.0.1:9/never-used\n")
    sent = run_cli("notify-test", "--config", str(config), CREDENTIALS_DIRECTORY=directory)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert len(receiver.payloads) == 1


def test_an_empty_credential_is_said_and_the_alert_goes_out_once_a_url_is_added(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    """`install -m 0600 /dev/null /etc/credstore/lockwarden-notify-urls` before the URL is
    written: alerting is on, but no service exists. The run says so (the notify finding, not
    OK), and the alert due meanwhile is sent, as the alert, once a URL is there."""
    held = tmp_path / "store.lock"
    holder = children.python(FLOCK_HOLDER, str(held))
    config = tmp_path / "config.toml"
    config.write_text(
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        f'[[lock]]\nname = "store"\npath = "{held}"\nformat = "kernel"\n'
        'warn_after = "0s"\ncritical_after = "0s"\n'  # any hold is too long: due at once
    )
    directory = credentials(tmp_path, "# the on-call webhook goes here\n")
    first = run_cli("--once", "--json", "--config", str(config), CREDENTIALS_DIRECTORY=directory)
    findings = {finding["name"]: finding for finding in json.loads(first.stdout)["locks"]}
    assert first.returncode == 2, first.stderr  # the critical lock outranks the notify finding
    assert findings["store"]["holders"][0]["pid"] == holder.pid
    assert findings["lockwarden:notify"]["state"] == "unknown"
    assert "lists no URL" in findings["lockwarden:notify"]["reason"]
    assert receiver.payloads == []
    (Path(directory) / "lockwarden-notify-urls").write_text(receiver.url() + "\n")
    second = run_cli("--once", "--json", "--config", str(config), CREDENTIALS_DIRECTORY=directory)
    assert second.returncode == 2, second.stderr
    assert "lockwarden:notify" not in {f["name"] for f in json.loads(second.stdout)["locks"]}
    [payload] = receiver.payloads
    assert "store" in payload["title"] and "reminder" not in payload["title"].lower()


def test_check_config_names_a_credential_it_cannot_see_and_refuses_an_empty_one(
    tmp_path: Path,
) -> None:
    """In a shell, the credential is the service's alone: check-config says it left it out
    (and passes); where it can read it, an empty one is an error, as every run would say."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG + '\n[notify]\nurls_file = "lockwarden-notify-urls"\n')
    unseen = run_cli("check-config", "--config", str(config))
    assert unseen.returncode == 0, unseen.stderr
    assert "only the service sees, so its URLs were not checked" in unseen.stderr
    directory = credentials(tmp_path, "# nothing yet\n")
    empty = run_cli("check-config", "--config", str(config), CREDENTIALS_DIRECTORY=directory)
    assert empty.returncode == 78, empty.stderr
    assert "lists no URL (empty, or only comments): alerts would reach nobody" in empty.stderr


def test_an_alert_due_while_every_url_is_unusable_goes_out_once_one_is_fixed(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    """A typo in the only URL (`slak://`): the alert cannot go anywhere. It is kept, with its
    services unresolved, and sent as the alert once the URL is fixed, not lost until the
    first reminder."""
    held = tmp_path / "store.lock"
    children.python(FLOCK_HOLDER, str(held))
    config = tmp_path / "config.toml"
    lock = (
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
        f'[[lock]]\nname = "store"\npath = "{held}"\nformat = "kernel"\n'
        'warn_after = "0s"\ncritical_after = "0s"\n'
    )
    config.write_text(lock + '[notify]\nurls = ["slak://T0/B0/XXXX"]\n')
    config.chmod(0o600)
    first = run_cli("--once", "--json", "--config", str(config))
    findings = {finding["name"]: finding for finding in json.loads(first.stdout)["locks"]}
    assert first.returncode == 2, first.stderr
    assert "notify.urls[1]" in findings["lockwarden:notify"]["reason"]
    config.write_text(lock + f'[notify]\nurls = ["{receiver.url()}"]\n')
    second = run_cli("--once", "--json", "--config", str(config))
    assert second.returncode == 2, second.stderr
    [payload] = receiver.payloads
    assert "store" in payload["title"] and "reminder" not in payload["title"].lower()
