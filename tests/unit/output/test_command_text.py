"""`command_text` shows a holder's argv on one line: control characters escaped, long ones cut.
It only looks at the first limit + 1 characters (a report of 1,000 held locks must not escape
1,000 whole scripts); that shortcut must not change a single output."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockwarden.model import command_text


def reference(cmdline: list[str], limit: int) -> str:
    """Escape everything, then cut: the plain statement of what command_text promises."""
    text = " ".join(cmdline)
    shown = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


@given(st.lists(st.text(max_size=40), max_size=8), st.integers(min_value=1, max_value=60))
def test_same_as_escaping_everything_then_cutting(cmdline: list[str], limit: int) -> None:
    assert command_text(cmdline, limit) == reference(cmdline, limit)


def test_a_forged_line_stays_on_one_line_and_long_scripts_are_cut() -> None:
    forged = command_text(["sh", "-c", "true\nOK  wa-store  free"])
    assert forged == "sh -c true\\nOK  wa-store  free"
    script = command_text(["python3", "-c", "x = 1\n" * 500])
    assert len(script) == 300 and script.endswith("…") and "\n" not in script
