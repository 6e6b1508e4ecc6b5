"""What the log masking hides: a notify URL's secrets, and not the words around them."""

from __future__ import annotations

import pytest

from lockwarden.alerts.notify import RedactingFilter, path_routes, path_secrets

LINE = "CRITICAL vm: stalepid stale lock left by a dead holder; writes blocked (failure)"


@pytest.mark.parametrize(
    ("url", "secrets", "routes"),
    [
        ("json://127.0.0.1:18799/lock", set(), {"lock"}),
        ("json://alerts.example.net/hook", set(), {"hook"}),
        ("jsons://ntfy.example/lockwardenprod", set(), {"lockwardenprod"}),
        ("json://h/alerts/lockwarden", {"alerts/lockwarden"}, {"alerts", "lockwarden"}),
        ("json://h/hook/s3cr3tT0ken", {"hook/s3cr3tT0ken", "s3cr3tT0ken"}, {"hook"}),
        ("json://h/AbCdEf", {"AbCdEf"}, set()),
        ("json://h/api/v2/Events", {"api/v2/Events"}, {"Events"}),
        ("json://h/EVENTS", set(), {"EVENTS"}),
        (
            "jsons://h/services/T0000/B0000/xxxxxxxxxxxxxxxxxxxxxxxx?x=1",
            {
                "T0000",
                "B0000",
                "xxxxxxxxxxxxxxxxxxxxxxxx",
                "services/T0000/B0000/xxxxxxxxxxxxxxxxxxxxxxxx",
            },
            {"services"},
        ),
    ],
)
def test_a_webhook_path_is_masked_anywhere_where_it_looks_like_a_token(
    url: str, secrets: set[str], routes: set[str]
) -> None:
    """Long, with a digit, or mixed case: a token, masked anywhere; any other piece (a route
    such as /hook, or a topic such as /lockwardenprod) where it stands as a URL's segment."""
    assert (path_secrets(url), path_routes(url)) == (secrets, routes)


def test_a_route_is_masked_in_a_url_and_never_as_a_word_of_a_sentence() -> None:
    masking = RedactingFilter([], [("ntfy.example", "lockwardenprod"), ("127.0.0.1:8088", "lock")])
    assert masking.mask("POST https://ntfy.example/lockwardenprod") == (
        "POST https://ntfy.example/****"
    )
    assert (
        masking.mask("Retrying: /lock?x=1, /lock/a, /lock") == "Retrying: /****?x=1, /****/a, /****"
    )
    assert masking.mask(LINE) == LINE
    assert (
        masking.mask("lockwardenprod and lockwarden: fine") == "lockwardenprod and lockwarden: fine"
    )


def test_a_short_secret_is_masked_only_where_it_stands_alone() -> None:
    """A short password is masked as a word, and after a %-escape, never inside a word or a
    name: a run's warnings must stay readable ("dead" in "deadline", "fail" in "failure",
    "store" in the lock name "hook-store")."""
    masking = RedactingFilter(["dead", "fail", "pw12", "store"])
    assert masking.mask(LINE) == LINE.replace(" dead ", " **** ")
    assert masking.mask("deadline failure") == "deadline failure"
    assert masking.mask("CRITICAL vm: hook-store blocked") == "CRITICAL vm: hook-store blocked"
    assert masking.mask("json://bob:store@host") == "json://bob:****@host"
    assert masking.mask("POST /x%2Fpw12?a=pw12&b=fail") == "POST /x%2F****?a=****&b=****"


def test_a_long_secret_is_masked_wherever_it_appears() -> None:
    """A token is hidden even glued to other text (Telegram's /bot<ID>:<TOKEN> path)."""
    token = "123456789"
    masking = RedactingFilter([token, "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"])
    assert (
        masking.mask(f"POST /bot{token}:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage")
        == "POST /bot****:****/sendMessage"
    )


def test_nothing_to_mask_leaves_every_line_as_it_was() -> None:
    assert RedactingFilter([]).mask(LINE) == LINE


def test_a_route_never_hides_a_piece_of_a_file_path_nor_another_urls() -> None:
    """With json://127.0.0.1:8088/lockwarden configured, the fixes lockwarden prints must stay
    usable: `/etc/lockwarden/config.toml`, `chmod 0700 /tmp/lockwarden`."""
    masking = RedactingFilter([], [("127.0.0.1:8088", "lockwarden")])
    for line in (
        "/etc/lockwarden/config.toml: lock[5].warn_afer: unknown key",
        "chmod 0700 /tmp/lockwarden",
        "json://127.0.0.1:9999/lockwarden answered",  # another service's path is not this one
        "/var/lib/lockwarden/state.jsonl",
    ):
        assert masking.mask(line) == line
    assert masking.mask("json://127.0.0.1:8088/lockwarden") == "json://127.0.0.1:8088/****"
    assert masking.mask('"POST /lockwarden HTTP/1.1" 500') == '"POST /**** HTTP/1.1" 500'
