"""The registry is explicit and lazy: every entry must load, under its own name."""

from __future__ import annotations

import subprocess
import sys

from conftest import cli_env
from lockwarden.check.advice import advise_holder
from lockwarden.formats import AUTO_ORDER, FORMATS, format_names
from lockwarden.formats.base import HolderAction, SafeAction
from lockwarden.model import Holder


def test_every_registered_format_loads_under_its_own_name() -> None:
    assert set(AUTO_ORDER) == set(FORMATS)
    for name in FORMATS:
        assert FORMATS[name].name == name
        assert FORMATS[name].summary
    assert format_names()[0] == "auto"


def test_a_run_of_kernel_locks_imports_no_other_format() -> None:
    code = (
        "import sys; from lockwarden.formats import read_claim; "
        "read_claim('/tmp', 'kernel', 4194304); "
        "print(sorted(m for m in sys.modules if m.startswith('lockwarden.formats.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True
    ).stdout
    assert "lockwarden.formats.kernel" in loaded
    for other in ("chromium", "borg", "sqlite", "postgres", "mercurial", "terraform"):
        assert f"lockwarden.formats.{other}'" not in loaded


def test_every_registered_format_declares_a_safe_action_for_its_holder() -> None:
    """The registry is the one list: each format says what may be done to a live holder past
    its budget, and why when that is more than stopping it (advice.py reads it)."""
    declared = {name: FORMATS[name].holder_action for name in FORMATS}
    for name, action in declared.items():
        assert isinstance(action, SafeAction), name
        assert action.kind in HolderAction, name
        if action.kind is not HolderAction.STOP:
            assert action.why, name
    waits = {name for name, action in declared.items() if action.kind is HolderAction.WAIT}
    assert waits == {"dpkg", "pacman"}  # package databases: never stopped mid-transaction
    assert declared["postgres"].kind is HolderAction.SHUTDOWN


def test_a_format_declaration_is_what_the_advice_says() -> None:
    bash = Holder(pid=4242, alive=True, name="bash")
    assert advise_holder(bash, (), "pacman").endswith(FORMATS["pacman"].holder_action.why)
    assert advise_holder(bash, (), "dpkg").startswith("wait for PID 4242 (bash) to finish")
    assert advise_holder(bash, (), "kernel") == "kill -HUP 4242"  # a shell: HUP, not TERM
    assert advise_holder(bash, (), "not-a-format") == "kill -HUP 4242"
