"""Attack 2 of docs/security.md: a file name that forges what on-call reads in a terminal.

A local user holds a lock on a file of hers whose name moves the cursor up, erases the line
and writes an `action` row of its own, and makes a second process of hers wait on it past
[host] blocked_after: a blocked writer root's lockwarden reports. Shown in a real terminal
(tmux), the report and `why` must read exactly as the bytes they printed: every character a
terminal would act on is escaped (support/escape.py), so no line is moved, erased or forged.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import (
    FLOCK_HOLDER,
    Children,
    cli_env,
    require_tool,
    run_cli,
    wait_until,
    write_config,
)
from integration.test_why import WAITER, blocked_in_lock_call
from lockwarden.support.escape import visible
from security.conftest import User

# Up one line, erase it, back to its start, and write a row the report never wrote; then an
# OSC title, a bell and a right-to-left override for good measure.
FORGED = "kill -9 -1"
HOSTILE = f"q\x1b[1A\x1b[2K\r            action   {FORGED}\n\x1b]0;pwned\x07\u202ex"


def _blocked_on(lock: Path, attacker: User, children: Children) -> int:
    """Her holder of `lock` and her writer waiting behind it; the waiter's PID."""
    python = sys.executable
    children.start(attacker.command(python, "-c", FLOCK_HOLDER, str(lock)), ready="ready")
    waiter = children.start(
        attacker.command(python, "-c", WAITER, str(lock), "flock"), ready="ready"
    )
    assert wait_until(lambda: blocked_in_lock_call(waiter.pid), timeout=10)
    return waiter.pid


def _on_a_terminal(argv: list[str], out: Path) -> list[str]:
    """What a real terminal (a tmux pane) shows once `argv` has printed to it, its output
    also kept in `out`; the pane's lines, wrapped ones joined, trailing blanks cut."""
    tmux = require_tool("tmux")
    socket = f"lw-term-{os.getpid()}"
    script = f"{subprocess.list2cmdline(argv)} | tee {out}; printf '%s\\n' ==END==; sleep 120"
    env = cli_env(TERM="xterm-256color")
    base = [tmux, "-L", socket, "-f", "/dev/null"]
    subprocess.run(
        [*base, "new-session", "-d", "-x", "400", "-y", "100", "sh", "-c", script],
        check=True,
        env=env,
        timeout=30,
    )
    try:

        def shown() -> list[str]:
            pane = subprocess.run(
                [*base, "capture-pane", "-p", "-J", "-S", "-"],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            ).stdout
            return [line.rstrip() for line in pane.splitlines()]

        assert wait_until(lambda: "==END==" in shown(), timeout=60), shown()
        screen = shown()
        return screen[: screen.index("==END==")]
    finally:
        subprocess.run([*base, "kill-server"], env=env, timeout=30, check=False)


def _printed(out: Path) -> list[str]:
    return [line.rstrip() for line in out.read_bytes().decode().splitlines()]


def test_a_forging_file_name_reads_as_data_in_the_report_and_in_why(
    attacker: User, attackers_dir: Path, children: Children, tmp_path: Path
) -> None:
    lock = attackers_dir / HOSTILE
    waiter = _blocked_on(lock, attacker, children)
    quiet = tmp_path / "quiet.lock"
    quiet.touch()
    config = write_config(
        tmp_path / "config.toml",
        f'[state]\npath = "{tmp_path / "state.jsonl"}"\n'
        '[host]\nblocked_after = "10m"\n'
        f'[[lock]]\nname = "quiet"\npath = "{quiet}"\nformat = "kernel"\n',
    )
    start = datetime.now(UTC)
    for minute in (0, 2, 5, 8):  # runs a timer would make: the wait is seen throughout
        run_cli(
            "--once", "--config", config, "--now", (start + timedelta(minutes=minute)).isoformat()
        )
    later = (start + timedelta(minutes=11)).isoformat()
    lockwarden = [sys.executable, "-m", "lockwarden"]

    report = _on_a_terminal(
        [*lockwarden, "--once", "--config", config, "--now", later], tmp_path / "r"
    )
    printed = _printed(tmp_path / "r")
    mine = [line for line in printed if str(attackers_dir) in line]
    assert mine, printed  # her blocked writer is reported, its path in it
    assert report == printed  # the terminal acted on nothing: what it shows is what was printed
    actions = [line.split()[1:] for line in report if line.split()[:1] == ["action"]]
    assert FORGED.split() not in actions, report

    why = _on_a_terminal([*lockwarden, "why", str(waiter)], tmp_path / "w")
    said = _printed(tmp_path / "w")
    assert any(str(attackers_dir) in line for line in said), said
    assert why == said
    assert not any(line.strip().startswith("action") for line in why), why


def test_visible_escapes_what_a_terminal_acts_on_and_keeps_the_rest() -> None:
    """Random strings of control, format and separator characters, surrogates (a non-UTF-8
    file name's bytes) and ordinary text: the result is one printable line, in which the
    printable characters of the input appear, in order, as they were."""
    rng = random.Random(7)
    alphabet = [chr(code) for code in (*range(0, 0x80), 0x85, 0x9B, 0xA0, 0x200B, 0x202E, 0x2028)]
    alphabet += ["\udcff", "é", "漢"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        shown = visible(text)
        assert shown.isprintable(), repr(shown)
        rest = iter(shown)
        assert all(char in rest for char in text if char.isprintable()), (text, shown)
        assert (shown == text) == text.isprintable()
