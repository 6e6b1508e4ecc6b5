"""cli/notify_view.py with the installed apprise (its plugins loaded, nothing sent): the
services a run would use, one per URL however often it is configured, each with where it was
configured; the URLs apprise cannot use; and the sources only the service can read, named
and left out. Every URL is shown masked."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from lockwarden.cli.notify_view import (
    checkable_here,
    notify_view,
    render_services,
    services_document,
    unit_credential_unseen,
)
from lockwarden.config import NOTIFY_CREDENTIAL, NotifySettings

TOKEN = "TokSecret1234567"
HOOK = f"json://lockwarden:{TOKEN}@127.0.0.1:9/hook"
MAIL = "ops=mailto://u:pw0rdSecret@mail.example.org"


def urls_file(tmp_path: Path) -> Path:
    path = tmp_path / "notify-urls"
    path.write_text(f"# the on-call channels\njson://127.0.0.1:9/other\n{MAIL}\n")
    return path


def test_each_url_is_one_service_with_every_place_it_was_configured(tmp_path: Path) -> None:
    listed = urls_file(tmp_path)
    view = notify_view(NotifySettings(urls=(HOOK, MAIL), urls_file=str(listed)))
    assert (view.configured, view.complete, view.error, view.unseen) == (True, True, None, ())
    document = services_document(view)
    assert [(s["origin"], s["tags"]) for s in document["services"]] == [
        ("notify.urls[1]", []),
        (f"notify.urls[2] and notify.urls_file ({listed} line 3)", ["ops"]),
        (f"notify.urls_file ({listed} line 2)", []),
    ]
    shown = json.dumps(document)
    assert TOKEN not in shown and "pw0rdSecret" not in shown


def test_a_url_apprise_cannot_use_is_listed_apart(tmp_path: Path) -> None:
    view = notify_view(NotifySettings(urls=(HOOK, "notascheme://x")))
    assert [s["origin"] for s in services_document(view)["services"]] == ["notify.urls[1]"]
    assert services_document(view)["unusable"] == [
        {
            "url": "notascheme://…",
            "origin": "notify.urls[2]",
            "problem": "unknown scheme 'notascheme': apprise has no such service",
        }
    ]
    text = render_services(view)
    assert "# notify URLs apprise cannot use (never sent to):\n" in text
    assert TOKEN not in text


def test_no_notify_settings_is_alerting_off() -> None:
    view = notify_view(NotifySettings())
    assert not view.configured and view.services == ()
    assert render_services(view) == (
        "# notify services: none, alerting is off (no [notify] URL is set and no "
        f"{NOTIFY_CREDENTIAL} credential was found)\n"
    )


def test_an_unreadable_urls_file_is_an_error_of_the_settings(tmp_path: Path) -> None:
    view = notify_view(NotifySettings(urls_file=str(tmp_path / "absent")))
    assert view.configured and view.services == ()
    assert view.error == (
        f"notify.urls_file: cannot read {tmp_path / 'absent'}: No such file or directory"
    )


def test_an_environment_variable_not_set_here_is_named_and_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("LOCKWARDEN_TEST_URLS", raising=False)
    settings = NotifySettings(urls=(HOOK,), urls_env="LOCKWARDEN_TEST_URLS")
    with caplog.at_level(logging.WARNING, logger="lockwarden"):
        view = notify_view(settings)
    assert len(view.services) == 1 and not view.complete
    assert view.unseen == (
        "notify.urls_env: $LOCKWARDEN_TEST_URLS is not set here; the service reads its URLs "
        "from its own environment",
    )
    assert "$LOCKWARDEN_TEST_URLS is not set here" in caplog.text
    assert render_services(view).endswith(
        f"# not seen here, so their services are not listed:\n#   {view.unseen[0]}\n"
    )

    monkeypatch.setenv("LOCKWARDEN_TEST_URLS", MAIL)
    seen = notify_view(settings)
    assert seen.complete and seen.unseen == ()
    assert [s["origin"] for s in services_document(seen)["services"]] == [
        "notify.urls[1]",
        "notify.urls_env ($LOCKWARDEN_TEST_URLS word 1)",
    ]


def test_a_credential_only_the_service_sees_is_left_out_until_its_directory_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = NotifySettings(urls_file=NOTIFY_CREDENTIAL)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "")
    checkable, unseen = checkable_here(settings)
    assert checkable.urls_file is None and len(unseen) == 1
    view = notify_view(settings)
    assert (view.configured, view.services, view.complete) == (True, (), False)
    assert render_services(view).startswith("# notify services: none that can be seen from here\n")

    (tmp_path / NOTIFY_CREDENTIAL).write_text(HOOK + "\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert checkable_here(settings) == (settings, ())
    assert len(notify_view(settings).services) == 1


def test_the_units_own_credential_is_only_unknowable_without_root_or_a_urls_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stores = ("/etc/credstore",)
    assert unit_credential_unseen(NotifySettings(urls_file="/etc/x"), stores) is None
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/lockwarden.service")
    assert unit_credential_unseen(NotifySettings(), stores) is None
    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    expected = (
        None
        if os.geteuid() == 0
        else (
            f"the {NOTIFY_CREDENTIAL} credential: lockwarden.service also reads it where "
            "LoadCredential= finds it (/etc/credstore), which only root can look in"
        )
    )
    assert unit_credential_unseen(NotifySettings(), stores) == expected
