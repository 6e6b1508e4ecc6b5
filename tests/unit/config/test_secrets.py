"""config/secrets.py on real config files: a file that holds a notify, heartbeat or
Alertmanager secret and that other users can read is warned about, naming both fixes; a
private file, or one whose secrets live elsewhere, is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_config
from lockwarden import config
from lockwarden.config.secrets import holds_secrets, readable_secrets_warning

LOCK = '\n[[lock]]\nname = "x"\npath = "/srv/x.lock"\n'


def config_file(tmp_path: Path, text: str, mode: int) -> config.Config:
    path = Path(write_config(tmp_path / "lockwarden.toml", text + LOCK))
    path.chmod(mode)
    return config.load(str(path))


@pytest.mark.parametrize(
    "section",
    [
        '[notify]\nurls = ["slack://T000/B000/XXXX"]\n',
        '[heartbeat]\nurl = "https://hc-ping.com/5b0c6e3a"\n',
        '[alertmanager]\nurls = ["https://lockwarden:pw@am.example.org:9093"]\n',
    ],
)
def test_a_secret_in_a_file_others_can_read_is_warned_about(tmp_path: Path, section: str) -> None:
    loaded = config_file(tmp_path, section, 0o644)
    assert holds_secrets(loaded)
    source = tmp_path / "lockwarden.toml"
    assert readable_secrets_warning(loaded) == (
        f"{source} holds notification or heartbeat URLs with secrets and is readable by other "
        f"users (mode 0644): chmod 0600 {source}, or move the URLs to notify.urls_file (a "
        "systemd credential) or notify.urls_env"
    )


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_group_or_other_read_is_enough_to_warn(tmp_path: Path, mode: int) -> None:
    loaded = config_file(tmp_path, '[notify]\nurls = ["slack://T/B/C"]\n', mode)
    warning = readable_secrets_warning(loaded)
    assert warning is not None and f"(mode {mode:04o})" in warning


def test_a_private_file_is_not_warned_about(tmp_path: Path) -> None:
    loaded = config_file(tmp_path, '[notify]\nurls = ["slack://T/B/C"]\n', 0o600)
    assert readable_secrets_warning(loaded) is None


@pytest.mark.parametrize(
    "section",
    [
        "",
        '[notify]\nurls_env = "LOCKWARDEN_NOTIFY"\n',
        '[alertmanager]\nurls = ["https://am.example.org:9093"]\n',  # no credentials in it
    ],
)
def test_a_file_whose_secrets_live_elsewhere_is_not(tmp_path: Path, section: str) -> None:
    loaded = config_file(tmp_path, section, 0o644)
    assert not holds_secrets(loaded)
    assert readable_secrets_warning(loaded) is None


def test_built_in_defaults_and_a_vanished_file_are_not(tmp_path: Path) -> None:
    loaded = config_file(tmp_path, '[notify]\nurls = ["slack://T/B/C"]\n', 0o644)
    (tmp_path / "lockwarden.toml").unlink()
    assert readable_secrets_warning(loaded) is None
    assert readable_secrets_warning(config.builtin()) is None
