"""What the log masking hides: a notify URL's secrets, and not the words around them."""

from __future__ import annotations

import pytest

from lockwarden.alerts.notify import RedactingFilter, path_secrets

LINE = "CRITICAL vm: stalepid stale lock left by a dead holder; writes blocked (failure)"


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("json://127.0.0.1:18799/lock", set()),
        ("json://alerts.example.net/hook", set()),
        ("json://h/alerts/lockwarden", {"alerts/lockwarden"}),
        ("json://h/hook/s3cr3tT0ken", {"hook/s3cr3tT0ken", "s3cr3tT0ken"}),
        ("json://h/AbCdEf", {"AbCdEf"}),
        (
            "jsons://h/services/T0000/B0000/xxxxxxxxxxxxxxxxxxxxxxxx",
            {
                "T0000",
                "B0000",
                "xxxxxxxxxxxxxxxxxxxxxxxx",
                "services/T0000/B0000/xxxxxxxxxxxxxxxxxxxxxxxx",
            },
        ),
    ],
)
def test_a_webhook_path_is_secret_where_it_looks_like_a_token(url: str, secrets: set[str]) -> None:
    """Long, with a digit, or mixed case: a token; a route name (/hook, /lock) is not one."""
    assert path_secrets(url) == secrets


def test_a_short_secret_is_masked_only_where_it_stands_alone() -> None:
    """A short password is masked as a word, and after a %-escape, never inside a word: a
    run's warnings must stay readable ("dead" in "deadline", "fail" in "failure")."""
    masking = RedactingFilter(["dead", "fail", "pw12"])
    assert masking.mask(LINE) == LINE.replace(" dead ", " **** ")
    assert masking.mask("deadline failure") == "deadline failure"
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
