"""config/render.py: the effective config check-config prints. Read back by the real loader it
is the same config (every default written out, in the units a config is written in), and no
secret of a URL is ever in it."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import tomli_w

from lockwarden import config
from lockwarden.config import effective, hide_url
from lockwarden.state.journal import default_state_path

SECRET = "xoxb-Secret0123456789"

DOCUMENT: dict[str, Any] = {
    "defaults": {"warn_after": "20m", "critical_after": "90m"},
    "alerts": {"repeat_interval": "2h"},
    "notify": {"urls": [f"slack://{SECRET}/B/C", f"ops=mailto://u:{SECRET}@mail.example.org"]},
    "heartbeat": {"url": f"https://hc-ping.com/{SECRET}"},
    "alertmanager": {"urls": [f"http://lockwarden:{SECRET}@am.example.org:9093"]},
    "prometheus": {"textfile": "/var/lib/node-exporter/lockwarden.prom"},
    "lock": [
        {
            "name": "wa-store",
            "path": "/srv/wa/store/LOCK",
            "format": "owner-record",
            "role": "WhatsApp session store",
            "host_aliases": ["db1"],
            "notify_tags": ["ops"],
            "repeat_interval": "30m",
            "remove_stale": True,
            "stale_confirm": "5m",
        },
        {
            "name": "app-migrations",
            "database": "postgresql",
            "connection": "service=app",
            "advisory_key": "prisma",
        },
    ],
}


def loaded() -> config.Config:
    return config.parse(DOCUMENT, "lockwarden.toml")


def as_printed(document: dict[str, Any]) -> dict[str, Any]:
    """What check-config prints, read back as TOML."""
    return tomllib.loads(tomli_w.dumps(document))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("slack://T000/B000/XXXX", "slack://(hidden)"),
        ("ops,db=mailto://user:pw@mail.example.org", "ops,db=mailto://(hidden)"),
        ("https://hc-ping.com/5b0c6e3a-uuid", "https://hc-ping.com/(hidden)"),
        ("https://user:pw@am.example.org:9093", "https://(hidden)"),  # credentials: no host
        ("not a url at all", "(hidden)"),
    ],
)
def test_a_url_shows_its_scheme_tags_and_a_public_host_only(url: str, shown: str) -> None:
    assert hide_url(url) == shown


def test_no_secret_reaches_the_effective_config() -> None:
    printed = tomli_w.dumps(effective(loaded()))
    assert SECRET not in printed
    document = as_printed(effective(loaded()))
    assert document["notify"]["urls"] == ["slack://(hidden)", "ops=mailto://(hidden)"]
    assert document["heartbeat"]["url"] == "https://hc-ping.com/(hidden)"
    assert document["alertmanager"]["urls"] == ["http://(hidden)"]


def test_read_back_it_is_the_same_config() -> None:
    original = loaded()
    document = as_printed(effective(original))
    for hidden in ("notify", "heartbeat", "alertmanager"):  # their URLs are shown hidden
        del document[hidden]
    again = config.parse(document, "lockwarden.toml")
    assert again.locks == original.locks
    assert again.defaults == original.defaults
    assert again.alerts == original.alerts
    assert again.prometheus_textfile == original.prometheus_textfile


def test_every_default_is_written_out() -> None:
    document = effective(config.parse({"lock": [{"name": "x", "path": "/srv/x.lock"}]}, None))
    [lock] = document["lock"]
    assert lock == {
        "name": "x",
        "path": "/srv/x.lock",
        "format": "auto",
        "warn_after": "15m",
        "critical_after": "1h",
        "fs_timeout": "3s",
        "repeat_interval": "1h",
        "resolve_after": 1,
        "unknown_after": 3,
        "give_up_after": "24h",
        "min_severity": "critical",
        "stale_after": "10m",
        "remove_stale": False,
        "stale_confirm": "2m",
    }
    assert document["state"] == {"path": default_state_path(), "max_bytes": 262144}
    assert set(document) == {"defaults", "alerts", "state", "notify", "heartbeat", "host", "lock"}


def test_a_database_lock_shows_its_connection_and_not_a_path() -> None:
    [_, database] = effective(loaded())["lock"]
    assert "path" not in database and "format" not in database
    assert {key: database[key] for key in ("database", "connection", "advisory_key")} == {
        "database": "postgresql",
        "connection": "service=app",
        "advisory_key": "prisma",
    }
    assert (database["connect_timeout"], database["statement_timeout"]) == ("3s", "2s")


def test_every_section_and_key_of_the_schema_is_shown() -> None:
    document = effective(loaded())
    for section, options in config.SECTIONS.items():
        with_a_default = {option.key for option in options if option.default is not None}
        assert with_a_default <= set(document.get(section, {})), section
