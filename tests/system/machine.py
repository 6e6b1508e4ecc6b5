"""Debian releases booted under a real systemd, for the tests that install the .deb and drive
the shipped units.

Root file systems are built with mmdebstrap (`--variant=minbase`, the packages listed in
`rootfs-packages.txt`, from the Debian mirror this machine's apt uses) and cached in
`$LOCKWARDEN_TEST_CACHE` (default `/var/cache/lockwarden-tests`), one directory per release
named after a hash of the package list, the mirror and the build options: a change to any of
them builds a new one (about a minute per release) and removes the old one.

Each boot runs on a plain `cp -a` copy of the cached tree. Never an overlay: with layers on
different file systems `stat()` reports the upper layer's device while `/proc/locks` reports the
overlay's, and every held lock would read free. systemd-nspawn runs in cgroup directories of its
own (`--keep-unit` puts its `payload/` and `supervisor/` below the cgroup it starts in), with a
unified cgroup hierarchy as a real Debian host has, its own loopback (`--private-network`), and
is stopped by SIGTERM to its PID (a clean power-off); the copy and the cgroup directories are
removed afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from buildenv import build_environment

HERE = Path(__file__).resolve().parent
PACKAGES = HERE / "rootfs-packages.txt"
CACHE = Path(os.environ.get("LOCKWARDEN_TEST_CACHE", "/var/cache/lockwarden-tests"))
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
INSIDE_ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "SYSTEMD_PAGER=", "TERM=dumb"]
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
BUILD_TIMEOUT = 900


def packages() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in PACKAGES.read_text().splitlines())
    return [line for line in lines if line]


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine's apt uses (one-line or deb822 sources)."""
    if override := os.environ.get("LOCKWARDEN_TEST_MIRROR"):
        return override
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for file in files:
        if not file.is_file():
            continue
        for uri in re.findall(
            r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+)", file.read_text(), re.M
        ):
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise RuntimeError("no Debian mirror in /etc/apt/sources.list(.d); set LOCKWARDEN_TEST_MIRROR")


def mmdebstrap_command(release: str, target: Path, mirror: str) -> list[str]:
    """The recipe of a release's tree (the cache key); how loudly it is built is not part of it."""
    return [
        "mmdebstrap",
        "--variant=minbase",
        f"--keyring={KEYRING}",
        f"--include={','.join(packages())}",
        release,
        str(target),
        mirror,
    ]


def rootfs_key(release: str) -> str:
    recipe = " ".join(mmdebstrap_command(release, Path("TARGET"), debian_mirror()))
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def cached_rootfs(release: str) -> Path:
    """The root file system of a release, built on first use and whenever its recipe changes."""
    CACHE.mkdir(parents=True, exist_ok=True, mode=0o755)
    wanted = CACHE / f"{release}-{rootfs_key(release)}"
    with open(CACHE / f"{release}.build-lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # two test runs never build the same tree at once
        if not (wanted / "etc" / "os-release").exists():
            build(release, wanted)
        for old in CACHE.glob(f"{release}-*"):
            if old.is_dir() and old != wanted:
                shutil.rmtree(old, ignore_errors=True)
            elif old.is_file() and not old.name.startswith(wanted.name):
                old.unlink()  # an older recipe's build log
    return wanted


def build(release: str, wanted: Path) -> None:
    """Build a release's tree at `wanted` from nothing, in an environment of its own.

    mmdebstrap runs verbosely into `wanted`.build.log (kept beside the tree): a maintainer
    script that fails says why there, and the error quotes the log's tail."""
    partial = wanted.with_name(wanted.name + ".partial")
    log = wanted.with_name(wanted.name + ".build.log")
    shutil.rmtree(partial, ignore_errors=True)
    command = mmdebstrap_command(release, partial, debian_mirror())
    with open(log, "w") as output:
        built = subprocess.run(
            [command[0], "--verbose", *command[1:]],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=build_environment(),
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    if built.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(
            f"mmdebstrap {release} exited {built.returncode}; the last lines of {log}:\n"
            + log_tail(log)
        )
    partial.rename(wanted)


def log_tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Machine:
    """One booted container: a copy of a cached root file system under systemd-nspawn."""

    name: str
    root: Path
    console: Path
    nspawn: subprocess.Popen[bytes] | None = None
    leader: int | None = None

    @property
    def flags(self) -> list[str]:
        where = ["-D", str(self.root), "-M", self.name]
        return [
            *where,
            "--register=no",
            "--keep-unit",
            "--private-network",
            "--console=passive",
            "-b",
        ]

    @property
    def cgroups(self) -> list[Path]:
        return [base / self.name for base in CGROUP_ROOTS]

    def boot(self, timeout: float = 60) -> float:
        """Start the container; return the seconds until systemd says it is up."""
        for cgroup in self.cgroups:
            cgroup.mkdir()
        started = time.monotonic()
        enter_cgroups = " && ".join(f'echo $$ > "{path}/cgroup.procs"' for path in self.cgroups)
        with open(self.console, "wb") as console:
            self.nspawn = subprocess.Popen(
                ["sh", "-c", f'{enter_cgroups} && exec systemd-nspawn "$@"', "sh", *self.flags],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"},
            )
        self.leader = self._wait_for_leader(started + timeout)
        while time.monotonic() < started + timeout:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return time.monotonic() - started
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not boot: {self.console.read_text()[-3000:]}")

    def _wait_for_leader(self, deadline: float) -> int:
        assert self.nspawn is not None
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise AssertionError(f"systemd-nspawn exited: {self.console.read_text()[-3000:]}")
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(self.nspawn.pid).children():
                    if child.name() == "systemd":
                        return child.pid
            time.sleep(0.05)
        raise AssertionError(f"no systemd in {self.name}: {self.console.read_text()[-3000:]}")

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container, as root, with a clean environment."""
        assert self.leader is not None
        completed = subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", "env", "-i", *INSIDE_ENV, *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and completed.returncode != 0:
            raise AssertionError(
                f"{argv} exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
            )
        return completed

    def sh(self, script: str, check: bool = True, timeout: float = 120) -> str:
        return self.run("sh", "-euc", script, check=check, timeout=timeout).stdout

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """Write a file inside the container (through its root directory, as root)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def stop(self) -> None:
        if self.nspawn is not None and self.nspawn.poll() is None:
            self.nspawn.send_signal(signal.SIGTERM)
            try:
                self.nspawn.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.nspawn.kill()
                self.nspawn.wait(timeout=10)
        for cgroup in self.cgroups:
            remove_cgroup(cgroup)
        shutil.rmtree(self.root, ignore_errors=True)


def remove_cgroup(top: Path) -> None:
    """Remove a cgroup directory tree depth first (cgroupfs allows only rmdir of empty ones)."""
    if not top.is_dir():
        return
    for directory, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


@contextlib.contextmanager
def booted(release: str, workdir: Path) -> Iterator[tuple[Machine, float]]:
    """A fresh copy of the release's cached tree, booted; yields it and its boot seconds."""
    source = cached_rootfs(release)
    root = workdir / "root"
    subprocess.run(["cp", "-a", str(source), str(root)], check=True, timeout=300)
    machine = Machine(f"lw-{release}-{os.getpid()}", root, workdir / "console.log")
    try:
        seconds = machine.boot()
        yield machine, seconds
    finally:
        machine.stop()
