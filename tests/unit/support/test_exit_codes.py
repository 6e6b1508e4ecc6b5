"""support/exit_codes.py: the one table of exit codes. The run's codes are distinct (a monitor
tells them apart), the help lists exactly the codes the command uses, and the real command
answers with them."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli, write_config
from lockwarden.support import exit_codes as codes


def listed(help_text: str) -> set[int]:
    """The codes a help text lists, one per line as `  N   meaning` (and `N: meaning`)."""
    found = {int(n) for n in re.findall(r"^\s{2}(\d+)\s", help_text, flags=re.MULTILINE)}
    found |= {int(n) for n in re.findall(r";\s(\d+):", help_text)}
    return found


RUN_CODES = {
    codes.EXIT_OK,
    codes.EXIT_WARNING,
    codes.EXIT_CRITICAL,
    codes.EXIT_UNKNOWN,
    codes.EXIT_USAGE,
    codes.EXIT_BUSY,
    codes.EXIT_CONFIG,
    codes.EXIT_INTERNAL,
}
HOLD_CODES = {
    codes.EXIT_USAGE,
    codes.EXIT_HOLD_OS_ERROR,
    codes.EXIT_HOLD_HELD,
    codes.EXIT_HOLD_STALE,
    codes.EXIT_NOT_EXECUTABLE,
    codes.EXIT_NOT_FOUND,
}


def test_a_runs_codes_are_distinct_and_follow_the_nagios_convention() -> None:
    assert len(RUN_CODES) == 8
    assert (codes.EXIT_OK, codes.EXIT_WARNING, codes.EXIT_CRITICAL, codes.EXIT_UNKNOWN) == (
        0,
        1,
        2,
        3,
    )


def test_holds_own_codes_are_distinct_and_never_a_signal_death() -> None:
    assert len(HOLD_CODES) == 6
    assert all(code < 128 for code in HOLD_CODES)  # 128+N is COMMAND's death by signal N


def test_the_help_lists_exactly_the_codes_a_run_uses() -> None:
    assert listed(codes.EXIT_CODES_HELP) == RUN_CODES


def test_holds_help_lists_exactly_its_own_codes() -> None:
    assert listed(codes.HOLD_EXIT_CODES_HELP) == HOLD_CODES


def test_every_name_the_module_exports_is_defined() -> None:
    assert all(hasattr(codes, name) for name in codes.__all__)
    defined = {
        name
        for name in vars(codes)
        if name.startswith(("EXIT_", "HOLD_EXIT", "INSPECT_EXIT", "WHY_EXIT"))
    }
    assert defined == set(codes.__all__)


def test_the_real_command_answers_with_the_tables_codes(tmp_path: Path) -> None:
    assert run_cli("--no-such-option").returncode == codes.EXIT_USAGE
    bad = write_config(tmp_path / "bad.toml", "[defaults]\nwarn_after = 'soon'\n")
    assert run_cli("--once", "--config", bad).returncode == codes.EXIT_CONFIG
    assert "exit codes" in run_cli("--help").stdout
