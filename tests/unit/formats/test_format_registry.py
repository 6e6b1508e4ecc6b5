"""The registry is explicit and lazy: every entry must load, under its own name."""

from __future__ import annotations

import subprocess
import sys

from conftest import cli_env
from lockwarden.formats import AUTO_ORDER, FORMATS, format_names


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
