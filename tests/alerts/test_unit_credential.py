"""The system unit's credential (LoadCredential=lockwarden-notify-urls, a file in
/etc/credstore) turns alerting on with no config key, through the real CLI and a real receiver
on 127.0.0.1; systemd is stood in for by setting $CREDENTIALS_DIRECTORY, as it does."""

from __future__ import annotations

from pathlib import Path

from .helpers import Receiver, run_cli

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
