"""The shipped systemd units: valid, hardened to an exposure of at most 2.9, and still able to
see what lockwarden inspects (/tmp, every process, /proc/locks, the boot id).

`systemd-analyze verify` and `security --offline=true` read unit files without a running
systemd, so these run in a container whose PID 1 is not systemd. Starting the unit for real
needs a running service manager, which this machine does not have: visibility is therefore
checked from systemd's own analysis of the unit and from its directives.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SYSTEM_UNITS, USER_UNITS, require_tool, unit_directives

ROOT = Path(__file__).resolve().parents[2]
# 2.0 without the two capabilities that name privileged holders (+0.5) and with systemd's
# ProtectKernelTunables=/ProtectControlGroups= instead of their spelled-out paths (+0.3).
MAX_EXPOSURE = 2.9  # 2.8 before AF_UNIX/AF_NETLINK, which database checks need


def runnable_copy(units: Path, destination: Path) -> list[str]:
    """Copies of the units whose ExecStart runs this checkout's lockwarden, so verify's check
    that the command exists tests a real program and not a path missing from a dev machine."""
    wrapper = destination / "bin" / "lockwarden"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT / "src"} exec {sys.executable} -m lockwarden "$@"\n'
    )
    wrapper.chmod(0o755)
    copies = []
    for unit in sorted(units.glob("lockwarden.*")):
        copy = destination / unit.name
        copy.write_text(unit.read_text().replace("/usr/bin/lockwarden", str(wrapper)))
        copies.append(str(copy))
    return copies


def analyze(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("systemd-analyze"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_system_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = runnable_copy(SYSTEM_UNITS, tmp_path)
    assert [Path(unit).name for unit in units] == ["lockwarden.service", "lockwarden.timer"]
    verified = analyze("verify", "--man=no", *units)
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == ""


def test_user_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = runnable_copy(USER_UNITS, tmp_path)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    # A user manager needs XDG_RUNTIME_DIR even to load units offline.
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    verified = analyze("verify", "--user", "--man=no", *units, env=env)
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == ""


def security_table(unit: Path) -> tuple[float, dict[str, str]]:
    """systemd's offline security review: the overall exposure and each check's mark."""
    reviewed = analyze("security", "--offline=true", "--no-pager", str(unit))
    assert reviewed.returncode == 0, reviewed.stderr
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d)", reviewed.stdout)
    assert exposure is not None, reviewed.stdout
    marks = {}
    for line in reviewed.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2 and parts[0] in ("✓", "✗"):
            marks[parts[1]] = parts[0]
    return float(exposure.group(1)), marks


def test_system_service_exposure_is_at_most_2_9() -> None:
    exposure, marks = security_table(SYSTEM_UNITS / "lockwarden.service")
    assert exposure <= MAX_EXPOSURE, f"exposure {exposure}: {marks}"
    for hardened in ("NoNewPrivileges=", "ProtectSystem=", "CapabilityBoundingSet=~CAP_SYS_ADMIN"):
        assert marks[hardened] == "✓", hardened


@pytest.mark.parametrize("units", [SYSTEM_UNITS, USER_UNITS], ids=["system", "user"])
def test_service_keeps_tmp_processes_and_proc_locks_visible(units: Path) -> None:
    """systemd's own review must mark these as *not* restricted, and no directive may hide
    /tmp, /proc or other processes by another route."""
    _, marks = security_table(units / "lockwarden.service")
    for visible in ("PrivateTmp=", "ProtectProc=", "ProcSubset=", "PrivateUsers="):
        assert marks[visible] == "✗", f"{visible} would hide what lockwarden inspects"
    directives = unit_directives(units / "lockwarden.service")
    for hiding in (
        "PrivateTmp",
        "ProtectProc",
        "ProcSubset",
        "PrivateUsers",
        "PrivatePIDs",
        "DynamicUser",
        "TemporaryFileSystem",
        "PrivateNetwork",
    ):
        assert hiding not in directives, hiding
    for path in " ".join(directives.get("InaccessiblePaths", [])).split():
        # Only the kernel's symbol table and memory image, as ProtectKernelTunables= hides them.
        assert path.lstrip("-") in ("/proc/kallsyms", "/proc/kcore"), path
    for path in " ".join(directives.get("ReadOnlyPaths", [])).split():
        # Read-only kernel tunables and /sys hide nothing; /proc itself, /tmp and /run stay as is.
        assert not re.fullmatch(r"-?/(proc|tmp|run)(/.*)?", path) or path.lstrip("-").startswith(
            (
                "/proc/sys",
                "/proc/sysrq-trigger",
                "/proc/latency_stats",
                "/proc/acpi",
                "/proc/apm",
                "/proc/asound",
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
            )
        ), path
    assert directives.get("ProtectHome", ["no"]) in (["no"], ["read-only"])


@pytest.mark.parametrize("units", [SYSTEM_UNITS, USER_UNITS], ids=["system", "user"])
def test_alert_states_are_not_unit_failures_but_config_errors_are(units: Path) -> None:
    directives = unit_directives(units / "lockwarden.service")
    assert directives["Type"] == ["oneshot"]
    assert "--once" in directives["ExecStart"][0].split()
    success = {int(code) for code in directives["SuccessExitStatus"][0].split()}
    assert success == {1, 2, 3, 75}  # warning, critical, unknown, another run in progress
    assert not success & {64, 70, 78}  # usage, internal and configuration errors fail it
    assert directives["UMask"] == ["0077"]
    assert "TimeoutStartSec" in directives


def test_system_service_state_directory_is_private() -> None:
    directives = unit_directives(SYSTEM_UNITS / "lockwarden.service")
    assert directives["StateDirectory"] == ["lockwarden"]
    assert directives["StateDirectoryMode"] == ["0700"]


def test_system_service_keeps_a_private_runtime_directory_between_runs() -> None:
    """ProtectSystem=strict leaves /run read-only: the memory of what a degraded run sent
    (alerting.runtime_directory) needs its own directory, kept after each oneshot run."""
    directives = unit_directives(SYSTEM_UNITS / "lockwarden.service")
    assert directives["ProtectSystem"] == ["strict"]
    assert directives["RuntimeDirectory"] == ["lockwarden"]
    assert directives["RuntimeDirectoryMode"] == ["0700"]
    assert directives["RuntimeDirectoryPreserve"] == ["yes"]


def test_user_service_keeps_state_under_local_state_not_state_directory() -> None:
    """systemd 252 puts a user unit's StateDirectory= under ~/.config, where lockwarden does
    not look; the unit makes ~/.local/state/lockwarden itself and says so to lockwarden."""
    directives = unit_directives(USER_UNITS / "lockwarden.service")
    assert "StateDirectory" not in directives
    assert directives["Environment"] == ["XDG_STATE_HOME=%h/.local/state"]
    assert directives["ExecStartPre"] == ["/bin/mkdir -p %h/.local/state/lockwarden"]


def test_system_service_keeps_a_containers_boot_id() -> None:
    """On systemd 252 ProtectKernelTunables= and ProtectControlGroups= mount a fresh /proc that
    drops a container's own boot id (every record then reads as from another boot); the unit
    makes the same paths read-only with ReadOnlyPaths=, which keeps what is mounted below."""
    directives = unit_directives(SYSTEM_UNITS / "lockwarden.service")
    assert "ProtectKernelTunables" not in directives and "ProtectControlGroups" not in directives
    read_only = " ".join(directives["ReadOnlyPaths"]).split()
    assert "/proc/sys" in read_only and "/sys" in read_only


def test_system_service_has_only_the_capabilities_that_name_holders() -> None:
    """CAP_SYS_PTRACE for other processes' fdinfo, CAP_DAC_READ_SEARCH for records in private
    directories; the calls that would use ptrace rights for more are filtered out."""
    directives = unit_directives(SYSTEM_UNITS / "lockwarden.service")
    assert directives["CapabilityBoundingSet"] == ["CAP_SYS_PTRACE CAP_DAC_READ_SEARCH"]
    assert directives.get("AmbientCapabilities", [""]) == [""]
    assert directives["NoNewPrivileges"] == ["yes"]
    denied = directives["SystemCallFilter"][-1]
    assert denied.startswith("~")
    for call in ("@debug", "process_vm_readv", "process_vm_writev"):
        assert call in denied.split(), call


@pytest.mark.parametrize("units", [SYSTEM_UNITS, USER_UNITS], ids=["system", "user"])
def test_timer_runs_every_minute_and_catches_up(units: Path) -> None:
    directives = unit_directives(units / "lockwarden.timer")
    assert directives["OnCalendar"] == ["minutely"]
    assert directives["Persistent"] == ["true"]
    assert "RandomizedDelaySec" in directives
    assert directives["WantedBy"] == ["timers.target"]
