"""A run every minute must not pay for what it does not use: no apprise, requests or tomli_w on
a quiet run (they are for sending and writing configs), none of them nor psutil on `import
lockwarden`. Checked by looking at sys.modules in a fresh interpreter, never by timing (the
benchmarks measure the cost: benchmarks/run.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import (
    FLOCK_HOLDER,
    MKDIR_HOLDER,
    Children,
    run_python,
    validate_report,
    write_config,
)

HEAVY = ("apprise", "requests", "tomli_w")

QUIET_RUN = """
import json, sys
from lockwarden.cli.commands import main
code = main(["--once", "--json", "--config", sys.argv[1]])
with open(sys.argv[2], "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def loaded(modules: list[str], package: str) -> list[str]:
    return [name for name in modules if name == package or name.startswith(package + ".")]


@pytest.mark.parametrize("alerting", [False, True], ids=["alerting-off", "alerting-on"])
def test_quiet_once_imports_neither_apprise_nor_requests(
    tmp_path: Path, children: Children, alerting: bool
) -> None:
    """A quiet run with held locks (so the descriptor scan and holder details run too); with
    alerting on it also takes the run lock, reads the journal and decides (nothing to send),
    and says what the last check of the notify URLs found, without loading apprise or the
    message renderer."""
    flock_file = tmp_path / "store.lock"
    flock_file.touch()
    children.python(FLOCK_HOLDER, str(flock_file))
    record = tmp_path / "wa" / "LOCK"
    record.parent.mkdir()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    children.python(MKDIR_HOLDER, str(record), "maintenance-job", started)
    config = write_config(
        tmp_path / "config.toml",
        f"""
        [[lock]]
        name = "store"
        path = "{flock_file}"
        format = "kernel"

        [[lock]]
        name = "wa"
        path = "{record}"
        """
        + (
            f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n'
            # the sighting memory of the held flock is written, alerting on or off
            + ('[notify]\nurls = ["json://127.0.0.1:9"]\n' if alerting else "")
        ),
    )
    Path(config).chmod(0o600)  # else the URL in it is rightly warned about (and logged)
    report = tmp_path / "modules.json"
    if alerting:  # the first run checks the notify URLs once (apprise), as check-config does
        assert run_python(QUIET_RUN, config, str(report)).returncode == 0
    completed = run_python(QUIET_RUN, config, str(report))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(report.read_text())
    document = validate_report(json.loads(completed.stdout))
    assert result["code"] == 0, document
    assert [lock["state"] for lock in document["locks"]] == ["held", "held"]
    assert "lockwarden.pipeline" in result["modules"]  # the list is real, not empty
    assert ("lockwarden.alerts.delivery" in result["modules"]) is alerting
    assert ("lockwarden.alerts.notify" in result["modules"]) is False  # nothing to send
    assert ("lockwarden.alerts.messages" in result["modules"]) is False  # nor to compose
    for package in HEAVY:
        assert loaded(result["modules"], package) == [], f"a quiet run imported {package}"


def test_import_lockwarden_loads_no_heavy_dependency() -> None:
    completed = run_python(
        """
        import json, sys
        import lockwarden
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert completed.returncode == 0, completed.stderr
    modules = json.loads(completed.stdout)
    assert "lockwarden" in modules
    for package in (*HEAVY, "psutil"):
        assert loaded(modules, package) == [], f"`import lockwarden` imported {package}"
