"""support/redact.py: secrets out of a holder's command line, as a table."""

from __future__ import annotations

import pytest

from lockwarden.model import command_text
from lockwarden.support.redact import REDACTED, redact_argv, redact_text

H = REDACTED

CASES = [
    (["app", "--password=hunter2"], ["app", f"--password={H}"]),
    (["app", "--password", "hunter2", "db"], ["app", "--password", H, "db"]),
    (["app", "--token", "abc", "-v"], ["app", "--token", H, "-v"]),
    (["mysql", "-uroot", "-phunter2", "shop"], ["mysql", "-uroot", f"-p{H}", "shop"]),
    (["mysql", "-p", "shop"], ["mysql", "-p", "shop"]),  # a prompt: the next word is the db
    (["curl", "-u", "ops:hunter2", "https://x"], ["curl", "-u", f"ops:{H}", "https://x"]),
    (
        ["curl", "-H", "Authorization: Bearer hunter2", "u"],
        ["curl", "-H", f"Authorization: Bearer {H}", "u"],
    ),
    (["sshpass", "-p", "hunter2", "ssh", "h"], ["sshpass", "-p", H, "ssh", "h"]),
    (["psql", "postgresql://ops:hunter2@db/shop"], ["psql", f"postgresql://ops:{H}@db/shop"]),
    (
        ["psql", "host=db password=hunter2 dbname=shop"],
        ["psql", f"host=db password={H} dbname=shop"],
    ),
    (["env", "AWS_SECRET_ACCESS_KEY=hunter2", "job"], ["env", f"AWS_SECRET_ACCESS_KEY={H}", "job"]),
    (
        ["sh", "-c", "PGPASSWORD=hunter2 psql -c 'select 1'"],
        ["sh", "-c", f"PGPASSWORD={H} psql -c 'select 1'"],
    ),
    (["sh", "-c", "app --password hunter2 && x"], ["sh", "-c", f"app --password {H} && x"]),
    (["app", "--password-file", "/run/pw"], ["app", "--password-file", "/run/pw"]),
    (["app", "--no-password", "db"], ["app", "--no-password", "db"]),
    (["rsync", "-av", "src/", "dst/"], ["rsync", "-av", "src/", "dst/"]),
]


@pytest.mark.parametrize(("argv", "shown"), CASES)
def test_a_secret_on_a_command_line_is_hidden_and_the_rest_shown(
    argv: list[str], shown: list[str]
) -> None:
    assert list(redact_argv(argv)) == shown


@pytest.mark.parametrize(("argv", "shown"), CASES)
def test_redacting_twice_changes_nothing(argv: list[str], shown: list[str]) -> None:
    assert list(redact_argv(redact_argv(argv))) == shown


def test_every_report_and_alert_line_of_a_command_hides_its_secrets() -> None:
    assert "hunter2" not in command_text(["job", "--password=hunter2"])
    # A secret past the cut is still recognised whole (redacted before cutting).
    long = ["job", "x" * 290, "--password", "hunter2" * 3]
    assert "hunter2" not in command_text(long, 300)


def test_a_query_text_has_its_sql_password_hidden() -> None:
    assert "hunter2" not in redact_text("ALTER USER ops PASSWORD 'hunter2'")
