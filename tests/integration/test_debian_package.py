"""The Debian package: packaging/build-deb.sh builds it, its files land where Debian expects
them, and once installed with apt-get on this Debian machine `/usr/bin/lockwarden --once`
diagnoses a real held lock using Debian's own /usr/bin/python3 and python3-* libraries.

The install test changes this machine (apt-get install, then purge in teardown); it needs root
and apt-get, and refuses to run if a lockwarden package is already installed.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from buildenv import build_environment
from conftest import FLOCK_HOLDER, Children, require_tool, validate_report, write_config

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "packaging" / "build-deb.sh"
APT_OPTIONS = ["-y", "-q", "-o", "DPkg::Lock::Timeout=120", "--no-install-recommends"]
DEBIAN_PYTHON = "/usr/bin/python3"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}

EXPECTED = {
    "./usr/bin/lockwarden": "-rwxr-xr-x",
    "./usr/lib/python3/dist-packages/lockwarden/__init__.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/lockwarden/cli/commands.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/lockwarden/check/classify.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/lockwarden/formats/__init__.py": "-rw-r--r--",
    "./lib/systemd/system/lockwarden.service": "-rw-r--r--",
    "./lib/systemd/system/lockwarden.timer": "-rw-r--r--",
    "./usr/lib/systemd/user/lockwarden.service": "-rw-r--r--",
    "./usr/lib/systemd/user/lockwarden.timer": "-rw-r--r--",
    "./usr/share/doc/lockwarden/config.example.toml": "-rw-r--r--",
    "./usr/share/doc/lockwarden/copyright": "-rw-r--r--",
    "./usr/share/doc/lockwarden/README.md": "-rw-r--r--",
    "./usr/share/doc/lockwarden/docs/design.md": "-rw-r--r--",
    "./usr/share/doc/lockwarden/schema/report-v2.schema.json": "-rw-r--r--",
    "./usr/share/doc/lockwarden/examples/cron.d/lockwarden": "-rw-r--r--",
    "./usr/share/doc/lockwarden/examples/lockwarden.rules.yml": "-rw-r--r--",
    "./usr/share/doc/lockwarden/examples/lockwarden.tmpl": "-rw-r--r--",
    "./usr/share/doc/lockwarden/examples/lockwarden.inhibit.yml": "-rw-r--r--",
    "./usr/share/doc/lockwarden/docs/runbook.md": "-rw-r--r--",
    "./usr/share/man/man1/lockwarden.1.gz": "-rw-r--r--",
}


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, capture_output=True, text=True, timeout=300, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("dpkg-deb")
    out = tmp_path_factory.mktemp("deb")
    built = run(["bash", str(BUILD), str(out)])
    assert built.returncode == 0, built.stderr
    path = Path(built.stdout.strip())
    assert path.is_file() and path.parent == out
    return path


def contents(deb: Path) -> dict[str, str]:
    """Path in the package -> its mode string, from `dpkg-deb --contents`."""
    listed = run(["dpkg-deb", "--contents", str(deb)])
    assert listed.returncode == 0, listed.stderr
    entries = {}
    for line in listed.stdout.splitlines():
        fields = line.split()
        entries[fields[5]] = fields[0]
        assert fields[1] == "root/root", line
    return entries


def test_package_puts_every_file_in_its_place(deb: Path) -> None:
    entries = contents(deb)
    for path, mode in EXPECTED.items():
        assert entries.get(path) == mode, path
    assert entries["./"] == "drwxr-xr-x"
    package_modules = {
        path.split("dist-packages/", 1)[1]
        for path in entries
        if path.startswith("./usr/lib/python3/dist-packages/") and path.endswith(".py")
    }
    source_modules = {
        str(path.relative_to(ROOT / "src")) for path in (ROOT / "src" / "lockwarden").rglob("*.py")
    }
    assert package_modules == source_modules
    docs = "./usr/share/doc/lockwarden/docs/"  # every page the README links to, none left out
    assert entries[docs] == "drwxr-xr-x"
    shipped_docs = {path for path in entries if path.startswith(docs) and path != docs}
    assert shipped_docs == {docs + page.name for page in (ROOT / "docs").glob("*.md")}
    assert not any("__pycache__" in path or path.startswith("./etc/") for path in entries)


def test_package_depends_on_debians_python_libraries(deb: Path) -> None:
    field = run(["dpkg-deb", "--field", str(deb), "Depends", "Architecture", "Package"])
    assert field.returncode == 0, field.stderr
    assert field.stdout.splitlines() == [
        "Depends: python3 (>= 3.11), python3-psutil, python3-requests, python3-tomli-w, apprise",
        "Architecture: all",
        "Package: lockwarden",
    ]


def test_man_page_renders_without_warnings(deb: Path, tmp_path: Path) -> None:
    man = require_tool("man")
    extracted = run(["dpkg-deb", "--extract", str(deb), str(tmp_path)])
    assert extracted.returncode == 0, extracted.stderr
    page = tmp_path / "usr/share/man/man1/lockwarden.1.gz"
    assert gzip.decompress(page.read_bytes()).startswith(b".TH LOCKWARDEN 1")
    rendered = run(
        [man, "--warnings", "-E", "UTF-8", "-l", str(page)],
        env={**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"},
    )
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stderr == ""
    assert "EXIT STATUS" in rendered.stdout and "systemctl enable --now" in rendered.stdout


@pytest.fixture(scope="module")
def installed(deb: Path) -> Iterator[Path]:
    """The package installed with apt-get (pulling Debian's python3-* dependencies), purged
    after the module's tests whatever happens."""
    apt_get = require_tool("apt-get")
    if os.geteuid() != 0:
        message = "installing a .deb needs root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    already = run(["dpkg-query", "-W", "-f=${Status}", "lockwarden"])
    assert "installed" not in already.stdout, "a lockwarden package is already installed here"
    env = build_environment(DEBIAN_FRONTEND="noninteractive")  # the package's postinst runs
    result = run([apt_get, "install", *APT_OPTIONS, str(deb)], env=env)
    try:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        yield Path("/usr/bin/lockwarden")
    finally:
        purged = run([apt_get, "purge", *APT_OPTIONS, "lockwarden"], env=env)
        assert purged.returncode == 0, purged.stderr
        assert not os.path.exists("/usr/bin/lockwarden")
        assert not os.path.exists("/usr/lib/python3/dist-packages/lockwarden")


def test_installed_lockwarden_names_the_holder_of_a_held_lock(
    installed: Path, tmp_path: Path, children: Children
) -> None:
    lock = tmp_path / "store.lock"
    holder = children.python(FLOCK_HOLDER, str(lock))
    config = write_config(
        tmp_path / "config.toml",
        f'[defaults]\nwarn_after = "1m"\ncritical_after = "2m"\n'
        f'[[lock]]\nname = "store"\npath = "{lock}"\nformat = "kernel"\n'
        f'[state]\npath = "{tmp_path / "state" / "state.jsonl"}"\n',
    )
    assert Path(installed).read_text().startswith(f"#!{DEBIAN_PYTHON}\n")
    completed = run([str(installed), "--once", "--config", config, "--json"], env=CLEAN_ENV)
    assert completed.returncode == 0, completed.stderr
    [finding] = validate_report(json.loads(completed.stdout))["locks"]
    assert finding["state"] == "held"
    assert finding["holders"][0]["pid"] == holder.pid
    # A kernel lock escalates from the runs that saw it held (the state journal's sightings):
    # runs 50 s apart see it held at least 50 s, 100 s (warning), 150 s (critical).
    first = datetime.now(UTC)
    codes = []
    for seconds in (50, 100, 150):
        moment = (first + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        later = run(
            [str(installed), "--once", "--config", config, "--now", moment, "--json"],
            env=CLEAN_ENV,
        )
        codes.append(later.returncode)
    assert codes == [0, 1, 2], later.stdout + later.stderr
    [finding] = validate_report(json.loads(later.stdout))["locks"]
    assert finding["held"]["bound"] == "at_least" and finding["held"]["seconds"] >= 120, finding
    assert finding["action"]["argv"] == ["kill", str(holder.pid)]


def test_installed_lockwarden_uses_debians_own_libraries(installed: Path) -> None:
    probe = (
        "import apprise, lockwarden, psutil, requests, tomli_w, sys; "
        "print(sys.executable, lockwarden.__file__, psutil.__file__, psutil.__version__, "
        "requests.__version__, apprise.__version__)"
    )
    shown = run([DEBIAN_PYTHON, "-c", probe], env=CLEAN_ENV)
    assert shown.returncode == 0, shown.stderr
    executable, module, psutil_file, psutil_v, requests_v, apprise_v = shown.stdout.split()
    assert executable == DEBIAN_PYTHON
    assert module == "/usr/lib/python3/dist-packages/lockwarden/__init__.py"
    assert psutil_file.startswith("/usr/lib/python3/dist-packages/")
    if Path("/etc/debian_version").read_text().startswith("12."):
        assert (psutil_v[:3], requests_v[:4], apprise_v[:3]) == ("5.9", "2.28", "1.2")


def test_installed_units_verify_against_the_installed_command(installed: Path) -> None:
    analyze = require_tool("systemd-analyze")
    verified = run(
        [
            analyze,
            "verify",
            "--man=no",
            "/lib/systemd/system/lockwarden.service",
            "/lib/systemd/system/lockwarden.timer",
        ]
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == ""


def test_installed_init_then_check_config(installed: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert run([str(installed), "init", "--path", str(path)], env=CLEAN_ENV).returncode == 0
    checked = run([str(installed), "check-config", "--config", str(path)], env=CLEAN_ENV)
    assert checked.returncode == 0, checked.stderr
    assert shutil.which("lockwarden", path="/usr/bin") == str(installed)
