"""alerts/notify.py with the installed apprise and a real JSON webhook receiver on 127.0.0.1
(tests/alerts/helpers.py's): where each URL was configured, one service per URL however often
it is given, routing by tags, and each delivery's own outcome, never with its secret. (The log
masking is test_redaction.py's; whole runs that send are tests/alerts'.)"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.helpers import Receiver, free_port
from lockwarden.alerts.messages import Message
from lockwarden.alerts.notify import (
    Notifier,
    NotifyConfigError,
    UrlSpec,
    service_id_of,
    split_tags,
    url_specs,
)
from lockwarden.config import NotifySettings

TOKEN = "Tok3nSecretAbcdefXyz"
MESSAGE = Message(
    title="CRITICAL db1: wa-store blocked 2h01m by PID 64969",
    markdown="**writes blocked**",
    text="writes blocked",
    notify_type="failure",
)


@pytest.fixture
def webhook() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    try:
        yield server
    finally:
        server.release.set()
        server.stop()


@pytest.mark.parametrize(
    ("entry", "spec"),
    [
        ("slack://T/B/C", UrlSpec("slack://T/B/C", ())),
        ("ops, db = slack://T/B/C", UrlSpec("slack://T/B/C", ("ops", "db"))),
        ("json://h/hook?mode=a=b", UrlSpec("json://h/hook?mode=a=b", ())),  # `=` in the URL
        ("  json://h/hook  ", UrlSpec("json://h/hook", ())),
    ],
)
def test_tags_are_split_from_the_url_they_route(entry: str, spec: UrlSpec) -> None:
    assert split_tags(entry) == spec


def test_every_url_is_named_by_where_it_was_configured(tmp_path: Path) -> None:
    listed = tmp_path / "urls"
    listed.write_text("# on-call\n\nops=json://127.0.0.1:9/a\n   # old: json://x\njson://h/b\n")
    settings = NotifySettings(urls=("json://h/c",), urls_env="ALERT_URLS", urls_file=str(listed))
    specs = url_specs(settings, {"ALERT_URLS": "json://h/d  json://h/e"})
    assert [(spec.url, spec.tags, spec.origin) for spec in specs] == [
        ("json://h/c", (), "notify.urls[1]"),
        ("json://h/d", (), "notify.urls_env ($ALERT_URLS word 1)"),
        ("json://h/e", (), "notify.urls_env ($ALERT_URLS word 2)"),
        ("json://127.0.0.1:9/a", ("ops",), f"notify.urls_file ({listed} line 3)"),
        ("json://h/b", (), f"notify.urls_file ({listed} line 5)"),
    ]


@pytest.mark.parametrize(
    ("settings", "environ", "words"),
    [
        (NotifySettings(urls_env="ALERT_URLS"), {}, "$ALERT_URLS is not set or empty"),
        (
            NotifySettings(urls_file="lockwarden-notify-urls"),
            {},
            "is a credential name but $CREDENTIALS_DIRECTORY is not set",
        ),
    ],
)
def test_a_source_that_cannot_be_read_is_a_config_error(
    settings: NotifySettings, environ: dict[str, str], words: str
) -> None:
    with pytest.raises(NotifyConfigError, match=words.replace("$", r"\$")):
        url_specs(settings, environ)


def test_a_credential_of_only_comments_would_alert_nobody(tmp_path: Path) -> None:
    (tmp_path / "lockwarden-notify-urls").write_text("# filled in later\n")
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    with pytest.raises(NotifyConfigError) as nobody:
        Notifier(NotifySettings(urls_file="lockwarden-notify-urls"), environ)
    assert str(nobody.value) == (
        f"notify.urls_file ({tmp_path / 'lockwarden-notify-urls'}) lists no URL (empty, or only "
        "comments): alerts would reach nobody"
    )


def test_one_url_given_twice_is_one_service_with_both_tags_and_origins(webhook: Receiver) -> None:
    url = webhook.url(TOKEN)
    notifier = Notifier(NotifySettings(urls=(f"ops={url}", f"db={url}")))
    [service] = notifier.services
    assert service.tags == frozenset({"ops", "db"})
    assert service.origin == "notify.urls[1] and notify.urls[2]"
    assert service.service_id == hashlib.sha256(url.encode()).hexdigest()[:16]
    assert service.service_id == service_id_of(url)
    assert TOKEN not in service.url


def test_a_services_id_does_not_move_with_the_timeout(webhook: Receiver) -> None:
    url = webhook.url(TOKEN)
    quick = Notifier(NotifySettings(urls=(url,), timeout=1.0)).services[0]
    slow = Notifier(NotifySettings(urls=(url,), timeout=30.0)).services[0]
    assert quick.service_id == slow.service_id


def test_a_url_apprise_cannot_use_never_stops_the_others(webhook: Receiver) -> None:
    notifier = Notifier(NotifySettings(urls=("notascheme://x", webhook.url(TOKEN))))
    assert [service.origin for service in notifier.services] == ["notify.urls[2]"]
    [invalid] = notifier.invalid
    assert (invalid.origin, invalid.shown) == ("notify.urls[1]", "notascheme://…")


def test_a_lock_routes_to_its_tags_and_to_services_tagged_always(webhook: Receiver) -> None:
    base = f"json://127.0.0.1:{webhook.port}"
    notifier = Notifier(
        NotifySettings(urls=(f"ops={base}/a", f"db={base}/b", f"always={base}/c", f"{base}/d"))
    )
    by_origin = [service.service_id for service in notifier.services]
    assert len(set(by_origin)) == 4
    assert notifier.targets(()) == tuple(by_origin)
    assert notifier.targets(("ops",)) == (by_origin[0], by_origin[2])
    assert notifier.unrouted(("ops",)) is None
    assert notifier.unrouted(("web",)) is None  # `always` still gets it
    untagged = Notifier(NotifySettings(urls=(f"ops={base}/a",)))
    assert untagged.unrouted(("web",)) == (
        "notify_tags web match no notify service (the services' tags are ops)"
    )


def test_a_delivered_message_reaches_the_receiver_and_says_so(webhook: Receiver) -> None:
    notifier = Notifier(NotifySettings(urls=(webhook.url(TOKEN),), timeout=5.0))
    [delivery] = notifier.send(MESSAGE, notifier.targets(()))
    assert (delivery.ok, delivery.status, delivery.origin) == (True, "success", "notify.urls[1]")
    [payload] = webhook.payloads
    assert (payload["title"], payload["type"]) == (MESSAGE.title, "failure")
    assert payload["message"] == MESSAGE.markdown


def test_a_refused_or_failing_service_is_its_own_failure_without_its_secret(
    webhook: Receiver,
) -> None:
    webhook.mode = "fail"
    down = f"json://lockwarden:{TOKEN}@127.0.0.1:{free_port()}/hook"
    notifier = Notifier(NotifySettings(urls=(webhook.url(TOKEN), down), timeout=5.0))
    deliveries = notifier.send(MESSAGE, notifier.targets(()))
    assert [(d.origin, d.ok) for d in deliveries] == [
        ("notify.urls[1]", False),
        ("notify.urls[2]", False),
    ]
    assert webhook.requests >= 1
    assert all(TOKEN not in d.status and TOKEN not in d.url for d in deliveries)


def test_a_journaled_id_is_found_again_by_id_legacy_id_or_shown_url(webhook: Receiver) -> None:
    notifier = Notifier(NotifySettings(urls=(webhook.url(TOKEN),)))
    [service] = notifier.services
    assert notifier.match(service.service_id) == service.service_id
    assert notifier.match(service.legacy_id) == service.service_id
    assert notifier.match("0" * 16, [service.url]) == service.service_id
    assert notifier.match("0" * 16, ["json://elsewhere/…"]) is None
