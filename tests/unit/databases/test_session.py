"""databases/session.py: where a database check's password comes from (a real file, or a
systemd credential in a real $CREDENTIALS_DIRECTORY), its errors naming the file and never
its content, and the time limits a check derives from its watch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_env, require_tool
from lockwarden.config import DatabaseWatch
from lockwarden.databases.session import (
    CONNECT_ATTEMPTS,
    PASSWORD_LIMIT,
    CheckProblem,
    answer_deadline_s,
    connect_timeout_s,
    one_line,
    read_password,
    statement_timeout_ms,
    unanswered,
)

PASSWORD = "s3cret-Pa55word"


def watch(**fields: object) -> DatabaseWatch:
    base: dict[str, object] = {
        "engine": "postgresql",
        "connection": "service=app",
        "watch": "advisory_key",
        "target": "prisma",
    }
    return DatabaseWatch(**(base | fields))  # type: ignore[arg-type]


def test_no_password_file_is_no_password() -> None:
    assert read_password(watch(), {}) is None


def test_a_password_file_is_read_without_its_line_end(tmp_path: Path) -> None:
    secret = tmp_path / "db-password"
    secret.write_text(f"{PASSWORD}\r\n")
    assert read_password(watch(password_file=str(secret)), {}) == PASSWORD


def test_a_credential_name_is_read_from_the_units_credentials_directory(tmp_path: Path) -> None:
    (tmp_path / "app-db-password").write_text(f"{PASSWORD}\n")
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert read_password(watch(password_file="app-db-password"), environ) == PASSWORD


def test_a_credential_name_without_a_credentials_directory_says_how_to_give_one() -> None:
    with pytest.raises(CheckProblem, match=r"\$CREDENTIALS_DIRECTORY is not set"):
        read_password(watch(password_file="app-db-password"), {})


def test_an_unreadable_file_is_named_and_its_content_never_shown(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(CheckProblem) as absent:
        read_password(watch(password_file=str(missing)), {})
    assert str(absent.value) == f"cannot read password_file {missing}: No such file or directory"

    binary = tmp_path / "binary"
    binary.write_bytes(PASSWORD.encode() + b"\xff\xfe")
    with pytest.raises(CheckProblem) as garbled:
        read_password(watch(password_file=str(binary)), {})
    assert str(garbled.value) == f"cannot read password_file {binary}: not UTF-8"
    assert PASSWORD not in str(garbled.value)


def test_a_huge_file_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("w") as handle:
        handle.write("p" * (PASSWORD_LIMIT * 4))
    password = read_password(watch(password_file=str(huge)), {})
    assert password == "p" * PASSWORD_LIMIT


def test_a_file_this_user_may_not_read_is_named(tmp_path: Path) -> None:
    """Root reads any file, so as root the read is made by an unprivileged user (nobody,
    through util-linux's setpriv) in a child: the file it may not read is named."""
    secret = tmp_path / "db-password"
    secret.write_text(PASSWORD)
    secret.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(CheckProblem, match="Permission denied"):
            read_password(watch(password_file=str(secret)), {})
        return
    tmp_path.chmod(0o755)  # nobody may reach the file, not read it
    program = (
        "from lockwarden.config import DatabaseWatch\n"
        "from lockwarden.databases.session import CheckProblem, read_password\n"
        "try:\n"
        "    read_password(\n"
        "        DatabaseWatch('postgresql', 'service=app', 'advisory_key', 'prisma',\n"
        f"                      password_file={str(secret)!r}), {{}})\n"
        "except CheckProblem as problem:\n"
        "    print(problem)\n"
    )
    setpriv = require_tool("setpriv")
    unprivileged = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    completed = subprocess.run(
        [*unprivileged, sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**cli_env(), "HOME": "/"},
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    said = completed.stdout.strip()
    assert said == f"cannot read password_file {secret}: Permission denied", said
    assert PASSWORD not in completed.stdout + completed.stderr


@pytest.mark.parametrize(("seconds", "whole"), [(0.5, 2), (1.0, 2), (2.0, 2), (2.1, 3), (10.0, 10)])
def test_libpq_gets_whole_seconds_and_never_its_one(seconds: float, whole: int) -> None:
    assert connect_timeout_s(watch(connect_timeout=seconds)) == whole


@pytest.mark.parametrize(("seconds", "ms"), [(2.0, 2000), (0.25, 250), (0.0001, 1)])
def test_the_statement_timeout_in_milliseconds_is_never_zero(seconds: float, ms: int) -> None:
    assert statement_timeout_ms(watch(statement_timeout=seconds)) == ms


def test_the_answer_deadline_covers_every_connect_attempt_and_query() -> None:
    limits = watch(connect_timeout=3.0, statement_timeout=2.0)
    assert answer_deadline_s(limits, 2) == CONNECT_ATTEMPTS * 3 + 2 * 2.0 + 1.0
    quick = watch(connect_timeout=3.0, statement_timeout=0.1)
    assert answer_deadline_s(quick, 2) == CONNECT_ATTEMPTS * 3 + 2 * 1.0 + 1.0  # a second each


def test_the_reason_for_no_answer_names_the_deadline_and_its_parts() -> None:
    reason = unanswered(14.0, 2)
    assert reason.startswith("the server did not answer within 14s (connect_timeout 3 times")
    assert "each of 2 queries" in reason


def test_a_drivers_error_goes_on_one_cut_line() -> None:
    error = RuntimeError("connection to server failed:\n\tFATAL:  password authentication")
    assert one_line(error) == "connection to server failed: FATAL: password authentication"
    assert one_line(TimeoutError()) == "TimeoutError"
    cut = one_line(RuntimeError("x" * 400), limit=10)
    assert cut == "x" * 9 + "…"
