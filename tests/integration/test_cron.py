"""packaging/cron.d/lockwarden: a valid /etc/cron.d entry whose command sends lockwarden's
stderr (warnings, errors) to syslog and drops the report.

No cron daemon runs here; the entry's command is run with /bin/sh as cron would, with the real
lockwarden and `logger` replaced by a script that records its arguments and input, because no
syslog socket exists on this machine (that replacement is the only stand-in).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import SRC, write_config

ROOT = Path(__file__).resolve().parents[2]
CRON_FILE = ROOT / "packaging" / "cron.d" / "lockwarden"


def entries() -> list[list[str]]:
    """Schedule lines split into 5 time fields, the user and the command."""
    lines = [line for line in CRON_FILE.read_text().splitlines() if line and line[0] != "#"]
    jobs = [line for line in lines if not re.match(r"^[A-Z_]+=", line)]
    return [line.split(None, 6) for line in jobs]


def test_cron_file_has_one_minutely_root_job_without_flock() -> None:
    assert "." not in CRON_FILE.name  # run-parts (and so cron.d) skips names with dots
    [job] = entries()
    assert job[:5] == ["*"] * 5
    assert job[5] == "root"
    assert job[6].startswith("lockwarden --once")
    assert "flock" not in job[6]  # runs are serialised by lockwarden's own run lock


def test_cron_command_logs_stderr_and_drops_the_report(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lockwarden").write_text(
        f'#!/bin/sh\nPYTHONPATH={SRC} exec {sys.executable} -m lockwarden "$@"\n'
    )
    (bin_dir / "logger").write_text(
        f'#!/bin/sh\necho "$*" > {tmp_path}/args\ncat > {tmp_path}/logged\n'
    )
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    # A free lock (so there is a report) and a metrics file that cannot be written (an error).
    config = write_config(
        tmp_path / "config.toml",
        f'[prometheus]\ntextfile = "{tmp_path}/missing/l.prom"\n'
        f'[[lock]]\nname = "x"\npath = "{tmp_path}/LOCK"\n',
    )
    command = entries()[0][6].replace("lockwarden --once", f"lockwarden --once --config {config}")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    completed = subprocess.run(
        ["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "" and completed.stderr == ""
    assert "-t lockwarden" in (tmp_path / "args").read_text()
    logged = (tmp_path / "logged").read_text()
    assert logged.startswith("lockwarden: could not write the Prometheus textfile")
    assert logged.count("\n") == 1  # that error only: the report went to /dev/null
