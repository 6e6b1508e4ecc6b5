"""The Debian package under the shipped units on a live systemd, Debian 12 and Debian 13.

Each release boots once (machine.py: a root file system built with mmdebstrap and cached, a
copy of it under systemd-nspawn) and runs every scenario below in order, as an operator would:
`apt-get install ./lockwarden_….deb` on the release's own python3-psutil, python3-requests,
python3-tomli-w and apprise, a config in /etc/lockwarden, the notifier URL only in
/etc/credstore/lockwarden-notify-urls, `systemctl enable --now lockwarden.timer`. A real HTTP
receiver runs inside the container on its own loopback (apprise's json:// service), holders
are real services started with systemd-run, and every assertion is on what the receiver got,
what the journal says and what systemd reports. The scenarios use distinct locks, so they share
the boot; the timer runs throughout on a 10-second schedule (a test drop-in), so each check
waits for what it expects instead of assuming which run did it.

Test-only drop-ins: the timer's schedule, and an ExecStopPost= that writes each run's
$SERVICE_RESULT and $EXIT_STATUS to the journal (a static oneshot is unloaded after it runs, so
`systemctl show` cannot say how the last run ended).

Needs root, systemd-nspawn and mmdebstrap (tests/debian-packages.txt), and the Debian mirror
of /etc/apt/sources.list(.d) the first time (about a minute per release; cached after that in
/var/cache/lockwarden-tests, see machine.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from buildenv import build_environment
from conftest import require_tool, run_cli
from system.machine import Machine, booted

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RELEASES = ["bookworm", "trixie"]
PORT = 8080
RECEIVED = "/var/lib/receiver"
STATE = "/var/lib/lockwarden/state.jsonl"
UNIT_EXPOSURE_LIMIT = 2.9  # as tests/integration/test_systemd_units.py
WAIT_S = 40  # a 10-second timer, a run that may take a few seconds on a busy host

RESULT_DROP_IN = """[Service]
ExecStopPost=/bin/sh -c 'echo "lockwarden-test-result $SERVICE_RESULT $EXIT_STATUS"'
"""
# Every process that takes the watched locks runs in this container, as the documented
# declaration says (docs/design.md): else a flock nobody here holds reads unknown, since one
# taken outside the container's PID namespace would show nowhere in it.
NAMESPACE_DROP_IN = """[Service]
Environment=LOCKWARDEN_PID_NAMESPACE=complete
"""
TIMER_DROP_IN = """[Timer]
OnCalendar=
OnCalendar=*:*:0/10
RandomizedDelaySec=0
"""

CONFIG_HEAD = """[defaults]
warn_after = "1s"
critical_after = "2s"

[alerts]
repeat_interval = "0"
resolve_after = 1
unknown_after = 1
"""


@dataclass(frozen=True)
class Holder:
    """A lock in the config and the service that holds it."""

    lock: str
    path: str
    format: str
    unit: str
    command: list[str]
    properties: tuple[str, ...] = ()
    ready: str = ""  # the file whose existence says the lock is held


FLOCK = "/usr/local/bin/flock-holder"
HOLD = ["/usr/bin/lockwarden", "hold"]
HOLDERS = {
    "full": Holder(
        "store-full", "/srv/full/full.lock", "kernel", "holder-full.service",
        [FLOCK, "/srv/full/full.lock"], ready="/srv/full/full.lock.ready",
    ),
    "nocaps": Holder(
        "store-nocaps", "/srv/nocaps/nocaps.lock", "kernel", "holder-nocaps.service",
        [FLOCK, "/srv/nocaps/nocaps.lock"], ("CapabilityBoundingSet=",),
        ready="/srv/nocaps/nocaps.lock.ready",
    ),
    "other": Holder(
        "store-other", "/srv/other/other.lock", "kernel", "holder-other.service",
        [FLOCK, "/srv/other/other.lock"], ("User=lwother",), ready="/srv/other/other.lock.ready",
    ),
    "tmp": Holder(
        "store-tmp", "/tmp/lw-tmp/LOCK", "owner-record", "holder-tmp.service",
        [*HOLD, "/tmp/lw-tmp/LOCK", "--role", "tmp-job", "--", "sleep", "600"],
        ("User=lwother",), ready="/tmp/lw-tmp/LOCK/owner.json",
    ),
    "home": Holder(
        "store-home", "/home/lwuser/store/LOCK", "owner-record", "holder-home.service",
        [*HOLD, "/home/lwuser/store/LOCK", "--role", "home-job", "--", "sleep", "600"],
        ("User=lwuser",), ready="/home/lwuser/store/LOCK/owner.json",
    ),
    "stale": Holder(
        "store-stale", "/srv/stale/LOCK", "owner-record", "holder-stale.service",
        [*HOLD, "/srv/stale/LOCK", "--role", "doomed-job", "--", "sleep", "600"],
        ready="/srv/stale/LOCK/owner.json",
    ),
    "upgrade": Holder(
        "store-upgrade", "/srv/upgrade/upgrade.lock", "kernel", "holder-upgrade.service",
        [FLOCK, "/srv/upgrade/upgrade.lock"], ready="/srv/upgrade/upgrade.lock.ready",
    ),
    "timer": Holder(
        "store-timer", "/srv/timer/timer.lock", "kernel", "holder-timer.service",
        [FLOCK, "/srv/timer/timer.lock"], ready="/srv/timer/timer.lock.ready",
    ),
    "blind": Holder(
        "store-blind", "/srv/blind/blind.lock", "kernel", "holder-blind.service",
        [FLOCK, "/srv/blind/blind.lock"], ready="/srv/blind/blind.lock.ready",
    ),
    # flock(1)'s own idioms: flock takes the lock and exits, the shell (or the daemon it
    # execs) holds it. In the container's PID namespace /proc/locks leaves such a lock out.
    "exec-idiom": Holder(
        "store-exec-idiom", "/srv/idiom/exec.lock", "kernel", "holder-exec-idiom.service",
        ["/bin/sh", "-c", "exec 9>/srv/idiom/exec.lock; flock 9; "
         "touch /srv/idiom/exec.lock.ready; exec sleep 600"],
        ready="/srv/idiom/exec.lock.ready",
    ),
    "subshell-idiom": Holder(
        "store-subshell-idiom", "/srv/idiom/subshell.lock", "kernel",
        "holder-subshell-idiom.service",
        ["/bin/sh", "-c", "( flock -n 9 || exit 1; touch /srv/idiom/subshell.lock.ready; "
         "exec sleep 600 ) 9>/srv/idiom/subshell.lock"],
        ready="/srv/idiom/subshell.lock.ready",
    ),
}  # fmt: skip


def config_text() -> str:
    locks = "".join(
        f'\n[[lock]]\nname = "{h.lock}"\npath = "{h.path}"\nformat = "{h.format}"\n'
        for h in HOLDERS.values()
    )
    return CONFIG_HEAD + locks


@dataclass
class System:
    """One booted release with lockwarden installed, and what the scenarios measured."""

    release: str
    machine: Machine
    debs: dict[str, Path]
    started: float
    boot_s: float
    facts: dict[str, Any] = field(default_factory=dict)

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.machine.run("systemctl", *args, check=check)

    def start_holder(self, holder: Holder) -> int:
        properties = [f"--property={p}" for p in holder.properties]
        self.machine.run("systemd-run", f"--unit={holder.unit}", *properties, *holder.command)
        ready = wait_for(lambda: self.machine.run("test", "-e", holder.ready, check=False))
        assert ready.returncode == 0, f"{holder.unit} did not take {holder.path}"
        return int(self.systemctl("show", "-p", "MainPID", "--value", holder.unit).stdout)

    def cursor(self) -> str:
        shown = self.machine.run("journalctl", "--show-cursor", "-n", "0", "-q")
        return shown.stdout.strip().removeprefix("-- cursor: ")

    def journal(self, cursor: str, *match: str) -> str:
        return self.machine.run(
            "journalctl", "--no-pager", "-o", "cat", f"--after-cursor={cursor}", *match
        ).stdout

    def service_journal(self, cursor: str) -> str:
        return self.journal(cursor, "-u", "lockwarden.service")

    def await_journal(self, pattern: str, cursor: str) -> str:
        """The service's journal since cursor, once a line matches pattern (or the deadline)."""
        journal = wait_for(
            lambda: (
                (text := self.service_journal(cursor)) and re.search(pattern, text, re.M) and text
            )
        )
        assert journal, f"no {pattern!r} in:\n{self.service_journal(cursor)[-3000:]}"
        return str(journal)

    def received(self) -> list[dict[str, Any]]:
        path = self.machine.root / RECEIVED.lstrip("/") / "requests.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def delivered(self, hook: str, lock: str, kind: str) -> list[dict[str, Any]]:
        """Messages the receiver accepted (200) for one lock: kind 'alert' or 'resolved'."""
        found = []
        for request in self.received():
            body = request["body"]
            if request["path"] != hook or request["status"] != 200 or not isinstance(body, dict):
                continue
            title = body.get("title", "")
            if lock in title and (("resolved" in title.lower()) == (kind == "resolved")):
                found.append(body)
        return found

    def run_service(self) -> None:
        """One run now, through the unit (a timer run in progress may answer instead)."""
        self.systemctl("start", "lockwarden.service", check=False)


def wait_for(probe: Callable[[], Any], timeout: float = WAIT_S, interval: float = 0.5) -> Any:
    """Call probe until it returns something true (or a zero-exit process); return the last."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        done = result.returncode == 0 if isinstance(result, subprocess.CompletedProcess) else result
        if done or time.monotonic() > deadline:
            return result
        time.sleep(interval)


def finding(report: str, lock: str) -> str:
    """The last report block of one lock: its header line and the detail lines under it."""
    blocks = re.findall(
        rf"^  (?:OK|WARNING|CRITICAL|UNKNOWN)\s+{re.escape(lock)}\s.*\n(?:^ {{4,}}.*\n)*",
        report,
        re.M,
    )
    assert blocks, f"no finding for {lock} in:\n{report[-3000:]}"
    return str(blocks[-1])


@pytest.fixture(scope="session")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The checkout built twice: as its own version and as an earlier one to upgrade from."""
    require_tool("dpkg-deb")
    out = tmp_path_factory.mktemp("debs")
    version = re.search(r'__version__ = "(.+)"', (ROOT / "src/lockwarden/__init__.py").read_text())
    assert version is not None
    built = {}
    for name, deb_version in (("previous", f"{version.group(1)}~previous"), ("current", "")):
        env = build_environment(DEB_VERSION=deb_version) if deb_version else build_environment()
        result = subprocess.run(
            ["bash", str(ROOT / "packaging/build-deb.sh"), str(out / name)],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        built[name] = Path(result.stdout.strip())
    return built


def require_root_and_tools() -> None:
    for tool in ("systemd-nspawn", "mmdebstrap", "nsenter", "cp"):
        require_tool(tool)
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("booting a container needs root")
        pytest.skip("booting a container needs root")


@pytest.fixture(scope="module", params=RELEASES)
def system(
    request: pytest.FixtureRequest,
    debs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    system_figures: list[str],
) -> Iterator[System]:
    """A booted release with the previous package installed and configured, the timer enabled,
    the receiver running; its figures are recorded when the module is done with it."""
    require_root_and_tools()
    release = request.param
    started = time.monotonic()
    with booted(release, tmp_path_factory.mktemp(release)) as (machine, boot_s):
        system = System(release, machine, debs, started, boot_s)
        prepare(system)
        yield system
        figures = " ".join(f"{key} {value}" for key, value in system.facts.items())
        system_figures.append(f"{release}: boot {boot_s:.1f} s; {figures}")


def prepare(system: System) -> None:
    machine = system.machine
    for name in ("receiver.py", "flock_holder.py"):
        target = "/usr/local/bin/" + name.removesuffix(".py").replace("_", "-")
        machine.write(target, (HERE / name).read_text(), 0o755)
    for name, path in system.debs.items():
        shutil.copy(path, machine.root / "root" / f"{name}.deb")
    machine.sh(
        "useradd --create-home --shell /bin/sh lwuser && useradd --create-home lwother\n"
        "chmod 0700 /home/lwuser\n"
        "install -d -o lwuser -m 0700 /home/lwuser/store\n"
        "install -d -o lwother -m 0755 /srv/other /tmp/lw-tmp\n"
        "install -d /srv/full /srv/nocaps /srv/stale /srv/upgrade /srv/timer /srv/blind\n"
        "install -d /srv/idiom\n"
        f"systemd-run --unit=receiver /usr/local/bin/receiver {RECEIVED} {PORT}\n"
    )
    fresh = machine.run(
        "apt-get", "install", "-y", "-q", "--no-install-recommends", "/root/previous.deb"
    )
    # A fresh install leaves the timer disabled, and says nothing about not starting it.
    assert "not starting it" not in fresh.stdout + fresh.stderr, fresh.stdout + fresh.stderr
    machine.write("/etc/lockwarden/config.toml", config_text(), 0o644)
    machine.write(
        "/etc/credstore/lockwarden-notify-urls", f"json://127.0.0.1:{PORT}/system\n", 0o600
    )
    machine.write("/etc/systemd/system/lockwarden.service.d/test-result.conf", RESULT_DROP_IN)
    machine.write("/etc/systemd/system/lockwarden.service.d/namespace.conf", NAMESPACE_DROP_IN)
    machine.write("/etc/systemd/system/lockwarden.timer.d/test-schedule.conf", TIMER_DROP_IN)
    system.systemctl("daemon-reload")
    system.systemctl("enable", "--now", "lockwarden.timer")


def installed_version(system: System) -> str:
    shown = system.machine.run("dpkg-query", "-W", "-f=${Version}", "lockwarden")
    return shown.stdout.strip()


def test_upgrade_keeps_the_timer_enabled_and_active_and_delivers_a_pending_retry(
    system: System,
) -> None:
    holder = HOLDERS["upgrade"]
    mark = system.cursor()
    (system.machine.root / RECEIVED.lstrip("/") / "status").write_text("503")
    pid = system.start_holder(holder)
    failed = wait_for(
        lambda: [r for r in system.received() if holder.lock in json.dumps(r["body"])]
    )
    assert failed and all(r["status"] == 503 for r in failed), failed
    system.await_journal(
        rf"^note: alert NOT delivered to \S+ \(.*\); will retry next run: .*{holder.lock}",
        mark,
    )
    assert not system.delivered("/system", holder.lock, "alert")

    mark = system.cursor()
    before = installed_version(system)
    upgraded = system.machine.run(
        "apt-get", "install", "-y", "-q", "--no-install-recommends", "/root/current.deb",
        check=False,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert before.endswith("~previous") and installed_version(system) != before
    enabled = system.systemctl("is-enabled", "lockwarden.timer", check=False)
    assert enabled.stdout.strip() == "enabled"
    active = system.systemctl("is-active", "lockwarden.timer", check=False)
    assert active.stdout.strip() == "active"

    (system.machine.root / RECEIVED.lstrip("/") / "status").unlink()
    alerts = wait_for(lambda: system.delivered("/system", holder.lock, "alert"))
    assert len(alerts) == 1, system.received()
    assert f"PID {pid}" in alerts[0]["message"] and holder.unit in alerts[0]["message"]
    journal = system.await_journal(rf"^note: alert delivered to \S+: .*{holder.lock}", mark)
    assert "undeliverable" not in journal and "no longer configured" not in journal, journal
    system.systemctl("stop", holder.unit)


def test_holders_of_every_kind_are_named_alerted_and_resolved(system: System) -> None:
    """Root with full capabilities, root with none, another user, /tmp, a record under /home:
    each named (PID, command, unit) in the journal and in the alert, through the credential
    alone (the config has no [notify]), then resolved once its holder stops."""
    kinds = ["full", "nocaps", "other", "tmp", "home"]
    mark = system.cursor()
    pids = {kind: system.start_holder(HOLDERS[kind]) for kind in kinds}
    # A kernel lock records no start: the first run sees it held, the next one knows it has
    # been held at least since then (the sighting memory), here past critical_after.
    system.run_service()
    time.sleep(2.5)
    system.run_service()
    for kind in kinds:
        holder = HOLDERS[kind]
        alerts = wait_for(lambda h=holder: system.delivered("/system", h.lock, "alert"))
        assert len(alerts) == 1, (kind, system.received())
        message = alerts[0]["message"]
        assert f"PID {pids[kind]}" in message and holder.unit in message, (kind, message)
        block = finding(system.service_journal(mark), holder.lock)
        assert re.match(rf"  CRITICAL\s+{holder.lock}\s+held_too_long\s", block), block
        assert f"PID {pids[kind]}" in block and holder.unit in block, block
        assert " ".join(holder.command) in block, block
        system.await_journal(rf"^note: alert delivered to \S+: .*{holder.lock}", mark)
    journal = system.service_journal(mark)
    assert "alerting is off" not in journal and "cannot be named" not in journal, journal
    # The README's own command shows the critical locks, and nothing that is fine.
    warned = system.journal(mark, "-u", "lockwarden", "-p", "warning")
    for kind in kinds:
        assert re.search(rf"CRITICAL\s+{HOLDERS[kind].lock}\s+held_too_long", warned), warned
    assert not re.search(r"^  OK ", warned, re.M), warned
    # Each lock is one entry with fields: `journalctl LOCKWARDEN_LOCK=NAME` finds it, with
    # its state, holder and action, and `-u lockwarden` counts it as the unit's.
    for kind in kinds:
        holder = HOLDERS[kind]
        shown = system.machine.run(
            "journalctl", "--no-pager", "-o", "json", f"--after-cursor={mark}",
            "-u", "lockwarden.service", f"LOCKWARDEN_LOCK={holder.lock}",
        ).stdout  # fmt: skip
        entries = [json.loads(line) for line in shown.splitlines()]
        assert entries, f"no entry with LOCKWARDEN_LOCK={holder.lock}"
        last = entries[-1]
        assert last["LOCKWARDEN_STATE"] == "held_too_long" and last["PRIORITY"] == "2", last
        assert last["LOCKWARDEN_HOLDER_PID"] == str(pids[kind]), last
        assert last["LOCKWARDEN_HOLDER_UNIT"] == holder.unit, last
        assert last["LOCKWARDEN_ACTION"].startswith(("systemctl stop", "kill")), last
        assert re.match(rf"  CRITICAL\s+{holder.lock}\s+held_too_long\s", last["MESSAGE"]), last

    mark = system.cursor()
    system.systemctl("stop", *(HOLDERS[kind].unit for kind in kinds))
    system.run_service()
    for kind in kinds:
        holder = HOLDERS[kind]
        resolved = wait_for(lambda h=holder: system.delivered("/system", h.lock, "resolved"))
        assert len(resolved) == 1, (kind, system.received())
        assert f"PID {pids[kind]}" in resolved[0]["message"], resolved[0]
        system.await_journal(rf"^  OK\s+{holder.lock}\s+free", mark)
        system.await_journal(rf"^note: resolved delivered to \S+: .*{holder.lock}", mark)


def test_a_flock_whose_taker_exited_is_held_inside_the_container(system: System) -> None:
    """The container has a PID namespace of its own, where the kernel leaves out of
    /proc/locks a lock whose taker (flock(1)) has exited while the shell it ran in, or the
    daemon that shell became, holds it. The installed unit reads the descriptors: held, the
    holder named, past critical_after; and `flock -n` agrees that it is held."""
    kinds = ["exec-idiom", "subshell-idiom"]
    mark = system.cursor()
    mains = {kind: system.start_holder(HOLDERS[kind]) for kind in kinds}
    for kind in kinds:
        listed = system.machine.sh(
            f"grep -c ':$(stat -c %i {HOLDERS[kind].path}) ' /proc/locks || true"
        )
        assert listed.strip() == "0", f"/proc/locks lists {kind}'s lock: {listed}"
    system.run_service()
    time.sleep(2.5)
    system.run_service()
    for kind in kinds:  # the timer runs too: a run of ours may have been skipped (75)
        system.await_journal(rf"^  CRITICAL\s+{HOLDERS[kind].lock}\s+held_too_long\s", mark)
    journal = system.service_journal(mark)
    for kind in kinds:
        holder = HOLDERS[kind]
        block = finding(journal, holder.lock)
        assert re.match(rf"  CRITICAL\s+{holder.lock}\s+held_too_long\s", block), block
        assert holder.unit in block and "sleep 600" in block, block
        probe = system.machine.run("flock", "-n", holder.path, "true", check=False)
        assert probe.returncode != 0, f"{holder.path} is not held after all"
    assert f"PID {mains['exec-idiom']}" in finding(journal, HOLDERS["exec-idiom"].lock)
    system.systemctl("stop", *(HOLDERS[kind].unit for kind in kinds))


DB_PASSWORD = "lw-db-Secret-1"
DB_LOCKS = """
[[lock]]
name = "db-socket"
database = "postgresql"
connection = "host=/var/run/postgresql dbname=postgres user=lockwarden"
password_file = "/etc/lockwarden/db-password"
advisory_key = "prisma"

[[lock]]
name = "db-tcp"
database = "postgresql"
connection = "host=127.0.0.1 dbname=postgres user=lockwarden"
password_file = "/etc/lockwarden/db-password"
advisory_key = 4242
"""


def prepare_postgresql(system: System) -> None:
    """The container's PostgreSQL up, with a `lockwarden` role that logs in by password over
    the socket and TCP and may see other roles' sessions (idempotent: any test may be first)."""
    system.machine.sh(
        "timeout 60 sh -c 'until pg_isready -q; do sleep 0.2; done'\n"
        'if ! runuser -u postgres -- psql -XtAc "SELECT 1 FROM pg_roles WHERE rolname = '
        "'lockwarden'\" | grep -q 1; then\n"
        '  runuser -u postgres -- psql -Xq -c "CREATE ROLE lockwarden LOGIN PASSWORD '
        f"'{DB_PASSWORD}'\" -c 'GRANT pg_read_all_stats TO lockwarden'\n"
        "  sed -i '1i local all lockwarden scram-sha-256' /etc/postgresql/*/main/pg_hba.conf\n"
        "  runuser -u postgres -- psql -Xq -c 'SELECT pg_reload_conf()'\n"
        "fi\n"
    )


def start_database_holder(system: System, unit: str, *psql: str, user: str = "postgres") -> int:
    """A psql that takes an advisory lock and keeps its session, as a service of its own."""
    system.machine.run(
        "systemd-run", f"--unit={unit}", f"--property=User={user}",
        f"--setenv=PGPASSWORD={DB_PASSWORD}", "psql", "-X", "-d", "postgres", *psql,
    )  # fmt: skip
    return int(system.systemctl("show", "-p", "MainPID", "--value", unit).stdout)


def test_database_locks_are_checked_under_the_unit_over_the_socket_and_tcp(
    system: System,
) -> None:
    """PostgreSQL in the container, reached over its default local socket and over TCP, by
    the installed unit (its address families, its sandbox): each holder is named down to its
    psql process and the unit it runs in, past critical_after."""
    machine = system.machine
    prepare_postgresql(system)
    machine.write("/etc/lockwarden/db-password", DB_PASSWORD + "\n", 0o600)
    machine.sh(f"cat >> /etc/lockwarden/config.toml <<'EOF'\n{DB_LOCKS}EOF\n")
    holders = {
        "db-socket": ("holder-db-socket.service", start_database_holder(
            system, "holder-db-socket.service",
            "-c", "SELECT pg_advisory_lock(72707369)", "-c", "SELECT pg_sleep(600)",
        )),
        "db-tcp": ("holder-db-tcp.service", start_database_holder(
            system, "holder-db-tcp.service", "-h", "127.0.0.1", "-U", "lockwarden",
            "-c", "SELECT pg_advisory_lock(4242)", "-c", "SELECT pg_sleep(600)",
        )),
    }  # fmt: skip
    mark = system.cursor()
    system.run_service()
    time.sleep(2.5)
    system.run_service()
    for lock in holders:  # the timer runs too: a run of ours may have been skipped (75)
        system.await_journal(rf"^  CRITICAL\s+{lock}\s+held_too_long\s", mark)
    journal = system.service_journal(mark)
    assert "Address family not supported" not in journal, journal
    for lock, (unit, pid) in holders.items():
        block = finding(journal, lock)
        assert re.match(rf"  CRITICAL\s+{lock}\s+held_too_long\s", block), block
        assert f"PID {pid}" in block and unit in block, block
    system.systemctl("stop", *(unit for unit, _pid in holders.values()))


MARIADB_LOCKS = """
[[lock]]
name = "mdb-tcp"
database = "mysql"
connection = "mysql://lockwarden@127.0.0.1:3306"
password_file = "/etc/lockwarden/db-password"
lock_name = "lw-deploy"

[[lock]]
name = "mdb-socket"
database = "mysql"
connection = "mysql://lockwarden@localhost?unix_socket=/run/mysqld/mysqld.sock"
password_file = "/etc/lockwarden/db-password"
lock_name = "lw-socket"
"""


def test_mariadb_locks_are_checked_under_the_unit_over_the_socket_and_tcp(
    system: System,
) -> None:
    """MariaDB in the container, asked by the installed unit over its default socket and over
    TCP: a TCP client is named down to its process and unit; a client on the socket is a
    session MariaDB serves as a thread, whose process no socket leads to, and says so."""
    machine = system.machine
    # MariaDB records user locks only with the performance schema's metadata-lock instrument,
    # off by default (docs/databases.md): as an operator turns it on.
    machine.write(
        "/etc/mysql/mariadb.conf.d/99-lockwarden.cnf",
        "[mariadbd]\nperformance_schema = ON\n"
        "performance-schema-instrument = 'wait/lock/metadata/sql/mdl=ON'\n",
    )
    machine.sh(
        "systemctl restart mariadb\n"
        "timeout 60 sh -c 'until mariadb-admin ping >/dev/null 2>&1; do sleep 0.2; done'\n"
        "mariadb -e \"CREATE USER IF NOT EXISTS 'lockwarden'@'localhost' IDENTIFIED BY "
        f"'{DB_PASSWORD}'; CREATE USER IF NOT EXISTS 'lockwarden'@'127.0.0.1' IDENTIFIED BY "
        f"'{DB_PASSWORD}'; GRANT PROCESS ON *.* TO 'lockwarden'@'localhost', "
        "'lockwarden'@'127.0.0.1'; GRANT SELECT ON performance_schema.* TO "
        "'lockwarden'@'localhost', 'lockwarden'@'127.0.0.1'\"\n"
    )
    machine.write("/etc/lockwarden/db-password", DB_PASSWORD + "\n", 0o600)
    config = machine.root / "etc/lockwarden/config.toml"
    before = config.read_text()
    config.write_text(before + MARIADB_LOCKS)
    try:
        mariadb_scenario(system)
    finally:
        config.write_text(before)  # later runs must not ask a stopped server
        system.systemctl("stop", "holder-mdb-tcp.service", "holder-mdb-socket.service", check=False)
        machine.sh("systemctl stop mariadb")


def mariadb_scenario(system: System) -> None:
    machine = system.machine
    units = {"mdb-tcp": "holder-mdb-tcp.service", "mdb-socket": "holder-mdb-socket.service"}
    client = {
        "mdb-tcp": ["-h", "127.0.0.1", "-u", "lockwarden", f"-p{DB_PASSWORD}",
                    "-e", "SELECT GET_LOCK('lw-deploy', 0); SELECT SLEEP(600)"],
        "mdb-socket": ["-e", "SELECT GET_LOCK('lw-socket', 0); SELECT SLEEP(600)"],
    }  # fmt: skip
    pids = {}
    for lock, unit in units.items():
        machine.run("systemd-run", f"--unit={unit}", "mariadb", *client[lock])
        pids[lock] = int(system.systemctl("show", "-p", "MainPID", "--value", unit).stdout)
    held = wait_for(
        lambda: (
            machine.run(
                "mariadb",
                "-N",
                "-e",
                "SELECT IS_USED_LOCK('lw-deploy') AND IS_USED_LOCK('lw-socket')",
            ).stdout.strip()
            == "1"
        )
    )
    assert held, "the MariaDB holders did not take their locks"
    mark = system.cursor()
    system.run_service()
    time.sleep(2.5)
    system.run_service()
    for lock in units:
        system.await_journal(rf"^  (CRITICAL|UNKNOWN)\s+{lock}\s", mark)
    journal = system.service_journal(mark)
    assert "Address family not supported" not in journal, journal
    tcp = finding(journal, "mdb-tcp")
    assert re.match(r"  CRITICAL\s+mdb-tcp\s+held_too_long\s", tcp), tcp
    assert f"PID {pids['mdb-tcp']}" in tcp and units["mdb-tcp"] in tcp, tcp
    socket_block = finding(journal, "mdb-socket")
    assert "the unix socket" in socket_block and "threads" in socket_block, socket_block
    assert f"PID {pids['mdb-socket']}" not in socket_block, socket_block  # never a guess


def test_the_host_names_a_holder_inside_the_booted_container_and_spares_the_container(
    system: System,
) -> None:
    """lockwarden on the host (this checkout) judging a file of the booted container: the
    holder, a unit inside the container, is named with the container beside its host PID and
    its unit; the action stops it alone (by its host PIDs: systemd-machined does not know
    this container, so no `machinectl` or `systemctl -M` reaches it), and the container runs
    on."""
    machine = system.machine
    holder = Holder(
        "store-hostview", "/srv/hostview/host.lock", "kernel", "holder-hostview.service",
        [FLOCK, "/srv/hostview/host.lock"], ready="/srv/hostview/host.lock.ready",
    )  # fmt: skip
    machine.run("install", "-d", "/srv/hostview")
    inside = system.start_holder(holder)
    path = machine.root / "srv/hostview/host.lock"
    completed = run_cli(
        "inspect", str(path), "--json", "--warn-after", "0s", "--critical-after", "0s"
    )
    [found] = json.loads(completed.stdout)["locks"]
    [named] = found["holders"]
    status = Path(f"/proc/{named['pid']}/status").read_text()
    assert re.search(rf"^NSpid:\s+{named['pid']}\s+{inside}$", status, re.M), status
    assert named["unit"] == holder.unit
    assert named["container"] == {
        "runtime": "systemd-nspawn", "name": machine.name, "id": None, "init": False,
    }  # fmt: skip
    assert f"systemd-nspawn container {machine.name}" in found["reason"]
    # a unit's main process leads its process group: the group goes, the container stays
    assert found["action"]["argv"] == ["kill", "-TERM", "--", f"-{named['pid']}"], found["action"]
    subprocess.run(found["action"]["argv"], check=True, timeout=30)
    gone = wait_for(lambda: machine.run("flock", "-n", holder.path, "true", check=False))
    assert gone.returncode == 0, "the lock is still held"
    state = machine.run("systemctl", "is-system-running", check=False).stdout.strip()
    assert state in ("running", "degraded"), state  # the container runs on


def test_a_killed_holder_is_stale_with_proof(system: System) -> None:
    holder = HOLDERS["stale"]
    pid = system.start_holder(holder)
    mark = system.cursor()
    system.systemctl("kill", "--signal=KILL", holder.unit)
    wait_for(lambda: system.systemctl("is-active", holder.unit, check=False).returncode != 0)
    system.run_service()
    alerts = wait_for(lambda: system.delivered("/system", holder.lock, "alert"))
    assert len(alerts) == 1, system.received()
    assert "stale" in alerts[0]["title"].lower() and f"{pid}" in alerts[0]["message"], alerts[0]
    block = finding(system.service_journal(mark), holder.lock)
    assert re.match(rf"  CRITICAL\s+{holder.lock}\s+stale\s", block), block
    assert re.search(rf"^ +proof +PID {pid} is not running on this host", block, re.M), block


def test_the_timer_fires_on_its_schedule(system: System) -> None:
    """Nobody starts the service here: the timer's runs alone alert on a new holder."""
    holder = HOLDERS["timer"]
    mark = system.cursor()
    pid = system.start_holder(holder)
    alerts = wait_for(lambda: system.delivered("/system", holder.lock, "alert"))
    assert len(alerts) == 1 and f"PID {pid}" in alerts[0]["message"], system.received()
    runs = wait_for(lambda: system.journal(mark, "-u", "lockwarden.service").count(
        "lockwarden-test-result success"
    ) >= 2)  # fmt: skip
    assert runs, system.journal(mark, "-u", "lockwarden.service")
    shown = system.systemctl("show", "lockwarden.timer", "-p", "LastTriggerUSec", "--value")
    assert shown.stdout.strip() not in ("", "n/a"), shown.stdout
    system.systemctl("stop", holder.unit)


def test_a_skipped_run_succeeds_with_75_and_a_config_error_fails_with_78(system: System) -> None:
    """The unit's comment: 75 (another run holds the run lock) is not a failure; 78 is."""
    mark = system.cursor()
    # The marker is written once flock holds the run lock: a run in progress when the holder
    # started only delays it, and every run after that finds the lock taken.
    system.machine.run(
        "systemd-run", "--unit=runlock-holder", "/usr/bin/flock", "/var/lib/lockwarden/run.lock",
        "sh", "-c", "touch /run/runlock-held && exec sleep 600",
    )  # fmt: skip
    held = wait_for(lambda: system.machine.run("test", "-e", "/run/runlock-held", check=False))
    assert held.returncode == 0, "the run lock was not taken"
    started = system.systemctl("start", "lockwarden.service", check=False)
    assert started.returncode == 0, started.stderr
    journal = system.await_journal(r"^lockwarden-test-result success 75$", mark)
    assert "another lockwarden run is in progress" in journal, journal
    assert "lockwarden-test-result exit-code" not in journal, journal
    system.systemctl("stop", "runlock-holder.service")

    config = system.machine.root / "etc/lockwarden/config.toml"
    good = config.read_text()
    mark = system.cursor()
    config.write_text(good.replace('warn_after = "1s"', 'warn_afer = "1s"'))
    try:
        # A run that had read the good config before may answer this start; the next fails.
        system.systemctl("start", "lockwarden.service", check=False)
        journal = system.await_journal(r"^lockwarden-test-result exit-code 78$", mark)
        assert "defaults.warn_afer: unknown key; did you mean 'warn_after'?" in journal, journal
        failed = system.systemctl("is-failed", "lockwarden.service", check=False)
        assert failed.stdout.strip() == "failed", failed.stdout
    finally:
        config.write_text(good)
        system.systemctl("reset-failed", "lockwarden.service", check=False)
    active = system.systemctl("is-active", "lockwarden.timer", check=False)
    assert active.stdout.strip() == "active"


def test_user_units_with_lingering_keep_their_state_under_local_state(system: System) -> None:
    machine = system.machine
    uid = machine.run("id", "-u", "lwuser").stdout.strip()
    # As a unit: logind cannot place a caller that entered from outside the container.
    machine.run("systemd-run", "--wait", "--quiet", "loginctl", "enable-linger", "lwuser")
    bus = wait_for(
        lambda: machine.run("test", "-S", f"/run/user/{uid}/systemd/private", check=False)
    )
    assert bus.returncode == 0, "no user manager for lwuser"

    def user_systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return machine.run(
            "runuser", "-u", "lwuser", "--", "env", f"XDG_RUNTIME_DIR=/run/user/{uid}",
            "systemctl", "--user", *args, check=check,
        )  # fmt: skip

    # A database lock too, over TCP and over the socket, with a password only lwuser reads.
    prepare_postgresql(system)
    password = "/home/lwuser/.config/lockwarden/db-password"
    config = (
        CONFIG_HEAD + '\n[notify]\nurls = ["json://127.0.0.1:8080/user"]\n'
        '\n[[lock]]\nname = "own-store"\npath = "/home/lwuser/own.lock"\nformat = "kernel"\n'
        '\n[[lock]]\nname = "own-db-tcp"\ndatabase = "postgresql"\nadvisory_key = 4343\n'
        f'connection = "host=127.0.0.1 dbname=postgres user=lockwarden"\n'
        f'password_file = "{password}"\n'
        '\n[[lock]]\nname = "own-db-socket"\ndatabase = "postgresql"\nadvisory_key = 4344\n'
        f'connection = "host=/var/run/postgresql dbname=postgres user=lockwarden"\n'
        f'password_file = "{password}"\n'
    )
    machine.run(
        "install", "-d", "-o", "lwuser", "-m", "0700",
        "/home/lwuser/.config", "/home/lwuser/.config/lockwarden",
    )  # fmt: skip
    machine.run(
        "runuser", "-u", "lwuser", "--", "sh", "-c",
        "umask 077 && cat > /home/lwuser/.config/lockwarden/config.toml", stdin=config,
    )  # fmt: skip
    machine.run(
        "runuser", "-u", "lwuser", "--", "sh", "-c", f"umask 077 && cat > {password}",
        stdin=DB_PASSWORD + "\n",
    )  # fmt: skip
    db_pids = {
        lock: start_database_holder(
            system, f"holder-{lock}.service", *where,
            "-c", f"SELECT pg_advisory_lock({key})", "-c", "SELECT pg_sleep(600)",
            user="lwuser",  # a user unit may read its own user's descriptors only
        )
        for lock, key, where in (
            ("own-db-tcp", 4343, ("-h", "127.0.0.1", "-U", "lockwarden")),
            ("own-db-socket", 4344, ("-U", "lockwarden")),
        )
    }  # fmt: skip
    holder = Holder(
        "own-store", "/home/lwuser/own.lock", "kernel", "holder-own.service",
        [FLOCK, "/home/lwuser/own.lock"], ("User=lwuser",), ready="/home/lwuser/own.lock.ready",
    )  # fmt: skip
    pid = system.start_holder(holder)
    time.sleep(2.5)
    mark = system.cursor()
    user_systemctl("enable", "--now", "lockwarden.timer")
    # A kernel lock's hold is known from the sighting memory: one run sees it, the next (past
    # critical_after) knows it has been held at least that long.
    user_systemctl("start", "lockwarden.service", check=False)
    time.sleep(2.5)
    user_systemctl("start", "lockwarden.service", check=False)
    alerts = wait_for(lambda: system.delivered("/user", holder.lock, "alert"))
    assert len(alerts) == 1 and f"PID {pid}" in alerts[0]["message"], system.received()
    assert user_systemctl("is-active", "lockwarden.timer", check=False).stdout.strip() == "active"
    assert user_systemctl("is-failed", "lockwarden.service", check=False).stdout.strip() != (
        "failed"
    )
    home = machine.root / "home/lwuser"
    assert (home / ".local/state/lockwarden/state.jsonl").is_file()
    assert (home / ".local/state/lockwarden").stat().st_mode & 0o777 == 0o700
    assert not (home / ".config/lockwarden/state.jsonl").exists()
    journal = system.journal(mark, f"_UID={uid}")
    assert "own-store" in journal and "degraded" not in journal, journal
    # The user unit's sandbox lets it reach the server over TCP and the socket. A TCP client
    # of lwuser's is named (its socket is in /proc/net/tcp, its descriptors lwuser's own); on
    # the socket the way to the client is the backend's descriptors, postgres's, which only
    # root may read: the session is named, the client honestly not, never a guessed PID.
    for lock in db_pids:
        block = finding(journal, lock)
        assert re.match(rf"  CRITICAL\s+{lock}\s+held_too_long\s", block), block
    tcp = finding(journal, "own-db-tcp")
    assert f"PID {db_pids['own-db-tcp']}" in tcp and "holder-own-db-tcp.service" in tcp, tcp
    on_socket = finding(journal, "own-db-socket")
    assert "client not named" in on_socket and "run as root" in on_socket, on_socket
    assert f"PID {db_pids['own-db-socket']}" not in on_socket, on_socket
    assert "Address family not supported" not in journal, journal
    time.sleep(1)
    assert len(system.delivered("/user", holder.lock, "alert")) == 1
    system.systemctl("stop", holder.unit, *(f"holder-{lock}.service" for lock in db_pids))


DROP_INS = "/etc/systemd/system/lockwarden.service.d"
OPEN_STATE = "/var/lib/lw-open"  # a state directory elsewhere, as an operator may configure it


def receiver_answers(system: System) -> None:
    """The receiver accepts again (an earlier scenario may have left it refusing)."""
    (system.machine.root / RECEIVED.lstrip("/") / "status").unlink(missing_ok=True)


def notices(system: System, title_end: str) -> list[str]:
    """Titles of the "state degraded" / "usable again" notices the receiver accepted."""
    return [
        str(request["body"].get("title", ""))
        for request in system.received()
        if request["status"] == 200
        and isinstance(request["body"], dict)
        and title_end in str(request["body"].get("title", ""))
    ]


def test_an_unusable_state_directory_is_said_once_and_its_healing_once(system: System) -> None:
    """[state] path in a directory every user may write (refused: anyone could silence
    alerts). Three runs through the unit say it once (the memory of that lives in
    RuntimeDirectory=, the one writable place under /run), and healing it is said once."""
    machine = system.machine
    receiver_answers(system)
    machine.run("install", "-d", "-m", "0777", OPEN_STATE)
    machine.write(f"{DROP_INS}/state-elsewhere.conf", f"[Service]\nReadWritePaths={OPEN_STATE}\n")
    config = machine.root / "etc/lockwarden/config.toml"
    good = config.read_text()
    config.write_text(good + f'\n[state]\npath = "{OPEN_STATE}/state.jsonl"\n')
    system.systemctl("daemon-reload")
    try:
        mark = system.cursor()
        for _ in range(3):
            system.run_service()
        system.await_journal(r"state degraded: state directory \S+ is writable by every", mark)
        assert len(notices(system, "lockwarden state degraded")) == 1, system.received()
        runtime = machine.run("stat", "-c", "%a %U", "/run/lockwarden", check=False)
        assert runtime.stdout.split() == ["700", "root"], runtime  # kept after each run

        mark = system.cursor()
        machine.run("chmod", "0700", OPEN_STATE)
        system.run_service()
        healed = wait_for(lambda: notices(system, "lockwarden state usable again"))
        assert len(healed) == 1, system.received()
        system.run_service()
        journal = system.service_journal(mark)
        assert "state usable again" in journal, journal
        assert len(notices(system, "lockwarden state degraded")) == 1, system.received()
        assert len(notices(system, "lockwarden state usable again")) == 1, system.received()
    finally:
        config.write_text(good)
        (machine.root / DROP_INS.lstrip("/") / "state-elsewhere.conf").unlink()
        system.systemctl("daemon-reload")


def test_a_holder_the_unit_may_not_read_is_unknown_naming_cap_sys_ptrace(system: System) -> None:
    """The unit without capabilities (a drop-in) and a root service with all of them holding
    a lock past critical_after: not OK, CAP_SYS_PTRACE named, alerted; without the drop-in
    the holder is named again."""
    holder = HOLDERS["blind"]
    receiver_answers(system)
    system.machine.write(f"{DROP_INS}/no-caps.conf", "[Service]\nCapabilityBoundingSet=\n")
    system.systemctl("daemon-reload")
    try:
        pid = system.start_holder(holder)
        time.sleep(2.5)  # past critical_after
        mark = system.cursor()
        system.run_service()
        # Unknown ("maybe past its budget") on a first sighting; critical once the sighting
        # memory (the test timer's runs) knows it held at least that long. Never OK, and the
        # missing right is named either way.
        verdict = rf"^  (UNKNOWN|CRITICAL)\s+{holder.lock}\s"
        block = finding(system.await_journal(verdict, mark), holder.lock)
        assert "CAP_SYS_PTRACE" in block and f"PID {pid}" not in block, block
        alerts = wait_for(lambda: system.delivered("/system", holder.lock, "alert"))
        assert len(alerts) == 1 and "CAP_SYS_PTRACE" in alerts[0]["message"], system.received()
    finally:
        (system.machine.root / DROP_INS.lstrip("/") / "no-caps.conf").unlink()
        system.systemctl("daemon-reload")
    mark = system.cursor()
    system.run_service()
    journal = system.await_journal(rf"^  \w+\s+{holder.lock}\s+held\w*\s+.*PID {pid}", mark)
    block = finding(journal, holder.lock)
    assert holder.unit in block and "CAP_SYS_PTRACE" not in block, block
    system.systemctl("stop", holder.unit)


def exposure(output: str) -> float:
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", output)
    assert found is not None, output
    return float(found.group(1))


def test_exposure_of_the_installed_unit_live_and_offline(system: System) -> None:
    live = system.machine.run("systemd-analyze", "security", "--no-pager", "lockwarden.service")
    offline = system.machine.run(
        "systemd-analyze", "security", "--offline=yes", "--no-pager",
        "/lib/systemd/system/lockwarden.service",
    )  # fmt: skip
    system.facts["exposure live"] = exposure(live.stdout)
    system.facts["exposure offline"] = exposure(offline.stdout)
    assert system.facts["exposure live"] <= UNIT_EXPOSURE_LIMIT, live.stdout
    assert system.facts["exposure offline"] <= UNIT_EXPOSURE_LIMIT, offline.stdout
    system.facts["boot-to-verdict"] = f"{time.monotonic() - system.started:.0f} s"


def test_removal_needs_read_write_paths_under_the_unit_and_works_with_it(system: System) -> None:
    """docs/removal.md, as installed: under the shipped unit's ProtectSystem=strict a stale
    lock's removal is refused with the drop-in it needs named; with that drop-in
    (ReadWritePaths= of the lock's directory) the unit's own runs remove it."""
    machine = system.machine
    lock = "/srv/removal/LOCK"
    host = machine.run("hostname").stdout.strip()
    machine.run("mkdir", "-p", lock)
    machine.write(
        f"{lock}/owner.json",
        json.dumps(
            {"pid": 999999, "role": "gone", "host": host, "startedAt": "2026-01-01T00:00:00Z"}
        ),
    )
    config = machine.root / "etc/lockwarden/config.toml"
    good = config.read_text()
    config.write_text(
        good + f'\n[[lock]]\nname = "removal"\npath = "{lock}"\nformat = "owner-record"\n'
        'remove_stale = true\nstale_confirm = "1s"\n'
    )
    drop_in = machine.root / DROP_INS.lstrip("/") / "removal.conf"
    try:
        mark = system.cursor()
        for _ in range(2):  # two sightings, stale_confirm apart
            system.run_service()
            time.sleep(1.5)
        system.run_service()
        journal = system.await_journal(r"removal: .*Read-only file system", mark)
        assert "ReadWritePaths=" in finding(journal, "removal"), journal[-3000:]
        assert (machine.root / lock.lstrip("/")).is_dir()

        machine.write(f"{DROP_INS}/removal.conf", "[Service]\nReadWritePaths=/srv/removal\n")
        system.systemctl("daemon-reload")
        for _ in range(3):
            system.run_service()
            time.sleep(1.5)
        gone = wait_for(lambda: not (machine.root / lock.lstrip("/")).exists())
        assert gone, system.service_journal(mark)[-3000:]
    finally:
        config.write_text(good)
        drop_in.unlink(missing_ok=True)
        system.systemctl("daemon-reload")
        machine.run("rm", "-rf", "/srv/removal")
